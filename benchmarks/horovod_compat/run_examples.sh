#!/usr/bin/env bash
# Runs Horovod's examples/tensorflow2/{tensorflow2_keras_mnist,tensorflow2_mnist,
# tensorflow2_synthetic_benchmark}.py against tf_ps_ops with 2 workers and 1 server, each a
# copy whose only changes are made here by sed and printed as a diff: the horovod imports
# become tf_ps_ops ones; MNIST's download becomes synthetic_mnist.load_data (no network
# here: same shapes and dtypes); with SHORT=1 (default) the step and epoch counts shrink so
# that a run takes a minute or two on 2 shared cores. Not part of `make test`.
#
#   git clone --branch v0.28.1 https://github.com/horovod/horovod /tmp/horovod
#   benchmarks/horovod_compat/run_examples.sh /tmp/horovod [legacy|keras3|both]
#
# legacy: TF_USE_LEGACY_KERAS=1 (tf_keras, the Keras these examples were written for);
# keras3: TF's default Keras 3. Each run's output: $OUT/<example>-<keras>.log; the summary
# says whether it finished, the last loss or img/sec line, and whether both ranks ended with
# the same weights (digests printed by _run_example.py).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="${TFPS_REPO:-$(cd "$here/../.." && pwd)}"
source_dir="$(realpath "$1")"
[[ -d "$source_dir/examples/tensorflow2" ]] && source_dir="$source_dir/examples/tensorflow2"
modes="${2:-both}"; [[ "$modes" == both ]] && modes="legacy keras3"
python="${PYTHON:-python}"
out="${OUT:-/tmp/tfps-hvd-examples}"
bench_args="${BENCH_ARGS:---model MobileNetV2 --batch-size 16 --num-warmup-batches 2 --num-batches-per-iter 5 --num-iters 3 --no-cuda}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$out"
cp "$here/synthetic_mnist.py" "$here/_run_example.py" "$scratch/"

substitute() {  # $1: example file name; writes $scratch/$1 and prints the diff
  local sed_args=(
    -e 's/^import horovod\.tensorflow\.keras as hvd$/import tf_ps_ops.keras as hvd/'
    -e 's/^import horovod\.tensorflow as hvd$/import tf_ps_ops.tensorflow as hvd/'
    -e 's/^import horovod$/import tf_ps_ops as horovod/'
    -e 's/tf\.keras\.datasets\.mnist\.load_data(/synthetic_mnist.load_data(/')
  if grep -q 'mnist.load_data(' "$source_dir/$1"; then
    sed_args+=(-e '/^import tf_ps_ops\..* as hvd$/a import synthetic_mnist  # no network here: MNIST-shaped data')
  fi
  if [[ "${SHORT:-1}" == 1 ]]; then
    sed_args+=(-e 's/epochs=24/epochs=3/'
               -e 's|steps_per_epoch=500 // hvd.size()|steps_per_epoch=60 // hvd.size()|'
               -e 's|dataset.take(10000 // hvd.size())|dataset.take(400 // hvd.size())|')
  fi
  sed "${sed_args[@]}" "$source_dir/$1" > "$scratch/$1"
  diff -u "$source_dir/$1" "$scratch/$1" | sed "s|$scratch/||; s|$source_dir/||"
}

run_one() {  # $1: example, $2: legacy|keras3, rest: script args
  local example="$1" mode="$2" log="$out/${1%.py}-$2.log"; shift 2
  local legacy=0; [[ "$mode" == legacy ]] && legacy=1
  local start=$SECONDS
  (cd "$scratch" && PYTHONPATH="$repo:$scratch${PYTHONPATH:+:$PYTHONPATH}" \
     TF_USE_LEGACY_KERAS=$legacy TFPS_TIMEOUT="${TFPS_TIMEOUT:-60}" \
     TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=2 \
     "$python" -m tf_ps_ops.run -np 2 -ns 1 --timeout "${RUN_TIMEOUT:-600}" \
       "$python" _run_example.py "$example" "$@") > "$log" 2>&1
  local rc=$? digests
  digests="$(grep -o 'WEIGHTS rank [01] model 0:.*' "$log" | sed 's/.*sha256 //' | sort -u | wc -l)"
  echo "== $example, $mode keras: exit $rc after $((SECONDS - start)) s; log $log"
  grep -E 'Step #|Total img/sec|Img/sec per|loss: [0-9.]+ - ' "$log" | tail -2 | sed 's/^/   /'
  grep -E 'Error|error:' "$log" | grep -v cuInit | tail -1 | cut -c1-240 | sed 's/^/   last error: /'
  grep -o 'WEIGHTS rank [01] model 0:.*' "$log" | sed 's/^/   /'
  case "$digests" in
    1) echo "   weights: equal on both ranks" ;;
    2) echo "   weights: DIFFER between the ranks" ;;
  esac
}

for example in tensorflow2_keras_mnist.py tensorflow2_mnist.py tensorflow2_synthetic_benchmark.py; do
  substitute "$example"
done
examples="${EXAMPLES:-keras_mnist mnist synthetic_benchmark}"  # a subset, e.g. EXAMPLES=mnist
for mode in $modes; do
  for example in $examples; do
    # shellcheck disable=SC2086
    run_one "tensorflow2_$example.py" "$mode" $([[ $example == synthetic_benchmark ]] && echo $bench_args)
  done
done
