"""A worker without TensorFlow for test_hierarchical_join.py: Horovod's join() with uneven
data under hierarchical aggregation (TFPS_HIERARCHICAL=1, every worker on one host).

    join_worker.py EPOCHS [--integers] [--pause-join-end SECONDS]

EPOCHS: epochs separated by '/', each the number of steps of every rank, comma-separated
(e.g. "4,2,3/1,4,3": in epoch 1 rank 1 joins first, in epoch 2 rank 0, the local leader).
An epoch ending in '!' has rank 0 join first and the members then call a name rank 0
never called, before they join: a joined leader cannot serve it, so each must fail at
once with FailedPrecondition saying so (not after TFPS_TIMEOUT), and go on in step. One
ending in '?' likewise, but the members call 'h32' with one element more than the
leader's last call: both fail that step at once, saying the leader has joined.
Each step push_pulls 'h32' (float32) and 'h64' (float64), summed locally first, 'big'
(float32 of 2 chunks of local aggregation), and 'f16' (float16, which goes flat). A rank
that has run out of steps calls join(), which must return the rank with the most steps;
until then the others' sums must equal, bit for bit, NumPy's sum in rank order of the
working ranks' inputs (a joined rank adds nothing: Horovod's zeros). After every epoch
all ranks call every name twice more (the same names as the next epoch's: their steps
must pair up again), also bit-exact. A member (local rank > 0) sends the servers only its
flat pushes and its joins (checked with the engine's byte counter): its local sums went
through its leader. Prints "epoch E ok" and, at the end, "join ok"; on an error prints it
to stderr and exits 3. --integers: float inputs are small integers, whose sums are exact
in any order (several hosts: the servers add the host sums as they arrive).
--pause-join-end S: the local leader's every join() waits S seconds after the servers'
answer before it stops serving its members (core.pause_next_join_end_for_testing), so the
members' first calls after the join reach a leader that still serves.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

BIG = 1_100_003  # 4.4 MB of float32: 2 chunks (4 MB each at most)


INTEGERS = "--integers" in sys.argv[2:]
PAUSE_JOIN_END = (float(sys.argv[sys.argv.index("--pause-join-end") + 1])
                  if "--pause-join-end" in sys.argv else 0.0)


def inputs(rank, epoch, step):
    rng = np.random.default_rng(10_000 * epoch + 100 * step + rank)
    normal = (lambda n: rng.integers(-1000, 1000, n).astype(np.float64)) if INTEGERS else \
        rng.standard_normal
    return {
        "h32": normal(1001).astype(np.float32),
        "h64": normal(77),
        "big": normal(BIG).astype(np.float32),
        # small integers: exact in float16 whatever order the server adds them in
        "f16": rng.integers(-50, 50, 33).astype(np.float16),
    }


def fail(text):
    print(text, file=sys.stderr, flush=True)
    sys.exit(3)


def main():
    epochs = [[int(n) for n in e.rstrip("!?").split(",")] for e in sys.argv[1].split("/")]
    odd_call = [e[-1] if e[-1] in "!?" else "" for e in sys.argv[1].split("/")]
    core = load_core()
    rank, size = init_from_env(core)
    servers = int(os.environ["TFPS_NUM_SERVERS"])
    flat_bytes = 0

    def step(epoch, s, working):
        nonlocal flat_bytes
        mine = inputs(rank, epoch, s)
        for name, array in mine.items():
            got = core.push_pull(name, array)
            want = None
            for r in working:  # rank order, as the local sum adds
                x = inputs(r, epoch, s)[name]
                want = x.copy() if want is None else want + x
            if got.dtype != want.dtype or got.tobytes() != want.tobytes():
                fail(f"rank {rank} epoch {epoch} step {s} '{name}' (working {working}): "
                     f"got {got[:3]}, expected {want[:3]}")
        flat_bytes += mine["f16"].nbytes

    for e, steps in enumerate(epochs):
        for s in range(steps[rank]):
            step(e, s, [r for r in range(size) if steps[r] > s])
        if odd_call[e] and core.local_rank() > 0:
            unknown = odd_call[e] == "!"
            said = "never called" if unknown else "adds zeros of its own last call of 'h32'"
            try:
                if unknown:
                    core.push_pull(f"never called by the leader {e}", np.ones(5, np.float32))
                else:
                    core.push_pull("h32", np.ones(1002, np.float32))
            except RuntimeError as error:
                text = str(error)
                if (not text.startswith("FailedPrecondition") or "has joined" not in text
                        or said not in text):
                    fail(f"rank {rank}: not the joined leader's error: {text}")
                print(f"rank {rank} got: {text}", flush=True)
            else:
                fail(f"rank {rank}: a name the joined leader never called was summed")
        if PAUSE_JOIN_END and core.local_rank() == 0:
            core.pause_next_join_end_for_testing(PAUSE_JOIN_END)
        last = core.join()
        flat_bytes += 4 * servers
        longest = [r for r in range(size) if steps[r] == max(steps)]  # the last to join
        if last not in longest:
            fail(f"rank {rank} epoch {e}: join() returned {last}, expected one of {longest}")
        for s in range(max(steps), max(steps) + 2):  # everyone again, under the same names
            step(e, s, list(range(size)))
        print(f"epoch {e} ok", flush=True)
    sent = core.stats()["bytes_sent"]
    if core.local_rank() > 0 and sent != flat_bytes:
        fail(f"rank {rank}: sent {sent} bytes to the servers, its flat pushes and joins are "
             f"{flat_bytes}: did a local sum not go through the leader?")
    if core.local_rank() == 0 and sent <= flat_bytes:
        fail(f"rank {rank}: the leader sent only {sent} bytes: no local sums?")
    core.shutdown()
    print("join ok", flush=True)


if __name__ == "__main__":
    main()
