#!/usr/bin/env bash
# Runs one of Horovod's own test files (default test/parallel/test_tensorflow.py, with the
# base_test_tensorflow.py it imports) against tf_ps_ops with N workers (default 2) and one
# server, through the re-exporting shim in this folder; nothing of Horovod's files is
# changed. Not part of `make test`: it takes minutes.
#
#   git clone --branch v0.28.1 https://github.com/horovod/horovod /tmp/horovod
#   benchmarks/horovod_compat/run_test_tensorflow.sh /tmp/horovod [N] [pytest args]
#   TEST_FILE=test_tensorflow2_keras.py TF_USE_LEGACY_KERAS=1 .../run_test_tensorflow.sh ...
#
# The first argument is a Horovod checkout or its test/parallel folder. The test file and
# base_test_tensorflow.py are copied into a scratch dir next to our utils/common.py (the
# helpers they import; Horovod's own needs horovod.runner). Each worker's pytest report goes
# to $OUT (default /tmp/tfps-hvd-compat/worker<rank>.log), one line per test and subtest to
# worker<rank>.jsonl (tfps_report.py); summarize.py lists every test from those.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="${TFPS_REPO:-$(cd "$here/../.." && pwd)}"  # TFPS_REPO: another (built) checkout
source_dir="$(realpath "$1")"
[[ -d "$source_dir/test/parallel" ]] && source_dir="$source_dir/test/parallel"
test_file="${TEST_FILE:-test_tensorflow.py}"
if [[ ! -f "$source_dir/$test_file" ]]; then
  echo "no $test_file in $source_dir: pass a Horovod checkout (git clone --branch v0.28.1" \
       "https://github.com/horovod/horovod) or its test/parallel folder" >&2
  exit 2
fi
workers="${2:-2}"
shift $(( $# >= 2 ? 2 : 1 ))
pytest_args="$(printf '%q ' "$@")"  # quoted again for the worker's bash -c
python="${PYTHON:-python}"
out="${OUT:-/tmp/tfps-hvd-compat}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/parallel" "$out"
rm -f "$out"/worker*.log "$out"/worker*.jsonl
cp "$source_dir/$test_file" "$scratch/parallel/"
[[ -f "$source_dir/base_test_tensorflow.py" ]] && cp "$source_dir/base_test_tensorflow.py" "$scratch/parallel/"
cp -r "$here/utils" "$scratch/utils"
cd "$scratch/parallel"
# Each worker writes its own report; TFPS_TIMEOUT bounds what a rank left waiting costs,
# PYTEST_TIMEOUT what one test may take.
PYTHONPATH="$repo:$here/shim:$here${PYTHONPATH:+:$PYTHONPATH}" \
TFPS_TIMEOUT="${TFPS_TIMEOUT:-120}" TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=2 \
  "$python" -m tf_ps_ops.run -np "$workers" -ns 1 --timeout "${RUN_TIMEOUT:-2400}" \
  bash -c "TFPS_REPORT=\"$out/worker\${TFPS_RANK}.jsonl\" \"$python\" -m pytest \
           -p no:cacheprovider -p tfps_report -p timeout --timeout=${PYTEST_TIMEOUT:-480} \
           -q -rA $test_file $pytest_args > \"$out/worker\${TFPS_RANK}.log\" 2>&1" || true
if ls "$out"/worker*.jsonl > /dev/null 2>&1; then
  "$python" "$here/summarize.py" "$out"/worker*.jsonl
else
  echo "no test ran: see $out/worker*.log and the job's output above" >&2
  exit 1
fi
