"""Runs a worker script's checks and reports them in a form the test parses.

A worker script defines `CHECKS = [check_a, check_b, ...]` (functions of the `tf_ps_ops`
module) and calls `run_checks(CHECKS)`. Every worker runs every check in the same order,
so their communication matches even when a check fails: a failure is reported and the
next check runs. Output: one `PASSED name` / `FAILED name` line per check on stdout,
tracebacks on stderr, exit code 1 if anything failed.

The test side reads the expected names from the script's source (`expected_checks`), so
a check that silently never ran fails the test.
"""

import ast
import os
import sys
import traceback


def pin_threads():
    """Two cores are shared by all processes of a test: keep each TF process small."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)


def env_rank():
    return int(os.environ.get("TFPS_RANK", os.environ.get("DMLC_WORKER_ID", "0")))


def _run(check, hvd):
    try:
        check(hvd)
    except Exception:  # report, and keep the workers' call sequences aligned
        traceback.print_exc()
        print(f"FAILED {check.__name__}", flush=True)
        print(f"FAILED {check.__name__} on rank {env_rank()}", file=sys.stderr, flush=True)
        return False
    print(f"PASSED {check.__name__}", flush=True)
    return True


def run_checks(checks, before_init=()):
    """Runs `before_init` checks, init(), `checks`, shutdown(); exits 1 on any failure."""
    pin_threads()
    import tf_ps_ops as hvd

    results = [_run(check, hvd) for check in before_init]
    hvd.init()
    results += [_run(check, hvd) for check in checks]
    hvd.shutdown()
    if hvd.is_initialized():
        print("is_initialized() is still true after shutdown()", file=sys.stderr)
        results.append(False)
    sys.exit(0 if all(results) else 1)


def expected_checks(script_path):
    """Names listed in the script's CHECKS and BEFORE_INIT lists, read without running it."""
    tree = ast.parse(open(script_path).read())
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("CHECKS", "BEFORE_INIT")
                for t in node.targets):
            names += [element.id for element in node.value.elts]
    return names


def passed_checks(stdout):
    return [line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith("PASSED ")]


def run_and_check(cluster, script):
    """Test side: runs `script` on every worker of `cluster` and asserts that every
    process exited 0 and every worker passed every check the script lists."""
    cluster.start([sys.executable, str(script)])
    cluster.wait()
    cluster.assert_ok()
    expected = expected_checks(script)
    assert expected, f"{script} lists no checks"
    for result in cluster.worker_results():
        passed = passed_checks(result.stdout)
        assert passed == expected, (f"worker {result.index} passed {passed}, expected "
                                    f"{expected}\n{result.describe()}")
