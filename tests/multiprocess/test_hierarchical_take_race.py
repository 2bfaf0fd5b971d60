"""Hierarchical aggregation (TFPS_HIERARCHICAL=1) with three local workers: members whose
wait times out while the local leader is taking their inputs (issue 12). The leader takes
all members' inputs or none; a member whose input it holds must not count its step as done
nor overwrite that input until the leader has summed it or given it back — otherwise the
leader may sum an input the member handed for its next call (a wrong sum, not an error)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent / "core_workers"))
from take_race_worker import data  # noqa: E402

WORKER = Path(__file__).parent / "core_workers" / "take_race_worker.py"
TIMEOUT_S, PAUSE_S, CALLS = 3, 4.5, 4


def answers(stdout):
    """{call: answer array, or None when it failed}."""
    out = {}
    for line in stdout.splitlines():
        words = line.split(" ", 3)
        if len(words) >= 3 and words[0] == "call":
            call = int(words[1])
            out[call] = (np.frombuffer(bytes.fromhex(words[3]), np.float32)
                         if words[2] == "ok" else None)
    return out


def inputs_of(answer, calls):
    """The (call of rank 0, of rank 1, of rank 2) whose inputs, summed in local-rank order,
    give `answer` bit for bit; None when no combination does (a torn or mixed input)."""
    for i in range(calls):
        for j in range(calls):
            partial = data(0, i) + data(1, j)
            for k in range(calls):
                if (partial + data(2, k)).tobytes() == answer.tobytes():
                    return (i, j, k)
    return None


def test_a_member_timing_out_during_the_take_never_gets_a_wrong_sum(make_cluster):
    cluster = make_cluster(3, 1, timeout=90,
                           env={"TFPS_HIERARCHICAL": "1", "TFPS_STALL_SHUTDOWN": str(TIMEOUT_S)})
    cluster.start([sys.executable, WORKER, str(PAUSE_S), str(CALLS)])
    cluster.wait()
    cluster.assert_ok()
    got = [answers(cluster.result("worker", rank).stdout) for rank in range(3)]
    for rank in range(3):
        calls = CALLS + (1 if rank == 2 else 0)  # its withdrawn call 0 put it one behind
        assert sorted(got[rank]) == list(range(calls)), cluster.result("worker", rank).stdout
    # Both members timed out during the paused take (the race this test drives).
    assert got[1][0] is None and got[2][0] is None, [g[0] for g in got]
    for rank in range(3):
        for call, answer in got[rank].items():
            if answer is None:
                continue
            used = inputs_of(answer, CALLS + 1)
            assert used is not None, f"rank {rank} call {call}: a sum of no inputs handed over"
            assert used[rank] == call, f"rank {rank} call {call} got the sum of calls {used}"
            # Whoever's input is in it got this very answer for that call, or an error.
            for other, other_call in enumerate(used):
                theirs = got[other][other_call]
                same = theirs is None or theirs.tobytes() == answer.tobytes()
                assert same, (
                    f"rank {rank} call {call} summed calls {used}, but rank {other} got "
                    f"another answer for its call {other_call}")
    # And the local workers pair up again: every rank's last call has the exact sum.
    for rank in range(3):
        assert got[rank][max(got[rank])] is not None, cluster.result("worker", rank).stdout
