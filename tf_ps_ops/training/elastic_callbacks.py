"""Horovod's elastic Keras callbacks (horovod.tensorflow.keras.elastic), offered by
tf_ps_ops.elastic: CommitStateCallback, UpdateBatchStateCallback and
UpdateEpochStateCallback, over an elastic state (tf_ps_ops.elastic.State). make() builds
them on first use, so that importing tf_ps_ops.elastic (and tf_ps_ops.tensorflow) does not
import Keras.
"""

# Keras 3 callbacks that turn tf_keras ones when fit gives them a tf_keras model.
from tf_ps_ops.training.keras_callbacks import FollowsTheModel, callback_class


def make():
    """{name: class} of the three callbacks, on Keras 3's Callback."""

    class CommitStateCallback(FollowsTheModel):
        """Commits `state` every `batches_per_commit` batches (and at each epoch's end). Put it
        last in the callbacks list, after the Update*StateCallbacks, so that a commit saves
        the batch and epoch counts of the weights it saves."""

        def __init__(self, state, batches_per_commit=1):
            super().__init__()
            self.state = state
            self.batches_per_commit = batches_per_commit
            self.batches_remaining = batches_per_commit

        def on_train_begin(self, logs=None):
            # Every fit after a membership change starts the count afresh on every worker,
            # so that they commit (a collective) at the same batches (as Horovod's).
            self.batches_remaining = self.batches_per_commit

        def on_batch_end(self, batch, logs=None):
            self.batches_remaining -= 1
            if self.batches_remaining == 0:
                self.state.commit()
                self.batches_remaining = self.batches_per_commit

        def on_epoch_end(self, epoch, logs=None):
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    class UpdateBatchStateCallback(FollowsTheModel):
        """Keeps `state.batch` at the number of batches of the current epoch that are done,
        counting those done before a membership change: a `fit` that finishes an interrupted
        epoch (over the data after `state.batch` batches) continues the count. Reset to 0 at
        each epoch's end. Put CommitStateCallback after this one in the callbacks list.

        Keras 3 runs the number of steps `fit` was given, so (unlike Horovod's callback on
        tf.keras) this one does not shorten a resumed epoch: the training function fits the
        rest of it (docs/elastic.md has the three lines)."""

        def __init__(self, state):
            super().__init__()
            self.state = state
            self._offset = 0

        def on_epoch_begin(self, epoch, logs=None):
            self._offset = self.state.batch

        def on_batch_end(self, batch, logs=None):
            self.state.batch = self._offset + batch + 1

        def on_epoch_end(self, epoch, logs=None):
            self.state.batch = 0
            self._offset = 0

    class UpdateEpochStateCallback(FollowsTheModel):
        """Counts finished epochs in `state.epoch`, across membership changes, whether fit
        is given `initial_epoch=state.epoch` (its epochs count from there) or, as in
        Horovod's examples, `epochs=N - state.epoch` (its epochs count from 0). Put
        CommitStateCallback after this one in the callbacks list."""

        def __init__(self, state):
            super().__init__()
            self.state = state
            self._offset = None

        def on_train_begin(self, logs=None):
            self._offset = None

        def on_epoch_begin(self, epoch, logs=None):
            if self._offset is None:  # the first epoch of this fit: where does it count from?
                self._offset = self.state.epoch - epoch if epoch < self.state.epoch else 0

        def on_epoch_end(self, epoch, logs=None):
            self.state.epoch = (self._offset or 0) + epoch + 1

    return {"CommitStateCallback": callback_class(CommitStateCallback),
            "UpdateBatchStateCallback": callback_class(UpdateBatchStateCallback),
            "UpdateEpochStateCallback": callback_class(UpdateEpochStateCallback)}
