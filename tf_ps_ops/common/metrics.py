"""This worker's metrics (docs/metrics.md): the counters its metrics port serves, also
without a port (TFPS_METRICS_PORT unset).

    tf_ps_ops.metrics()["tfps_worker_steps_total"]
    tf_ps_ops.metrics()['tfps_worker_sent_bytes_total{peer="server"}']

The counters live in the op library (one lock-free registry per process, shared with the
engine); before init() every count is 0.
"""

import ctypes

from tf_ps_ops.common import library as _library
from tf_ps_ops.common import metrics_text as _text


def metrics_text():
    """This worker's metrics in the Prometheus text format (what GET /metrics answers)."""
    size = 1 << 16
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = _library.c_api().tfps_metrics_text(buffer, size)
        if length < size:
            return buffer.value.decode("utf-8", errors="replace")
        size = length + 1


def metrics():
    """{sample: value} of this worker's metrics: the name, with the sample's own labels
    in braces (not role/rank), as in the Prometheus text: see the module doc."""
    return _text.parse(metrics_text())


def metrics_port():
    """The port of this worker's metrics endpoint (TFPS_METRICS_PORT; the one chosen
    when 0), or None when it has none."""
    port = _library.c_api().tfps_metrics_port()
    return None if port < 0 else port
