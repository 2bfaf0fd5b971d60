"""HybComm's cost model (sfb.policy) against costs computed by hand from
docs/sfb.md's formulas. No TensorFlow: the arithmetic must stay importable without it."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from sfb import policy  # noqa: E402

FC6 = dict(n=25088, m=4096)   # VGG: 7·7·512 inputs, 4096 units
FC7 = dict(n=4096, m=4096)


def test_vgg_fc6_at_8_workers_and_servers_takes_sfb():
    # PS: 2·M·N·(P1+P2−2)/P2 = 2·4096·25088·14/8;  SFB: 2·K·(P1−1)·(M+N) = 2·32·7·29184.
    assert policy.ps_cost(4096, 25088, 8, 8) == 359_661_568
    assert policy.sfb_cost(4096, 25088, 32, 8) == 13_074_432
    d = policy.decide("fc6", k=32, workers=8, servers=8, **FC6)
    assert (d.choice, d.reason) == ("sfb", "cost")
    assert d.ps_cost / d.sfb_cost == pytest.approx(27.5, abs=0.1)  # "~27× less"


def test_vgg_fc7_at_8_workers_and_servers_takes_sfb():
    assert policy.ps_cost(4096, 4096, 8, 8) == 58_720_256
    assert policy.sfb_cost(4096, 4096, 32, 8) == 3_670_016
    assert policy.decide("fc7", k=32, workers=8, servers=8, **FC7).choice == "sfb"


def test_large_batch_times_workers_takes_ps():
    # K=256, P=64: SFB 2·256·63·8192 = 264,241,152 > PS 2·4096²·126/64 = 66,060,288.
    d = policy.decide("fc7", k=256, workers=64, servers=64, **FC7)
    assert d.sfb_cost == 264_241_152 and d.ps_cost == 66_060_288
    assert d.choice == "ps"


def test_colocated_threshold_is_k_p_at_most_2mn_over_m_plus_n():
    # fc6, K=32: 2MN/(M+N) = 7042.4, so SFB up to P=220 and PS from P=221.
    assert policy.best_scheme(4096, 25088, 32, 220, 220) == "sfb"
    assert policy.best_scheme(4096, 25088, 32, 221, 221) == "ps"


def test_small_output_layer_takes_ps():
    # 4096 -> 10: PS 2·40960·14/8 = 143,360 < SFB 2·32·7·4106 = 1,839,488.
    assert policy.decide("logits", n=4096, m=10, k=32, workers=8, servers=8).choice == "ps"


def test_dedicated_servers_cost_the_busier_node():
    # A worker moves 2·M·N; a server 2·P1·M·N/P2, here 4× as much.
    assert policy.ps_cost(4096, 4096, 8, 2, colocated=False) == 8 * 4096 * 4096
    assert policy.ps_cost(4096, 4096, 2, 8, colocated=False) == 2 * 4096 * 4096
    assert policy.best_scheme(4096, 4096, 32, 8, 2, colocated=False) == "sfb"


def test_single_worker_costs_nothing_either_way():
    assert policy.ps_cost(10, 10, 1, 1) == 0 and policy.sfb_cost(10, 10, 32, 1) == 0


def test_overrides_and_unknown_rows():
    forced = policy.decide("fc6", k=32, workers=8, servers=8, override="ps", **FC6)
    assert (forced.choice, forced.reason) == ("ps", "override")
    unknown = policy.decide("tokens", k=None, workers=8, servers=8, **FC7)
    assert unknown.choice == "ps" and unknown.sfb_cost is None
    with pytest.raises(ValueError, match="'sfb' or 'ps'"):
        policy.decide("fc6", k=32, workers=8, servers=8, override="allreduce", **FC6)


def test_table_lists_layer_shape_costs_and_choice():
    decisions = [policy.decide("fc6", k=32, workers=8, servers=8, **FC6),
                 policy.decide("logits", n=4096, m=10, k=32, workers=8, servers=8)]
    table = policy.format_table(decisions, 8, 8)
    lines = table.splitlines()
    assert lines[0].startswith("HybComm: 8 workers, 8 servers (colocated)")
    fc6 = next(line for line in lines if line.startswith("fc6"))
    assert fc6.split() == ["fc6", "25088×4096", "32", "3.597e+08", "1.307e+07", "sfb"]
    assert next(line for line in lines if line.startswith("logits")).split()[-1] == "ps"


def test_policy_imports_without_tensorflow():
    code = "import sys, sfb.policy; assert 'tensorflow' not in sys.modules, 'TF imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
