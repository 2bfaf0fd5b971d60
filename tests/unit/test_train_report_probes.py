"""The training benchmark's predictions take the link's probes as the median over the
sweep's rows at that rate, and the model's step-beside-the-link probes over that model's
rows (benchmarks/train_report.py pooled_probes): every row measures the same emulated
link, and one row's probe alone varied by half."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import train_report  # noqa: E402


def _row(rate, model, mode, bandwidth, loss, status="ok"):
    return dict(rate=rate, model=model, mode=mode, status=status, plan_inputs=dict(
        cluster=dict(bandwidth=bandwidth, latency=1e-4),
        machine=dict(transport_per_byte=1e-9, transport_per_message=1e-5,
                     compute_loss=loss, compute_cpu_loss=2 * loss, macs_per_s=7.0)))


def test_link_probes_pool_over_the_rate_and_model_probes_over_the_model():
    rows = [_row("1gbit", "a", "sum", 100.0, 0.1), _row("1gbit", "a", "ps", 300.0, 0.3),
            _row("1gbit", "b", "sum", 200.0, 0.5), _row("1gbit", "b", "ps", 1e9, 0.9,
                                                        status="failed"),
            _row("10gbit", "a", "sum", 1000.0, 0.7), dict(rate="1gbit", model="a",
                                                          mode="single", status="ok")]
    probes = train_report.pooled_probes(rows)
    assert probes[("1gbit", "a")][("cluster", "bandwidth")] == 200.0  # a's and b's rows
    assert probes[("1gbit", "b")][("cluster", "bandwidth")] == 200.0  # not the failed one
    assert probes[("10gbit", "a")][("cluster", "bandwidth")] == 1000.0
    assert probes[("1gbit", "a")][("machine", "compute_loss")] == pytest.approx(0.2)
    assert probes[("1gbit", "b")][("machine", "compute_cpu_loss")] == pytest.approx(1.0)
    inputs = train_report.pooled(rows[1], probes)
    assert inputs["cluster"]["bandwidth"] == 200.0
    assert inputs["machine"]["compute_loss"] == pytest.approx(0.2)
    assert inputs["machine"]["macs_per_s"] == 7.0  # what is not a probe stays the row's
    assert rows[1]["plan_inputs"]["cluster"]["bandwidth"] == 300.0  # the row is not changed


def test_runs_saved_before_the_model_probe_pool_what_they_have():
    rows = [_row("1gbit", "a", "sum", 100.0, 0.1), _row("1gbit", "a", "ps", 300.0, 0.3)]
    for row in rows:
        del row["plan_inputs"]["machine"]["compute_cpu_loss"]
    probes = train_report.pooled_probes(rows)[("1gbit", "a")]
    assert ("machine", "compute_cpu_loss") not in probes
    assert "compute_cpu_loss" not in train_report.pooled(rows[0], {("1gbit", "a"): probes})[
        "machine"]
