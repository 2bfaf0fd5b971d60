"""tf_ps_ops.algorithms without a cluster: peer schedules and argument checks."""

import keras
import pytest

from tf_ps_ops import algorithms
from tf_ps_ops.compression import Compression


def test_ring_peers():
    assert algorithms.ring_peers(0, 5) == [1, 4]
    assert algorithms.ring_peers(4, 5) == [0, 3]
    assert algorithms.ring_peers(1, 2) == [0]  # two workers: one neighbour, not two


@pytest.mark.parametrize("size", [2, 4, 6, 8])
def test_shift_one_pairs_are_mutual_and_meet_every_other_half(size):
    half = size // 2
    met = {r: set() for r in range(size)}
    for step in range(half):
        peers = [algorithms.shift_one_peer(r, size, step) for r in range(size)]
        for r, p in enumerate(peers):
            assert p != r and peers[p] == r, (step, peers)
            assert (r < half) != (p < half), "pairs join the lower and the upper half"
            met[r].add(p)
    # After size/2 steps every lower rank has met every upper rank once (Bagua's shift).
    for r in range(half):
        assert met[r] == set(range(half, size))


def test_shift_one_is_bagua_schedule_for_four():
    # Worked out by hand from Bagua's rule: lower rank r meets (step + r) % 2 + 2.
    expected = {0: [2, 3, 0, 1], 1: [3, 2, 1, 0]}
    for step in range(4):
        assert [algorithms.shift_one_peer(r, 4, step) for r in range(4)] == expected[step % 2]


@pytest.mark.parametrize("make, message", [
    (lambda: algorithms.Decentralized("all"), "peer_selection"),
    (lambda: algorithms.Decentralized("ring", interval=0), "interval"),
    (lambda: algorithms.LowPrecisionDecentralized(compression="topk:0.1"), "compression"),
    (lambda: algorithms.AsyncModelAverage(sync_interval_ms=-1), "sync_interval_ms"),
    (lambda: algorithms.QAdam(warmup_steps=0), "warmup_steps"),
])
def test_bad_arguments_say_which(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_qadam_needs_adam_and_the_optimizer_wrapper():
    import tensorflow as tf

    from tf_ps_ops.keras import DistributedOptimizer
    from tf_ps_ops.training.tape import DistributedGradientTape

    with pytest.raises(TypeError, match="keras.optimizers.Adam"):
        DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=algorithms.QAdam(10))
    opt = DistributedOptimizer(keras.optimizers.Adam(0.1), algorithm=algorithms.QAdam(10))
    assert opt._tfps_algorithm.optimizer is opt
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(ValueError, match="DistributedOptimizer"):
        DistributedGradientTape(tape, algorithm=algorithms.QAdam(10))


def test_compression_default_of_qadam_is_int8():
    assert algorithms.QAdam(5).compression is Compression.int8
