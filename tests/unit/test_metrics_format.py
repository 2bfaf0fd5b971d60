"""The metrics registry's text (rendered in C++, read here by prometheus_client's parser),
tfps-run's port rule, its flags' checks, and the status line's arithmetic."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from tf_ps_ops.common import metrics_text  # noqa: E402
from tf_ps_ops.runner import run as tfps_run  # noqa: E402
from tf_ps_ops.runner.status import (ElasticPorts, StatusLine, check_ports,  # noqa: E402
                                     metrics_ports)

prometheus_parser = pytest.importorskip("prometheus_client.parser")


def test_the_op_library_renders_well_formed_text_before_init():
    pytest.importorskip("tensorflow")
    from cluster import require_build
    require_build()
    import tf_ps_ops
    text = tf_ps_ops.metrics_text()
    families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
    expected = {"tfps_worker_steps": "counter", "tfps_worker_push_pull_seconds": "histogram",
                "tfps_worker_sent_bytes": "counter", "tfps_worker_partitions_in_flight": "gauge",
                "tfps_worker_send_queue_partitions": "gauge", "tfps_errors": "counter",
                "tfps_stalls": "counter", "tfps_membership_changes": "counter",
                "tfps_server_rounds": "counter", "tfps_server_push_bytes_held": "gauge",
                "tfps_scheduler_members": "gauge", "process_resident_memory_bytes": "gauge"}
    for name, kind in expected.items():
        assert families[name].type == kind, name
    buckets = [s for s in families["tfps_worker_push_pull_seconds"].samples
               if s.name.endswith("_bucket")]
    assert buckets[-1].labels["le"] == "+Inf" and len(buckets) == 16
    assert {s.labels["peer"] for s in families["tfps_worker_sent_bytes"].samples} == \
        {"server", "worker"}
    samples = tf_ps_ops.metrics()
    assert samples["tfps_worker_steps_total"] == 0
    assert samples['tfps_worker_sent_bytes_total{peer="server"}'] == 0
    assert samples['tfps_worker_push_pull_seconds_bucket{le="+Inf"}'] == 0
    assert samples["process_resident_memory_bytes"] > 0
    assert tf_ps_ops.metrics_port() is None


def test_sample_keys_drop_the_process_labels_only():
    text = ('# TYPE a_total counter\na_total{role="worker",rank="1",peer="server"} 3\n'
            '# TYPE b gauge\nb{role="server"} 4\n')
    assert metrics_text.parse(text) == {'a_total{peer="server"}': 3.0, "b": 4.0}
    assert metrics_text.bytes_moved({'tfps_worker_sent_bytes_total{peer="server"}': 5.0,
                                     'tfps_worker_received_bytes_total{peer="worker"}': 7.0,
                                     "tfps_worker_steps_total": 11.0}) == 12.0


def test_every_process_of_a_job_gets_its_own_port():
    ports = metrics_ports(9400, num_servers=2, num_workers=3)
    assert ports == {("scheduler", 0): 9400, ("server", 0): 9401, ("server", 1): 9402,
                     ("worker", 0): 9403, ("worker", 1): 9404, ("worker", 2): 9405}
    assert check_ports(65530, 2, 3) is None
    assert "at most 65530" in check_ports(65531, 2, 3)


@pytest.mark.parametrize("argv, error", [
    (["--status-every", "5"], "give --metrics-port BASE too"),
    (["--metrics-port", "0", "--status-every", "5"], "a base port, not 0"),
    (["--metrics-port", "65534"], "needs ports up to 65537"),
    (["--metrics-port", "65531", "--elastic"], "needs ports up to 65536 (two sets of"),
    (["--metrics-port", "9400", "--host-discovery-script", "./hosts.sh"], "needs --max-np"),
])
def test_tfps_run_refuses_metrics_flags_it_cannot_honour(capsys, argv, error):
    with pytest.raises(SystemExit):
        tfps_run.parse_args(["-np", "2", *argv, "python3", "train.py"])
    assert error in capsys.readouterr().err


def test_elastic_ports_reuse_a_dead_workers_slot_and_alternate_the_control_sets():
    ports = ElasticPorts(9400, num_servers=2, slots=3)
    alive = {"w0", "w1", "w2"}
    assert [ports.take(w, alive.__contains__) for w in ("w0", "w1", "w2")] == \
        [9403, 9404, 9405]
    assert ports.take("w3", alive.__contains__) == 0  # every slot held: a free port
    alive.discard("w1")
    assert ports.take("w4", alive.__contains__) == 9404  # w1's slot, w1's port
    assert ports.port("w4") == 9404 and ports.port("w3") == 0
    first = {("scheduler", 0): 9400, ("server", 0): 9401, ("server", 1): 9402}
    second = {("scheduler", 0): 9406, ("server", 0): 9407, ("server", 1): 9408}
    assert ports.control(set()) == (0, first)
    assert ports.control({0}) == (1, second)
    assert ports.control({None, 1}) == (0, first)
    assert ports.control({0, 1})[1] == {place: 0 for place in first}
    assert ElasticPorts(0, 1, 2).control(set())[1] == {("scheduler", 0): 0, ("server", 0): 0}


def test_the_status_line_follows_changing_members_and_a_restarted_port():
    members = [(0, "h", 1)]
    steps = {1: 10.0}
    line = StatusLine(lambda: list(members), 1.0,
                      scrape=lambda host, port: f"tfps_worker_steps_total {steps[port]}\n")
    assert line.sample() == {0: None}
    steps[1] = 20.0
    assert line.sample()[0][0] > 0
    steps[1], steps[2] = 3.0, 5.0  # a new process on port 1; a member joined on port 2
    members.append((1, "h", 2))
    assert line.sample() == {0: None, 1: None}


def test_tfps_run_takes_the_metrics_flags():
    args = tfps_run.parse_args(["-np", "2", "--metrics-port", "9400", "--status-every",
                                "2.5", "python3", "train.py"])
    assert args.metrics_port == 9400 and args.status_every == 2.5
    args = tfps_run.parse_args(["-np", "2", "--elastic", "--metrics-port", "9400",
                                "--status-every", "1", "python3", "train.py"])
    assert args.metrics_slots == 2


def test_the_status_line_names_rates_hosts_and_the_slowest_rank():
    line = StatusLine.line({0: (12.0, 3e6, "a"), 1: (8.5, 1e6, "a"), 2: (11.0, 2e6, "b"),
                            3: None})
    assert line == ("tfps-run status: steps/s 12.0 (rank 0) 8.5 (rank 1) 11.0 (rank 2) "
                    "- (rank 3) | MB/s 4.0 (a) 2.0 (b) | slowest rank 1")
    assert StatusLine.line({0: None}).endswith("| MB/s - | slowest -")
