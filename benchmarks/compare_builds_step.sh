#!/bin/bash
# The step of two builds of tf_ps_ops, interleaved (A B A B ...), with
# compression_step_time.py: for comparing CPU per step on a busy machine, where wall
# times drift but both builds see the same drift. Each tree must be built (make build).
#
#   benchmarks/compare_builds_step.sh A_TREE B_TREE [CODECS] [PAIRS] [OUT]
#   e.g. git worktree add --detach /tmp/main-tree main && (cd /tmp/main-tree && make build)
#        benchmarks/compare_builds_step.sh /tmp/main-tree . onebit,int8 3 /tmp/ab
#
# Writes OUT/{a,b}-N/step_time.json (N = 1..PAIRS) and prints each run's line.
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2"); codecs=${3:-onebit}; pairs=${4:-3}
out=${5:-$(mktemp -d /tmp/compare_builds_step.XXXXXX)}
python=${PYTHON:-python3}
for i in $(seq 1 "$pairs"); do
  for side in a b; do
    tree=$a; [ "$side" = b ] && tree=$b
    echo "=== $side ($tree) $i $(date -u +%T)"
    (cd "$tree" && "$python" benchmarks/compression_step_time.py --codecs "$codecs" --repeats 1 \
        --retries 0 --idle-patience 0 --results-dir "$out/$side-$i") 2>&1 |
      grep -E "  step|Error|FAILED" || true
  done
done
echo "results: $out"
