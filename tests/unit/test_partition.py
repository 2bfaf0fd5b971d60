"""Partitioning of tensors and assignment of partitions to servers."""

import collections

import pytest

from native import load_core

core = load_core()


@pytest.mark.parametrize("total, elem, part_bytes, expected_parts", [
    (0, 4, 4096, 1), (1, 4, 4096, 1), (1024, 4, 4096, 1), (1025, 4, 4096, 2),
    (10 ** 6, 4, 4 << 20, 3), (3 * 1024 + 1, 4, 4096, 4), (5, 8, 1024, 1),
    (16 * 1024, 4, 4 << 20, 1), (16 * 1024 + 1, 4, 4 << 20, 2),
])
def test_partitions_cover_the_tensor_exactly(total, elem, part_bytes, expected_parts):
    parts = core.partition_tensor(123, total, elem, part_bytes, 3)
    assert len(parts) == expected_parts
    offset = 0
    for index, (i, off, count, server) in enumerate(parts):
        assert i == index and off == offset and 0 <= server < 3
        assert count * elem <= part_bytes
        offset += count
    assert offset == total


def test_a_tensor_smaller_than_a_partition_still_uses_every_server():
    # 1 MB in 4 MB partitions over 4 servers: one share (256 KB) per server.
    parts = core.partition_tensor(core.key_of_name("w"), 1 << 18, 4, 4 << 20, 4)
    assert len(parts) == 4 and {p[3] for p in parts} == {0, 1, 2, 3}
    # Below 64 KB a tensor stays whole: a round trip costs more than the split saves.
    assert len(core.partition_tensor(core.key_of_name("b"), 1 << 14, 4, 4 << 20, 4)) == 1


def test_a_big_tensor_uses_every_server_evenly():
    parts = core.partition_tensor(core.key_of_name("fc6/kernel"), 10 ** 7, 4, 1 << 20, 4)
    per_server = collections.Counter(p[3] for p in parts)
    assert set(per_server) == {0, 1, 2, 3}
    assert max(per_server.values()) - min(per_server.values()) <= 1


def test_many_small_tensors_spread_over_servers():
    owners = collections.Counter(core.server_of_partition(core.key_of_name("layer%d/bias" % i), 0, 4)
                                 for i in range(400))
    assert all(60 <= owners[s] <= 140 for s in range(4)), owners


def test_assignment_is_deterministic_and_consecutive():
    key = core.key_of_name("w")
    first = core.server_of_partition(key, 0, 5)
    assert [core.server_of_partition(key, p, 5) for p in range(5)] == \
        [(first + p) % 5 for p in range(5)]
    assert core.server_of_partition(key, 0, 1) == 0
