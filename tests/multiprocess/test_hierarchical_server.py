"""The server's side of hierarchical aggregation: a local leader's push (FLAG_HIERARCHICAL)
counts for every rank it lists, only pushers are answered, and a push that lists ranks it
cannot stand for is refused without harming the round. The test plays the workers over
raw sockets against a real scheduler and ps_server (tests/multiprocess/hostile.py)."""

import os

import numpy as np
import pytest

from hostile import Job, T, core

F32 = core.wire_dtype(np.dtype(np.float32))


def push(sender, data, ranks=None, step=1, flags=0):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("g"), partition=0,
                  num_partitions=1, step=step, dtype=F32, sender=sender, count=data.size,
                  total_count=data.size,
                  flags=flags | (core.FLAG_HIERARCHICAL if ranks is not None else 0))
    return [core.encode_head(fields, [data.size], [float(r) for r in (ranks or [])]),
            data.tobytes()]


def reply(sock, timeout_ms=20000):
    assert sock.poll(timeout_ms), "no answer"
    head, payload = sock.recv_multipart()
    err, fields = core.decode_head(head, len(payload))
    assert err is None, err
    return fields, payload


@pytest.fixture
def job(tmp_path):
    job = Job(tmp_path, num_workers=4, env={"TFPS_TIMEOUT": "20"})
    yield job
    job.close()


def test_two_leaders_stand_for_four_workers_and_only_they_are_answered(job):
    address = job.register_workers(4, hosts=["hostA", "hostA", "hostB", "hostB"])
    socks = [job.connect_worker(address, rank) for rank in range(4)]
    a = np.arange(10, dtype=np.float32)
    b = np.full(10, 0.5, np.float32)
    socks[0].send_multipart(push(0, a, ranks=[0, 1]))
    socks[2].send_multipart(push(2, b, ranks=[2, 3]))
    for rank in (0, 2):
        fields, payload = reply(socks[rank])
        assert fields["type"] == T["PUSH_PULL_REPLY"], payload
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), a + b)
    for rank in (1, 3):  # their leaders hand them the sum
        assert not socks[rank].poll(300)


def test_a_leader_and_two_flat_workers_make_one_round(job):
    address = job.register_workers(4)
    socks = [job.connect_worker(address, rank) for rank in range(4)]
    data = [np.full(3, 10.0 ** r, np.float32) for r in range(4)]
    socks[0].send_multipart(push(0, data[0] + data[1], ranks=[0, 1]))
    socks[2].send_multipart(push(2, data[2]))
    socks[3].send_multipart(push(3, data[3]))
    for rank in (0, 2, 3):
        fields, payload = reply(socks[rank])
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), sum(data))
    assert not socks[1].poll(300)


@pytest.mark.parametrize("ranks, why", [
    ([1, 2], "list its sender first"),        # does not list itself first
    ([0, 7], "rank 7"),                       # no such worker
    ([0, 1.5], "rank 1.5"),                   # not a rank
    ([0, 1, 1], "rank 1"),                    # twice
    ([0, 0], "rank 0"),                       # itself twice
])
def test_a_push_standing_for_ranks_it_cannot_is_refused(job, ranks, why):
    address = job.register_workers(4)
    socks = [job.connect_worker(address, rank) for rank in range(4)]
    socks[0].send_multipart(push(0, np.ones(4, np.float32), ranks=ranks))
    fields, payload = reply(socks[0])
    assert fields["type"] == T["ERROR"]
    assert why in payload.decode(), payload
    # The round is untouched: four plain pushes still complete it, with the right sum.
    for rank in range(4):
        socks[rank].send_multipart(push(rank, np.full(4, rank, np.float32)))
    for rank in range(4):
        fields, payload = reply(socks[rank])
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), np.full(4, 6.0))


def test_a_rank_already_pushed_cannot_be_covered_again(job):
    address = job.register_workers(4)
    socks = [job.connect_worker(address, rank) for rank in range(4)]
    socks[1].send_multipart(push(1, np.ones(2, np.float32), flags=core.FLAG_ACK))
    assert reply(socks[1])[0]["type"] == T["ACK"]  # it is in before the leader's push
    socks[0].send_multipart(push(0, np.ones(2, np.float32), ranks=[0, 1]))
    fields, payload = reply(socks[0])
    assert fields["type"] == T["ERROR"] and "rank 1" in payload.decode(), payload


def shm_push(sender, count):
    fields = dict(type=T["PUSH_PULL_SHM"], key=core.key_of_name("g"), partition=0,
                  num_partitions=1, step=1, dtype=F32, sender=sender, count=count,
                  total_count=count)
    return [core.encode_head(fields, [count]), b""]


def test_a_shared_memory_push_needs_the_offer_and_the_segment(tmp_path):
    job = Job(tmp_path, num_workers=2, env={"TFPS_TIMEOUT": "20", "TFPS_SHM_SERVER": "1"})
    try:
        address = job.register_workers(2)
        plain = job.connect_worker(address, 0)  # a hello that did not ask for shared memory
        plain.send_multipart(shm_push(0, 4))
        fields, payload = reply(plain)
        assert fields["type"] == T["ERROR"] and b"shared-memory hello" in payload, payload
        assert fields["key"] == core.key_of_name("g")  # about that push: it fails at once
        asked = job.socket(__import__("zmq").DEALER, b"w1")
        asked.connect("tcp://" + address)
        asked.send_multipart([core.encode_head(dict(type=T["HELLO"], sender=1)), b"shm"])
        fields, offer = reply(asked)
        assert fields["type"] == T["HELLO_REPLY"] and offer.startswith(b"shm=")
        # 128 random bits: the names are the server's to pick; then the probe's nonce,
        # which the server wrote into its sealed memfd (after the 512-byte header) that
        # /tfps-q<token> points at ("tfps-memfd <pid> <fd> <inode>").
        token, nonce = offer[4:].decode().split(" probe=")
        assert len(token) == 32 and len(nonce) == 32, offer
        probe = f"/dev/shm/tfps-q{token}"
        with open(probe) as f:
            _, pid, fd, _ = f.read().split()
        with open(f"/proc/{pid}/fd/{fd}", "rb") as f:
            assert f.read()[512:] == nonce.encode()
        asked.send_multipart(shm_push(1, 4))  # no segment by that name exists
        fields, payload = reply(asked)
        assert fields["type"] == T["ERROR"] and b"no shared memory /tfps-p" in payload, payload
        assert not os.path.exists(probe)  # unlinked at the first shared-memory push
        # In a batch (protocol 5: shared-memory heads travel with the small pushes), the
        # bad head fails alone and the plain push beside it joins its round.
        h = np.arange(3, dtype=np.float32)
        plain_h = dict(type=T["PUSH_PULL"], key=core.key_of_name("h"), partition=0,
                       num_partitions=1, step=1, dtype=F32, count=3, total_count=3)
        asked.send_multipart([core.encode_head(dict(type=T["BATCH"], sender=1, count=2)),
                              *shm_push(1, 4),
                              core.encode_head(dict(plain_h, sender=1), [3]), h.tobytes()])
        fields, payload = reply(asked)
        assert fields["type"] == T["ERROR"] and b"no shared memory /tfps-p" in payload, payload
        assert fields["key"] == core.key_of_name("g")
        plain.send_multipart([core.encode_head(dict(plain_h, sender=0), [3]), h.tobytes()])
        for sock in (plain, asked):
            fields, payload = reply(sock)
            assert fields["type"] == T["PUSH_PULL_REPLY"], payload
            assert np.frombuffer(payload, np.float32).tolist() == [0, 2, 4]
    finally:
        job.close()


@pytest.mark.parametrize("sender, ranks, why", [
    # Rank 1 is not its host's leader (rank 0 is), yet claims to stand for rank 0.
    (1, [1, 0], "worker 1 pushed a local sum (hierarchical aggregation) but is not its "
                "host's local leader: worker 0 is, the lowest rank on host hostA"),
    # Rank 2 leads hostB, but rank 0 is on hostA.
    (2, [2, 3, 0], "worker 2 (host hostB) pushed a local sum for rank 0, which is not on its "
                   "host (rank 0 is on host hostA, local leader worker 0)"),
])
def test_a_local_sum_is_taken_only_from_the_leader_of_those_ranks(job, sender, ranks, why):
    # Before, either push was taken: rank 0 counted as arrived and answered, its round
    # completed without its gradient, and rank 0's own push failed as "pushed twice".
    address = job.register_workers(4, hosts=["hostA", "hostA", "hostB", "hostB"])
    socks = [job.connect_worker(address, rank) for rank in range(4)]
    socks[sender].send_multipart(push(sender, np.full(4, 100.0, np.float32), ranks=ranks))
    fields, payload = reply(socks[sender])
    assert fields["type"] == T["ERROR"], payload
    assert why in payload.decode(), payload
    # The round is untouched: four plain pushes complete it with the right sum.
    data = [np.full(4, 10.0 ** r, np.float32) for r in range(4)]
    for rank in range(4):
        socks[rank].send_multipart(push(rank, data[rank]))
    for rank in range(4):
        fields, payload = reply(socks[rank])
        assert fields["type"] == T["PUSH_PULL_REPLY"], payload
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), sum(data))
