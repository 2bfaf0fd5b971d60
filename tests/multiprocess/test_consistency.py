"""Consistency models (docs/consistency.md): ssp:S and asp against their definitions.

Each run is a real cluster (tests/multiprocess/workers/consistency_worker.py): workers
push one-hot vectors, so the sum a worker reads says exactly which pushes it carries, and
the servers trace every read they release (TFPS_CONSISTENCY_TRACE). One worker is slowed
(or killed). Oracles: SSP's definition (Ho et al.: a read at clock c carries every update
of clock <= c - S, and the reader's own), each push reaching each worker at most once,
and, in PS mode, the server's count of updates read back from a constant gradient.
bsp's exactness against single-process training is test_training.py's job; here bsp is
the baseline the step counts are compared with, and TFPS_CONSISTENCY=bsp is run through
the same training oracle once.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from cluster import Cluster, require_build

WORKER = Path(__file__).resolve().parent / "workers" / "consistency_worker.py"
pytestmark = pytest.mark.timeout(400)

NUM_WORKERS = 3
SLOW = 2


def run(tmp_path, name, consistency, steps=20, pace=0.02, slow_factor=3.0, env=None,
        die_after=0, ps=False, num_servers=2, expect_ok=True, everyone=False):
    """Runs the worker on a fresh cluster; returns (saved arrays by rank, trace lines,
    the workers' results, or with `everyone` every process's)."""
    require_build()
    workdir = tmp_path / name
    out, trace = workdir / "out", workdir / "trace"
    out.mkdir(parents=True)
    trace.mkdir()
    cluster = Cluster(workdir, NUM_WORKERS, num_servers, timeout=180, env={
        "TFPS_TEST_OUT": str(out), "TFPS_CONSISTENCY_TRACE": str(trace),
        "TEST_CONSISTENCY": consistency, "TEST_STEPS": str(steps), "TEST_PACE": str(pace),
        "TEST_SLOW_RANK": str(SLOW), "TEST_SLOW_FACTOR": str(slow_factor),
        "TEST_DIE_AFTER": str(die_after), "TEST_PS": "1" if ps else "0",
        "TFPS_TIMEOUT": "90", **(env or {})})  # workers import TF on a busy machine
    try:
        cluster.start([sys.executable, str(WORKER)])
        cluster.wait()
        if expect_ok:
            cluster.assert_ok()
        results = cluster.results() if everyone else cluster.worker_results()
    finally:
        cluster.close()
    saved = {}
    for rank in range(NUM_WORKERS):
        path = out / f"rank{rank}.npz"
        if path.exists():
            saved[rank] = dict(np.load(path))
    lines = []
    for f in sorted(trace.glob("reads-*.txt")):
        lines += [tuple(int(x) for x in line.split()) for line in f.read_text().splitlines()]
    return saved, lines, results


def check_reads(saved, steps, staleness):
    """What every worker read, against SSP's definition (staleness None: asp)."""
    for rank, got in saved.items():
        for name in ("small", "big"):
            reads = got[name].reshape(len(got[name]), NUM_WORKERS, steps)  # [step][worker][s]
            seen = np.cumsum(reads, axis=0)
            assert np.all((seen == 0) | (seen == 1)), \
                f"rank {rank} {name}: a push reached this worker twice"
            for t in range(1, len(reads) + 1):
                assert reads[t - 1, rank, t - 1] == 1, \
                    f"rank {rank} {name}: read {t} lacks the worker's own push"
                if staleness is not None and t - staleness >= 1:
                    need = seen[t - 1][:, : t - staleness]
                    assert np.all(need == 1), (
                        f"rank {rank} {name}: read {t} under ssp:{staleness} misses pushes "
                        f"of steps <= {t - staleness}: {np.argwhere(need == 0).tolist()}")


def test_ssp_reads_never_exceed_the_bound(tmp_path):
    """ssp:2, worker 2 three times slower, tensors split over 2 servers (8 partitions):
    every read the servers released had the slowest worker within 2 steps, and every
    worker's reads satisfy SSP (own pushes, everything older than the bound)."""
    steps, s = 20, 2
    saved, trace, _ = run(tmp_path, "ssp2", f"ssp:{s}", steps=steps,
                          env={"TFPS_PARTITION_BYTES": "32"})
    assert len(saved) == NUM_WORKERS
    # 60 floats in 32-byte partitions: 8 partitions per tensor, 2 tensors, 3 workers, 20 steps.
    assert len(trace) == 2 * 8 * NUM_WORKERS * steps, len(trace)
    lag = [step - min_clock for _, _, _, step, min_clock, _ in trace]
    assert max(lag) <= s, f"a read left with the slowest worker {max(lag)} steps behind"
    assert max(lag) == s, "the slowed worker never held anybody back: the test tests nothing"
    check_reads(saved, steps, s)
    # Every push reached every worker exactly once by the end (the last reads under ssp
    # wait for the slowest worker's steps up to steps - S; the rest arrive later).
    for rank in range(NUM_WORKERS):
        total = saved[rank]["small"].sum(axis=0).reshape(NUM_WORKERS, steps)
        assert np.all(total[:, : steps - s] == 1)


@pytest.fixture(scope="module")
def asp_run(tmp_path_factory):
    """One asp cluster for the two tests that read it (a cluster costs ~30 s of start-up)."""
    return run(tmp_path_factory.mktemp("consistency"), "asp", "asp", steps=20, pace=0.05)


def test_asp_never_waits_and_loses_nothing(asp_run):
    saved, trace, _ = asp_run
    check_reads(saved, 20, None)
    lag = [step - min_clock for _, _, _, step, min_clock, _ in trace]
    assert max(lag) > 2, "the fast workers never ran ahead: asp waited, or nothing was slow"


def steps_ahead(saved):
    """Steps the fast workers had finished when the slow one finished half its steps."""
    ended = saved[SLOW]["ended"]
    at = ended[len(ended) // 2 - 1]
    return [int(np.sum(saved[r]["ended"] <= at)) for r in range(NUM_WORKERS) if r != SLOW]


def test_ssp3_lets_the_others_run_ahead_of_bsp(tmp_path, asp_run):
    """One worker 3x slower: at the moment it finished step 10, the others had finished
    more steps under ssp:3 than under bsp (compared by step counts, one run each)."""
    bsp, _, _ = run(tmp_path, "bsp", "bsp", steps=20, pace=0.05)
    ssp, _, _ = run(tmp_path, "ssp3", "ssp:3", steps=20, pace=0.05)
    asp = asp_run[0]
    print("steps of the fast workers at the slow one's step 10: bsp", steps_ahead(bsp),
          "ssp:3", steps_ahead(ssp), "asp", steps_ahead(asp))
    assert max(steps_ahead(bsp)) <= 11
    assert min(steps_ahead(ssp)) > max(steps_ahead(bsp))
    assert max(steps_ahead(ssp)) <= 10 + 3  # and never beyond the bound
    assert min(steps_ahead(asp)) > max(steps_ahead(ssp))


def test_ps_mode_applies_each_push_when_it_arrives(tmp_path):
    """PS mode, constant gradient 1, SGD with lr 0.5 over 3 workers: each update moves the
    parameter by -1/6, so the value a worker reads counts the updates applied. Under ssp:2
    a read of step t counts at least every worker's first t-2 updates and its own t; the
    last read of all shows every update (nothing lost)."""
    steps, s = 12, 2
    saved, _, _ = run(tmp_path, "ps_ssp2", f"ssp:{s}", steps=steps, ps=True)
    per_update = 0.5 * 1.0 / NUM_WORKERS
    finals = []
    for rank, got in saved.items():
        counts = -got["ps"][:, 0] / per_update
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-3)
        counts = np.round(counts).astype(int)
        for t, applied in enumerate(counts, start=1):
            assert applied >= max(NUM_WORKERS * max(t - s, 0), t), \
                f"rank {rank} read {t} counts {applied} updates"
            assert applied <= NUM_WORKERS * steps
        finals.append(counts[-1])
    assert max(finals) == NUM_WORKERS * steps, finals


def test_dead_worker_under_ssp_bounded_then_clear_error(tmp_path):
    """ssp:2: worker 2 dies after 5 steps. The others still finish steps up to 5 + 2 and
    then fail with an error naming the dead worker, long before their 20 steps."""
    saved, _, results = run(tmp_path, "dead", "ssp:2", steps=20, die_after=5,
                            expect_ok=False)
    assert results[SLOW].returncode == 17
    for rank in range(NUM_WORKERS):
        if rank == SLOW:
            continue
        assert results[rank].returncode == 3, results[rank].describe()
        done = len(saved[rank]["ended"])
        error = str(saved[rank]["error"])
        assert done == 5 + 2, (rank, done, error)
        assert "worker 2" in error and "onehot" in error, error


def test_workers_that_disagree_fail_at_the_rendezvous(tmp_path):
    """Worker 1 asks for asp, the others for ssp:3: init() fails on every worker naming
    both models, the servers and the scheduler exit 1, nothing waits for a timeout."""
    _, _, results = run(tmp_path, "disagree", "ssp:3", env={"TEST_CONSISTENCY_1": "asp",
                                                              "TFPS_TIMEOUT": "60"},
                        expect_ok=False, everyone=True)
    assert len(results) == 1 + 2 + NUM_WORKERS
    for result in results:
        assert result.returncode not in (0, None), result.describe()
        assert "workers disagree on the consistency model" in result.stderr, result.describe()
        assert "ssp:3" in result.stderr and "asp" in result.stderr


DIGITS = Path(__file__).resolve().parent / "workers" / "digits_worker.py"


def digits_accuracy(tmp_path, consistency, slow_seconds):
    require_build()
    workdir = tmp_path / consistency.replace(":", "")
    cluster = Cluster(workdir, NUM_WORKERS, 1, timeout=300, env={
        "TFPS_CONSISTENCY": consistency, "TEST_SLOW_RANK": str(SLOW),
        "TEST_SLOW_SECONDS": str(slow_seconds), "TEST_EPOCHS": "10"})
    try:
        cluster.start([sys.executable, str(DIGITS)])
        cluster.wait()
        cluster.assert_ok()
        out = [r.stdout for r in cluster.worker_results()]
    finally:
        cluster.close()
    accuracy = {}
    for text in out:
        for line in text.splitlines():
            if line.startswith("accuracy "):
                _, rank, value = line.split()
                accuracy[int(rank)] = float(value)
    assert sorted(accuracy) == list(range(NUM_WORKERS)), out
    return accuracy


def test_ssp_and_asp_train_digits_within_2_percent_of_bsp(tmp_path):
    """examples/train_digits.py's MLP, 3 workers, 10 epochs: the replicas' mean held-out
    accuracy under ssp:3 (one worker slowed ~3x) and asp is within 0.02 of bsp's, and no
    replica is more than 0.04 (ssp:3) or 0.06 (asp) below (bsp's replicas are identical,
    whatever the timing; ssp/asp replicas differ, and one replica's accuracy on 360
    samples moves by ~0.01 from run to run). asp runs unslowed: with a worker slowed
    for the whole run, the fast replicas finish having received only the slow worker's
    early gradients (docs/consistency.md), which is asp's nature, not a bound to test.
    Unslowed, an asp replica still ends with whatever its peers had pushed when it
    stopped: 0.931-0.969 over 5 runs of this test alone (15 replicas, 2 runs beside a
    busy core), 0.894 once in a full test run (bsp 0.942), hence its wider floor."""
    bsp = digits_accuracy(tmp_path, "bsp", 0.0)
    assert len(set(bsp.values())) == 1, bsp
    assert bsp[0] > 0.9, f"bsp did not learn: {bsp}"
    for consistency, slow, floor in (("ssp:3", 0.01, 0.04), ("asp", 0.0, 0.06)):
        got = digits_accuracy(tmp_path, consistency, slow)
        print(consistency, got, "bsp", bsp[0])
        assert np.mean(list(got.values())) >= bsp[0] - 0.02, (consistency, got, bsp[0])
        for rank, value in got.items():
            assert value >= bsp[0] - floor, (consistency, rank, value, bsp[0])


def test_ssp0_is_bsp_exactly_single_process_training(tmp_path_factory):
    """ssp:0 takes bsp's path: distributed training equals single-process training (the
    oracle of test_training.py, run here under TFPS_CONSISTENCY=ssp:0)."""
    from oracles import train_on_cluster
    import test_training

    worker = test_training._train_worker()
    trained, _ = train_on_cluster(tmp_path_factory, test_training.TRAIN_WORKER,
                                  worker.NUM_WORKERS, 2, timeout=200,
                                  env={"TFPS_CONSISTENCY": "ssp:0"})
    test_training.test_gradient_tape_matches_single_process(trained)
    test_training.test_keras_fit_matches_single_process(trained)
