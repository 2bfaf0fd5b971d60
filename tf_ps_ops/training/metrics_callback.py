"""MetricsCallback (tf_ps_ops.callbacks): the engine's counters (tf_ps_ops.metrics()) as
TensorBoard scalars, through tf.summary, every `every_n_batches` batches."""

import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from tf_ps_ops.common.basics import rank, size
from tf_ps_ops.common.metrics import metrics
from tf_ps_ops.common.metrics_text import bytes_moved
from tf_ps_ops.training.keras_callbacks import FollowsTheModel

_COMM_SECONDS = "tfps_worker_push_pull_seconds_sum"
# What tf.summary.scalar tags a scalar with (TensorBoard's scalars plugin), written through
# tf.summary.write, which TensorFlow has itself: tf.summary.scalar needs the tensorboard
# package installed, writing these events does not.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR).SerializeToString()


class MetricsCallback(FollowsTheModel):
    """Writes this worker's throughput and communication to TensorBoard.

    Every `every_n_batches` training batches, over the batches since the last write:
      tfps/samples_per_sec        samples this worker trained per second (batch_size given)
      tfps/job_samples_per_sec    the same times size() (every worker trains alike)
      tfps/steps_per_sec          batches per second
      tfps/comm_seconds_per_step  push_pull time per batch, summed over the tensors (calls
                                  that overlap each count: a measure of waiting, not of
                                  wall time)
      tfps/bytes_per_step         payload bytes sent and received per batch, every peer

    Args:
      log_dir: where the summary files go; "%r" becomes the rank. Without "%r" only rank
        0 writes (the others would write the same place).
      batch_size: samples per batch on this worker, for the samples/s scalars (None:
        only steps/s).
      every_n_batches: how often to write (each write reads the counters once).

    `last` holds the latest values written (a dict of the names above), on every rank.
    """

    def __init__(self, log_dir, batch_size=None, every_n_batches=10):
        super().__init__()
        if every_n_batches < 1:
            raise ValueError(f"every_n_batches must be at least 1, got {every_n_batches}")
        self.log_dir = log_dir
        self.batch_size = batch_size
        self.every_n_batches = every_n_batches
        self.last = {}
        self._writer = None
        self._step = 0  # batches trained since fit() began, over epochs
        self._mark = None  # (time, batches, comm seconds, bytes) at the last write

    def _writes(self):
        return "%r" in self.log_dir or rank() == 0

    def on_train_begin(self, logs=None):
        if self._writer is None and self._writes():
            self._writer = tf.summary.create_file_writer(
                self.log_dir.replace("%r", str(rank())))
        self._mark = self._read()

    def _read(self):
        samples = metrics()
        return (time.monotonic(), self._step, samples.get(_COMM_SECONDS, 0.0),
                bytes_moved(samples))

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self._step % self.every_n_batches == 0:
            self._write()

    def _write(self):
        now = self._read()
        seconds, batches = now[0] - self._mark[0], now[1] - self._mark[1]
        if batches <= 0 or seconds <= 0:
            return
        values = {"tfps/steps_per_sec": batches / seconds,
                  "tfps/comm_seconds_per_step": (now[2] - self._mark[2]) / batches,
                  "tfps/bytes_per_step": (now[3] - self._mark[3]) / batches}
        if self.batch_size:
            values["tfps/samples_per_sec"] = self.batch_size * batches / seconds
            values["tfps/job_samples_per_sec"] = values["tfps/samples_per_sec"] * size()
        self._mark = now
        self.last = values
        if self._writer is not None:
            with self._writer.as_default():
                for name, value in values.items():
                    tf.summary.write(name, tf.constant(value, tf.float32), step=self._step,
                                     metadata=_SCALAR_METADATA)
            self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()
