"""The segments Adasum's recursive halving leaves each rank (tf_ps_ops/collectives/adasum.py): every
rank computes everyone's to put the result together, so they must cover the tensor exactly
once, in a layout every rank agrees on, without a cluster."""

import pytest

pytest.importorskip("tensorflow")

from tf_ps_ops.collectives import adasum  # noqa: E402


@pytest.mark.parametrize("workers", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("length", [0, 1, 3, 7, 64, 1001])
def test_segments_cover_the_tensor_once(workers, length):
    held = adasum.segments(length, workers)
    assert len(held) == workers
    covered = sorted((offset, offset + count) for offset, count in held if count)
    at = 0
    for begin, end in covered:
        assert begin == at, (held, length)
        at = end
    assert at == length
    # Halving keeps the parts within one element per level of an even split.
    levels = workers.bit_length() - 1
    for _, count in held:
        assert abs(count - length / workers) <= levels


def test_partners_hold_the_same_segment_before_each_level():
    # At distance d, rank r and r ^ d split the same segment: checked by redoing the
    # halving level by level.
    workers, length = 8, 37
    held = [(0, length)] * workers
    distance = 1
    while distance < workers:
        for rank in range(workers):
            assert held[rank] == held[rank ^ distance]
        held = [((o, c // 2) if r < (r ^ distance) else (o + c // 2, c - c // 2))
                for r, (o, c) in enumerate(held)]
        distance *= 2
    assert held == adasum.segments(length, workers)
