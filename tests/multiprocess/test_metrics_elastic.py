"""Metrics ports of an elastic job (docs/metrics.md): `tfps-run --elastic --metrics-port
BASE` gives the scheduler, the servers and each worker slot a port; a worker SIGKILLed
mid-training is replaced and its replacement answers on the slot's port; every role's text
is Prometheus text that prometheus_client's parser reads, and the membership changes
show on the workers and servers too, not only on the scheduler."""

import json
import os
import re
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster import free_base, run_job
from tf_ps_ops.common.metrics_text import parse

pytestmark = pytest.mark.timeout(300)
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metrics_workers",
                      "elastic_worker.py")
STEPS = 8  # elastic_worker.py's MIN_STEPS here; w1 kills itself at step 3


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_elastic_roles_and_a_replacement_answer_on_their_ports(tmp_path):
    base = free_base(6)  # 2 sets of (scheduler, 1 server), 2 worker slots
    out = run_job([sys.executable, "-m", "tf_ps_ops.run", "-np", "2", "-ns", "1", "--elastic",
                   "--elastic-restarts", "1", "--metrics-port", str(base),
                   "--status-every", "0.5", "--timeout", "240",
                   sys.executable, WORKER, str(tmp_path), "w1", "3", str(STEPS)],
                  timeout=270, env={"TFPS_HEARTBEAT_TIMEOUT": "5", "TFPS_HIERARCHICAL": "0",
                                    "TFPS_SHM_SERVER": "0", "TFPS_METRICS_PORT": None})
    assert "worker w1 (rank 1) was killed by signal 9" in out, out[-6000:]
    reports = {name: json.loads((tmp_path / f"{name}.json").read_text())
               for name in ("w0", "w2")}
    assert not (tmp_path / "w1.json").exists()
    # w0 keeps slot 0; w2 replaces w1 and takes its slot, hence its port.
    assert reports["w0"]["own"] == reports["w0"]["reported"] == base + 2
    assert reports["w2"]["own"] == reports["w2"]["reported"] == base + 3
    # The epoch after the kill started while the first epoch's roles still ran: it took the
    # second set of control ports (after the worker slots).
    assert f"metrics ports: scheduler {base}, servers {base + 1}" in out, out[-6000:]
    assert f"metrics ports: scheduler {base + 4}, servers {base + 5}" in out, out[-6000:]
    for name, report in reports.items():
        assert 1 in report["sizes"] and report["sizes"][-1] == 2
        assert report["control"]["scheduler"] in (base, base + 4)
        worker = families(report["worker"])
        assert worker["tfps_worker_steps"].type == "counter"
        assert worker["tfps_worker_steps"].samples[0].labels["role"] == "worker"
        scheduler = families(report["scheduler"])
        assert scheduler["tfps_scheduler_members"].samples[0].labels == {"role": "scheduler"}
        server = families(report["servers"][0])
        assert server["tfps_server_rounds"].samples[0].labels["role"] == "server"
    assert reports["w0"]["w"] == reports["w2"]["w"]  # the replacement was synced
    w0, w2 = parse(reports["w0"]["worker"]), parse(reports["w2"]["worker"])
    # The survivor did every step; the replacement the steps since it joined.
    assert w0["tfps_worker_steps_total"] >= len(reports["w0"]["sizes"])
    assert 0 < w2["tfps_worker_steps_total"] < w0["tfps_worker_steps_total"]
    # Membership changes, as each role saw them: the survivor was told of w1's loss; the
    # last epoch's server saw both members connect, its scheduler both register.
    assert w0["tfps_membership_changes_total"] >= 1
    assert parse(reports["w0"]["servers"][0])["tfps_membership_changes_total"] >= 2
    assert parse(reports["w0"]["scheduler"])["tfps_membership_changes_total"] >= 3
    # The status line follows the members through the epochs.
    # A rank shows a rate once it answered two samples, "-" before: the replacement may
    # join too close to the end for two, so the lines are checked for who they list.
    status = re.findall(r"tfps-run status: steps/s (.*?) \| MB/s", out)
    alone = [i for i, s in enumerate(status) if re.fullmatch(r"[\d.]+ \(rank 0\)", s)]
    assert alone, status  # the epoch of w0 alone, measured
    assert any(re.fullmatch(r"(-|[\d.]+) \(rank 0\) (-|[\d.]+) \(rank 1\)", s)
               for s in status[alone[0]:]), status  # then w2 beside it
