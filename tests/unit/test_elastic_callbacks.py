"""The elastic Keras callbacks count as Horovod 0.28's do, under a real Keras 3 fit in one
process (no cluster: commit() in a job without elastic membership only saves):
UpdateEpochStateCallback whether fit counts its epochs from initial_epoch=state.epoch or,
as Horovod's examples do, from 0 with epochs=N - state.epoch; CommitStateCallback starting
its batch count afresh at every fit, so that a fit begun after a membership change commits
at the same batches on every worker."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from tf_ps_ops import elastic  # noqa: E402


class CountingState(elastic.ObjectState):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.commits = 0

    def commit(self):
        self.commits += 1
        super().commit()


def fit(state, callbacks, **kwargs):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((8, 3), np.float32)
    model.fit(x, np.zeros((8, 1), np.float32), batch_size=2, verbose=0, callbacks=callbacks,
              **kwargs)


@pytest.mark.parametrize("style", ["horovod", "initial_epoch"])
def test_epoch_count_goes_on_across_a_reset(style):
    total = 5
    state = CountingState(epoch=2, batch=0)  # two epochs done before a membership change
    callback = elastic.UpdateEpochStateCallback(state)
    if style == "horovod":  # tensorflow2_keras_mnist_elastic.py: epochs=N - state.epoch
        fit(state, [callback], epochs=total - state.epoch)
    else:
        fit(state, [callback], epochs=total, initial_epoch=state.epoch)
    assert state.epoch == total
    fit(state, [callback], epochs=1)  # a later fit counts on from there
    assert state.epoch == total + 1


def test_commit_count_starts_afresh_at_each_fit():
    state = CountingState(epoch=0, batch=0)
    commit = elastic.CommitStateCallback(state, batches_per_commit=3)
    commit.batches_remaining = -2  # as left by an interrupt raised inside commit()
    fit(state, [commit], epochs=1)  # 4 batches: a commit after batch 3, one at the epoch's end
    assert state.commits == 2
