"""10,000 random and mutated frames at a live ps_server and scheduler, then training goes
on correctly and memory stays bounded (issue 11, fuzzing). The frames come from the same
mutator as `make fuzz` (tools/fuzz_wire.py), sent from sockets that never read, under
routing ids other than the real workers'. The workers check every sum against NumPy
(core_workers/loop_worker.py)."""

import random
import re
import sys
import time
from pathlib import Path

import pytest
import zmq

from cluster import REPO
from hostile import T, core, rss_kib

sys.path.insert(0, str(REPO / "tools"))
import fuzz_wire  # noqa: E402

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"
pytestmark = pytest.mark.timeout(240)
FRAMES = 10_000


def hostile_messages(rng, count):
    """`count` multipart messages: mutated headers (alone, with a payload, or batched),
    mutated registrations and notices, and pure noise."""
    heads = [h for h, _ in fuzz_wire.head_seeds(core)]
    register, reply = fuzz_wire.text_seeds(core)
    messages = []
    for _ in range(count):
        kind = rng.randrange(5)
        head = fuzz_wire.mutate_bytes(rng, rng.choice(heads), heads)
        if kind == 0:
            messages.append([head])
        elif kind == 1:
            messages.append([head, rng.randbytes(rng.choice([0, 4, 24, 4096]))])
        elif kind == 2:  # a batch head and a few (head, payload) pairs
            batch = [core.encode_head(dict(type=T["BATCH"], count=2, sender=rng.randrange(3)))]
            for _ in range(2):
                batch += [fuzz_wire.mutate_bytes(rng, rng.choice(heads), heads),
                          rng.randbytes(rng.choice([0, 24]))]
            messages.append([fuzz_wire.mutate_bytes(rng, batch[0], [])] + batch[1:])
        elif kind == 3:  # a registration or a notice, mutated
            text = fuzz_wire.mutate_text(rng, rng.choice(register + reply), register)
            kind_head = rng.choice([T["REGISTER"], T["MEMBER_NOTICE"], T["BYE"]])
            messages.append([core.encode_head(dict(type=kind_head, status=rng.choice([0, 10]))),
                             text.encode("utf-8", "surrogateescape")])
        else:
            messages.append([rng.randbytes(rng.randrange(1, 200))
                             for _ in range(rng.randint(1, 4))])
    return messages


def send_all(ports, messages, rng):
    context = zmq.Context()
    try:
        sockets = []
        for i in range(8):
            s = context.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.ROUTING_ID, b"fuzz%d" % i)  # never a real worker's "w<rank>"
            s.connect(f"tcp://127.0.0.1:{ports[i % len(ports)]}")
            sockets.append(s)
        sent = 0
        for message in messages:
            s = rng.choice(sockets)
            try:
                s.send_multipart(message, zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                time.sleep(0.001)
        time.sleep(1.0)  # let the last ones arrive before the sockets go
        return sent
    finally:
        context.destroy(linger=0)


def test_ten_thousand_mutated_frames_then_training_is_correct(make_cluster, tmp_path):
    go = tmp_path / "go"
    cluster = make_cluster(2, 1, timeout=150, env={"TFPS_TIMEOUT": "60"})
    cluster.start([sys.executable, WORKER, "20", "--wait-for", go])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "step 0 ok")
    result = cluster.wait_for_output("server", 0, "serving on port")
    server_port = int(re.search(r"serving on port (\d+)", result.stderr).group(1))
    pids = cluster.process("server", 0).pid, cluster.process("scheduler", 0).pid
    before = [rss_kib(pid) for pid in pids]
    rng = random.Random(20261130)
    sent = send_all([server_port, cluster.port], hostile_messages(rng, FRAMES), rng)
    time.sleep(0.5)
    after = [rss_kib(pid) for pid in pids]
    print(f"sent {sent} of {FRAMES} hostile messages; server RSS {before[0]} -> {after[0]} KiB, "
          f"scheduler {before[1]} -> {after[1]} KiB")
    assert sent >= FRAMES * 0.9
    assert after[0] - before[0] < 32 * 1024, (before, after)
    assert after[1] - before[1] < 16 * 1024, (before, after)
    go.touch()
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "step 19 ok" in cluster.result("worker", rank).stdout
