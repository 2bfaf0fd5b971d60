"""Each of Bagua's algorithms trains the digits MLP (examples/train_digits_algorithms.py)
under tfps-run to within 2% held-out accuracy of the summation path (synchronous
all-reduce) with the same number of workers. One launcher run per worker count trains
the algorithms in turn, fixed seeds, one compute thread per worker: 3 workers for every
algorithm but shift_one (~35 s on an idle 2-core machine), 4 workers for shift_one,
which pairs workers and needs an even count, and the ring next to it (~25 s). Every
worker's own model is judged: decentralized replicas differ slightly.

The runs train 20 epochs, async averaging every 5 ms. At the example's 10 epochs and
20 ms, async's accuracy is not deterministic (the rounds fall where the thread gets the
CPU) and spread 0.908-0.95 over runs against the summation path's 0.9417, so a 2% check
failed now and then. At 20 epochs and 5 ms every algorithm ends within 0.3% of the
summation path's 0.9611 or above it (async 0.964-0.972 in 9 runs)."""

import re
import sys
from collections import defaultdict

import pytest
from cluster import REPO, run_job

SCRIPT = REPO / "examples" / "train_digits_algorithms.py"
# The first two are the summation path, directly and through the algorithm interface.
ALGORITHMS = ["allreduce", "gradient_allreduce", "decentralized", "low_precision", "async",
              "qadam"]
EVEN_ALGORITHMS = ["allreduce", "shift_one", "decentralized"]
RESULT = re.compile(r"result algorithm=(\w+) rank=(\d) accuracy=([\d.]+) seconds=([\d.]+) "
                    r"steps=(\d+).*?(?: averaged=(\d+))?$", re.M)

pytestmark = pytest.mark.timeout(600)


def run_launcher(workers, algorithms, timeout=540):
    return run_job([sys.executable, "-m", "tf_ps_ops.run", "-np", str(workers), "-ns", "1",
                    "--timeout", str(timeout - 30), sys.executable, str(SCRIPT),
                    "--algorithms", ",".join(algorithms), "--epochs", "20",
                    "--sync-interval-ms", "5"], timeout)


def train_and_check(workers, algorithms, timeout=540):
    """Trains `algorithms` (the first is "allreduce") with `workers` workers in one
    launcher run; checks every worker of the others is within 2% of all-reduce.
    Returns the accuracies by algorithm and rank."""
    out = run_launcher(workers, algorithms, timeout)
    accuracy, averaged = defaultdict(dict), {}
    for name, rank, acc, _, steps, rounds in RESULT.findall(out):
        accuracy[name][int(rank)] = float(acc)
        assert int(steps) > 100, f"{name} on rank {rank} ran {steps} steps"
        if rounds:  # async: a starved averaging thread is named as such, not as accuracy
            averaged[int(rank)] = int(rounds)
            assert int(rounds) >= 5, f"{name} on rank {rank} averaged only {rounds} times"
    for name in algorithms:
        assert sorted(accuracy[name]) == list(range(workers)), (
            f"{name}: results {accuracy[name]}\n{out}")
    print(f"held-out accuracy with {workers} workers: {dict(accuracy)}")  # pytest -s shows it
    baseline = accuracy["allreduce"]
    assert min(baseline.values()) > 0.9, f"the summation path did not train: {baseline}"
    assert len(set(baseline.values())) == 1, f"synchronous replicas differ: {baseline}"
    reference = baseline[0]
    for name in algorithms[1:]:
        for rank, acc in accuracy[name].items():
            assert acc >= reference - 0.02, (
                f"{name} on rank {rank} of {workers}: accuracy {acc:.4f}, "
                f"all-reduce {reference:.4f}; all: {dict(accuracy)}; async rounds averaged "
                f"by rank: {averaged}")
    return accuracy


def test_every_algorithm_trains_digits_within_two_percent_of_allreduce():
    accuracy = train_and_check(3, ALGORITHMS)
    # The same path through the algorithm interface gives the same models.
    assert accuracy["gradient_allreduce"] == accuracy["allreduce"]


def test_shift_one_and_ring_with_four_workers_within_two_percent_of_allreduce():
    train_and_check(4, EVEN_ALGORITHMS, timeout=300)
