"""The thread-shard rule (ps_server/thread_shard.h): which summation thread of a server owns
a parameter partition. The push routing (shard_server.cc) and the checkpoint reader
(checkpoint.cc) both call the one function bound here, so a restore hands each thread the
keys the workers will push to it."""

import numpy as np

from native import load_server_testing

ps_testing = load_server_testing()


def test_a_partition_belongs_to_key_plus_partition_modulo_threads():
    rng = np.random.default_rng(7)
    for _ in range(200):
        key = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2))
        partition = int(rng.integers(0, 1 << 24))
        threads = int(rng.integers(1, 64))
        assert ps_testing.thread_of_partition(key, partition, threads) == \
            (key + partition) % 2**64 % threads


def test_the_sum_wraps_at_64_bits_like_the_wire_key():
    assert ps_testing.thread_of_partition(2**64 - 1, 1, 3) == 0  # (2**64 - 1 + 1) mod 2**64


def test_consecutive_partitions_spread_over_every_thread():
    owners = [ps_testing.thread_of_partition(12345, p, 4) for p in range(8)]
    assert sorted(set(owners)) == [0, 1, 2, 3]
    assert owners[:4] == [(12345 + p) % 4 for p in range(4)]


def test_one_thread_owns_everything():
    assert {ps_testing.thread_of_partition(k, p, 1) for k in (0, 5, 2**64 - 1)
            for p in (0, 9)} == {0}


def test_a_checkpoint_record_of_another_thread_is_refused(tmp_path):
    key = 1000
    owner = ps_testing.thread_of_partition(key, 0, 2)
    record = dict(key=key, partition=0, dtype=3, count=1, optimizer=0, updates=0,
                  value=b"\0" * 4, slots=[])
    for thread in (owner, 1 - owner):
        path = str(tmp_path / f"shard-0-{thread}.ckpt")
        ps_testing.write_checkpoint(path, dict(server_id=0, num_servers=1, thread=thread,
                                               num_threads=2, params=[record]))
        if thread == owner:
            assert ps_testing.read_checkpoint(path)["params"][0]["key"] == key
        else:
            try:
                ps_testing.read_checkpoint(path)
            except RuntimeError as e:
                assert f"does not belong to thread {thread}" in str(e)
            else:
                raise AssertionError("a record of another thread was accepted")
