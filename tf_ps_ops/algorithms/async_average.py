"""Asynchronous model averaging (Bagua's async algorithm): after a few synchronous warm-up
steps each worker trains on its own, and a background thread on every worker averages the
weights with the other workers' every `sync_interval_ms` (docs/algorithms.md).

The thread's rounds are collectives of their own (one fused push_pull of all weights plus
a control flag), so the threads meet each other, never the training loops. A round reads
the weights (snapshot s), averages them (a), and adds a - s to each weight with
assign_add: steps the worker took meanwhile are kept, and the update is atomic per
variable, so no lock is held across the network wait and training never blocks on it.

Stopping is collective, like any collective op: stop() raises this worker's flag and
waits; rounds go on until every worker's flag is up, and that last round (its average
applied like any other) ends the thread on every worker at once. So no thread is left
waiting for a partner that has gone, and replicas that all stopped training end equal.
A worker that never calls stop() makes the others' stop() wait, with stall warnings (and fail
after TFPS_STALL_SHUTDOWN, if set).
pause() (around evaluation and checkpoints) keeps the thread in the rounds but stops it
writing this worker's weights; resume() lets it write again.
"""

import logging
import threading

import keras
import tensorflow as tf

from tf_ps_ops.algorithms.base import Algorithm
from tf_ps_ops.collectives.compression import Compression
from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import size

_log = logging.getLogger(__name__)


class AsyncModelAverage(Algorithm):
    """Args:
      sync_interval_ms: pause between the end of one averaging round and the next.
      warmup_steps: steps with synchronous gradient averaging before the thread starts.
    """

    def __init__(self, sync_interval_ms=50, warmup_steps=0):
        super().__init__()
        if sync_interval_ms < 0 or warmup_steps < 0:
            raise ValueError("sync_interval_ms and warmup_steps must be >= 0")
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = int(warmup_steps)
        self.rounds = 0  # rounds this worker's thread has completed (all runs)
        self.applied = 0  # rounds whose average it wrote into the weights
        self._thread = None
        self._variables = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._write = threading.Lock()  # held while the thread writes weights; pause() takes it
        self._paused = False
        self._error = None

    # -- hooks ---------------------------------------------------------------------------

    def build(self, variables):
        self._variables = list(variables)
        self.start()

    def before_step(self, grads, variables):
        if self.warmup_steps == 0 or size() < 2:
            return grads
        from tf_ps_ops.collectives.ops import Average
        from tf_ps_ops.training.tape import reduce_gradients

        def synchronous():
            return reduce_gradients(grads, self._keys, Compression.none, Average,
                                    variables=variables)

        present = [i for i, g in enumerate(grads) if g is not None]
        dense = [tf.convert_to_tensor(grads[i]) for i in present]
        def averaged():
            reduced = synchronous()
            return [tf.convert_to_tensor(reduced[i]) for i in present]

        chosen = tf.cond(self._step_var < self.warmup_steps, averaged, lambda: dense)
        out = list(grads)
        for i, g in zip(present, tf.nest.flatten(chosen)):
            out[i] = g
        return out

    def callbacks(self):
        return [_PauseDuringEvaluation(self)]

    # -- the thread ------------------------------------------------------------------------

    def start(self):
        """Starts the averaging thread (build() does; again after stop())."""
        if size() < 2 or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop.clear()
        self._error = None
        self._thread = threading.Thread(target=self._loop, name="tfps-async-model-average",
                                        daemon=True)
        self._thread.start()

    def pause(self):
        """From now until resume(), the thread leaves this worker's weights alone (it
        still takes part in rounds, so the other workers do not wait for it)."""
        with self._write:
            self._paused = True

    def resume(self):
        with self._write:
            self._paused = False

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout=None):
        """Ends the thread once every worker has called stop() (after one last average);
        returns once this worker's thread has exited. Raises the error that ended the
        thread, if any."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError("the async model averaging thread did not stop within "
                                   f"{timeout} s: is another worker still training?")
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"async model averaging failed: {error}") from error

    def _loop(self):
        try:
            while self._step_var.numpy() < self.warmup_steps and not self._stop.is_set():
                self._wake.wait(0.01)
            while self._round():
                self._wake.wait(self.sync_interval_ms / 1000.0)
                self._wake.clear()
        except Exception as e:  # kept for stop(): exceptions never cross threads
            _log.error("async model averaging stopped: %s", e)
            self._error = e

    def _round(self):
        """One averaging round; False after the round in which every worker asked to stop."""
        values = [tf.reshape(tf.cast(v, tf.float32), [-1]) for v in self._variables]
        flag = tf.constant([1.0 if self._stop.is_set() else 0.0])
        summed = _library.ops().ps_push_pull(tf.concat(values + [flag], 0), [],
                                            tensor_name="AsyncModelAverage.weights")
        last = float(summed[-1]) > size() - 0.5  # every worker asked to stop
        mean = summed[:-1] / float(size())
        offset = 0
        with self._write:
            if not self._paused:
                for variable, value in zip(self._variables, values):
                    n = int(value.shape[0])
                    delta = tf.reshape(mean[offset:offset + n] - value, variable.shape)
                    variable.assign_add(tf.cast(delta, variable.dtype))
                    offset += n
                self.applied += 1
        self.rounds += 1
        return not last


class _PauseDuringEvaluation(keras.callbacks.Callback):
    """Pauses averaging while `fit` evaluates, and ends it when training ends."""

    def __init__(self, algorithm):
        super().__init__()
        self.algorithm = algorithm

    def on_test_begin(self, logs=None):
        self.algorithm.pause()

    def on_test_end(self, logs=None):
        self.algorithm.resume()

    def on_train_begin(self, logs=None):
        if self.algorithm._built:
            self.algorithm.start()

    def on_train_end(self, logs=None):
        self.algorithm.stop()
