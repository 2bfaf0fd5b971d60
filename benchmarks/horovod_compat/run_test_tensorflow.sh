#!/usr/bin/env bash
# Runs Horovod's own test/parallel/test_tensorflow.py against tf_ps_ops with N workers
# (default 2) through the re-exporting shim in this folder; nothing of Horovod's file is
# changed. Not part of `make test`: it takes minutes.
#
#   benchmarks/horovod_compat/run_test_tensorflow.sh PATH/TO/test_tensorflow.py [N] [pytest args]
#
# Get the file from Horovod's repository (test/parallel/test_tensorflow.py, Apache 2.0).
# Each worker's pytest report goes to $OUT (default /tmp/tfps-hvd-compat/worker<rank>.log);
# summarize.py counts them per subtest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="${TFPS_REPO:-$(cd "$here/../.." && pwd)}"  # TFPS_REPO: another checkout to measure
test_file="$(realpath "$1")"
workers="${2:-2}"
shift $(( $# >= 2 ? 2 : 1 ))
python="${PYTHON:-python}"
out="${OUT:-/tmp/tfps-hvd-compat}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/parallel" "$out"
cp "$test_file" "$scratch/parallel/test_tensorflow.py"
cp -r "$here/utils" "$scratch/utils"
cd "$scratch/parallel"
# Each worker writes its own report; TFPS_TIMEOUT bounds what a rank left waiting costs.
PYTHONPATH="$repo:$here/shim${PYTHONPATH:+:$PYTHONPATH}" \
TFPS_TIMEOUT="${TFPS_TIMEOUT:-30}" TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=2 \
  "$python" -m tf_ps_ops.run -np "$workers" -ns 1 --timeout "${RUN_TIMEOUT:-2400}" \
  bash -c "\"$python\" -m pytest -p no:cacheprovider -q -rA test_tensorflow.py $* \
           > \"$out/worker\${TFPS_RANK}.log\" 2>&1" || true
"$python" "$here/summarize.py" "$out"/worker*.log
