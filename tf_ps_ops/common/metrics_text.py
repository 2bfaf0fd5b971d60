"""The metrics ports' Prometheus text (docs/metrics.md), read without TensorFlow: for
tf_ps_ops.metrics() and for tfps-run's status line.

A sample is named as Prometheus prints it, with its own labels but without the
process's (`role`, `rank`, which every sample of one process shares):
`tfps_worker_steps_total`, `tfps_worker_sent_bytes_total{peer="server"}`,
`tfps_worker_push_pull_seconds_bucket{le="0.01"}`.
"""

import urllib.request

PROCESS_LABELS = ("role", "rank")
# What a scrape may read: a role's exposition is a few KiB.
_MAX_BYTES = 1 << 20


def sample_key(name, labels):
    own = sorted((k, v) for k, v in labels.items() if k not in PROCESS_LABELS)
    if not own:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in own) + "}"


def parse(text):
    """{sample: value} of one process's exposition (prometheus_client's parser, so that
    what we read is what Prometheus reads)."""
    from prometheus_client.parser import text_string_to_metric_families
    return {sample_key(s.name, s.labels): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(host, port, timeout_s=2.0):
    """GET http://host:port/metrics; the text. Raises OSError when it cannot."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as reply:
        return reply.read(_MAX_BYTES).decode("utf-8", errors="replace")


def bytes_moved(samples, role="worker"):
    """Payload bytes a worker (or server) sent and received, every kind of peer."""
    prefixes = (f"tfps_{role}_sent_bytes_total", f"tfps_{role}_received_bytes_total")
    return sum(v for k, v in samples.items() if k.startswith(prefixes))
