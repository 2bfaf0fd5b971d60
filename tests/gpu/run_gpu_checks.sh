#!/usr/bin/env bash
# The GPU checks of issue 16, in one command, on a machine with an NVIDIA GPU and nvcc:
#
#   tests/gpu/run_gpu_checks.sh [OUT_DIR]        (default: $OUT if set, else /tmp/tfps_gpu_checks)
#
# 1. builds the CUDA code without TensorFlow (tools/native_build.py --gpu-checks: g++ and nvcc
#    only) and runs tests/gpu/gpu_checks.py: every codec on the GPU byte-identical to the CPU
#    codec, the GPU SFB rebuild bit-identical to NumPy, NCCL (one rank), staging overlap timed;
# 2. if the Python in use imports TensorFlow and sees a GPU: the CUDA build of the op library,
#    then two workers and one server (tfps-run) running tests/gpu/tf_gpu_worker.py: push_pull,
#    broadcast, allgather, SFB and PS apply on GPU tensors against NumPy, a 2-worker Keras fit
#    on the GPU against single-process fit, and the staging-overlap timing with the engine's
#    timeline (OUT_DIR/timeline_<rank>.json). Without TensorFlow this part is SKIPPED, saying
#    why (the image of the lent H200 machines has none);
# 3. with TensorFlow, NCCL and at least 2 GPUs: hierarchical aggregation through NCCL, two
#    workers with a GPU each (tests/gpu/nccl_worker.py: exact sums against NumPy, chunked
#    tensors included, and the local leader's line saying NCCL sums). NCCL refuses two ranks
#    on one GPU ("Duplicate GPU detected"), so with 1 GPU this part is SKIPPED, saying so.
# 4. with TensorFlow and a GPU: compressed push_pull on GPU tensors (issue 16, the GPU encodes
#    and decodes; tests/gpu/codec_worker.py): every codec, 2 workers and 2 servers, small
#    partitions, 3 steps with error feedback, run three times: all tensors on the CPU, all
#    on the GPU, and rank 0 on the GPU with rank 1 on the CPU. Each run checks step 1 against
#    the CPU codecs applied as the servers do (bit-exact) and NumPy (the codec's bound);
#    compare_codec_runs.py then asserts the gpu and mixed runs equal the cpu run bit for
#    bit, every step (same bytes on the wire, same residuals).
# Installs nothing (no pip, no network). PYTHON picks the interpreter (default python3);
# TFPS_CUDA_ARCHS the GPU code (default: the compute capability nvidia-smi reports).
# Prints a summary; exits 1 if any check failed, 0 otherwise (skips included).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT_DIR="${1:-${OUT:-/tmp/tfps_gpu_checks}}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT_DIR"
cd "$ROOT" || exit 1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
SUMMARY=()
FAILED=0
START=$SECONDS

step() {  # step NAME COMMAND...: runs it with its output in OUT_DIR/NAME.log and on screen
  local name="$1"; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    SUMMARY+=("PASS  $name ($((SECONDS - t0)) s)")
  else
    SUMMARY+=("FAIL  $name (exit $rc, $((SECONDS - t0)) s; log: $OUT_DIR/$name.log)")
    FAILED=1
  fi
  return "$rc"
}

echo "=== machine"
nvidia-smi -L 2>&1 || echo "nvidia-smi not found"
command -v nvcc >/dev/null && nvcc --version | tail -1
"$PY" --version
if [ -z "${TFPS_CUDA_ARCHS:-}" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  export TFPS_CUDA_ARCHS="${cap:-90}"
fi
echo "TFPS_CUDA_ARCHS=$TFPS_CUDA_ARCHS"

if step build_cuda env TFPS_WITH_CUDA=1 "$PY" tools/native_build.py --gpu-checks; then
  step gpu_checks "$PY" tests/gpu/gpu_checks.py --json "$OUT_DIR/gpu_checks.json"
fi

TF_PROBE='import tensorflow as tf, sys; sys.exit(0 if tf.config.list_physical_devices("GPU") else 3)'
if TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c "$TF_PROBE" >"$OUT_DIR/tf_probe.log" 2>&1; then
  if step build_tf_cuda env TFPS_WITH_CUDA=1 "$PY" setup.py -q build_tfps; then
    step tf_gpu_workers env TFPS_GPU_OUT="$OUT_DIR" TFPS_TIMELINE="$OUT_DIR/timeline_%r.json" \
      "$PY" -m tf_ps_ops.run -np 2 -ns 1 --timeout 480 "$PY" tests/gpu/tf_gpu_worker.py
  fi
  codec_ok=1
  for mode in cpu gpu mixed; do
    step "codec_$mode" env CODEC_WORKER_DEVICE=$mode TFPS_GPU_OUT="$OUT_DIR" \
      TFPS_PARTITION_BYTES=262144 "$PY" -m tf_ps_ops.run -np 2 -ns 2 --timeout 300 \
      "$PY" tests/gpu/codec_worker.py || codec_ok=0
  done
  step codec_gpu_equals_cpu "$PY" tests/gpu/compare_codec_runs.py "$OUT_DIR" gpu mixed
  [ "$codec_ok" -eq 1 ] || echo "(a codec run failed: see its log)"
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  nccl=$("$PY" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null \
         || ldconfig -p 2>/dev/null | grep -o '/.*libnccl.so.2' | head -1)
  if [ "${gpus:-0}" -lt 2 ]; then
    SUMMARY+=("SKIP  NCCL hierarchical: needs 2 GPUs (this machine has ${gpus:-0}); NCCL refuses two ranks on one GPU")
  elif [ -z "$nccl" ]; then
    SUMMARY+=("SKIP  NCCL hierarchical: no NCCL here (pip install nvidia-nccl-cu12, or TFPS_NCCL_LIBRARY)")
  elif step nccl_hierarchical env GPU_CHECKS_ONE_GPU_EACH=1 TFPS_HIERARCHICAL=1 TFPS_LOG_LEVEL=info \
      "$PY" -m tf_ps_ops.run -np 2 -ns 1 --timeout 300 "$PY" tests/gpu/nccl_worker.py; then
    if ! grep -q "summed with NCCL" "$OUT_DIR/nccl_hierarchical.log"; then
      SUMMARY+=("FAIL  NCCL hierarchical: the sums were right but went through shared memory (no 'summed with NCCL' line; see the 'cannot use NCCL' line in $OUT_DIR/nccl_hierarchical.log)")
      FAILED=1
    fi
  fi
else
  why=$(tail -1 "$OUT_DIR/tf_probe.log")
  SUMMARY+=("SKIP  TensorFlow checks: $PY has no TensorFlow that sees a GPU (${why:-no GPU}). They need TF 2.21 with its CUDA 12 libraries (pip install tensorflow[and-cuda]) and libzmq3-dev")
fi

echo
echo "=== summary ($((SECONDS - START)) s; logs and results in $OUT_DIR)"
for line in "${SUMMARY[@]}"; do echo "$line"; done
grep -h "TIMING\|staging overlap" "$OUT_DIR"/gpu_checks.log "$OUT_DIR"/tf_gpu_workers.log 2>/dev/null
exit "$FAILED"
