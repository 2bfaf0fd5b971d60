"""AutoTune's bounded search (tf_ps_ops/plan/autotune.py), on step times given by hand:
which settings it tries, in what order, and what it keeps. The callback and the engine's
setter are tested on a real cluster (tests/multiprocess/test_plan_auto.py)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tf_ps_ops.plan import planner  # noqa: E402
from tf_ps_ops.plan.autotune import CYCLES, AutoTune, Search, from_environment  # noqa: E402

KB, MB = 1 << 10, 1 << 20


def run(search, step_of):
    while search.candidate is not None:
        search.record(step_of(*search.candidate))
    return search


def test_fusion_first_then_credit_then_cycle_each_with_the_best_so_far():
    times = {(256 * KB, 0, 0): 1.00, (0, 0, 0): 1.10, (64 * KB, 0, 0): 0.90,
             (1 * MB, 0, 0): 0.95, (64 * KB, 1 * MB, 0): 0.80, (64 * KB, 4 * MB, 0): 0.85,
             (64 * KB, 16 * MB, 0): 0.99, (64 * KB, 1 * MB, 300): 0.70,
             (64 * KB, 1 * MB, 1000): 0.75}
    search = run(Search((256 * KB, 0, 0)), lambda f, c, y: times[(f, c, y)])
    assert [h[:3] for h in search.history] == [
        (256 * KB, 0, 0), (0, 0, 0), (64 * KB, 0, 0), (1 * MB, 0, 0),
        (64 * KB, 1 * MB, 0), (64 * KB, 4 * MB, 0), (64 * KB, 16 * MB, 0),
        (64 * KB, 1 * MB, 300), (64 * KB, 1 * MB, 1000),
        # the running settings and the best once more
        (256 * KB, 0, 0), (64 * KB, 1 * MB, 300)]
    assert search.best == (64 * KB, 1 * MB, 300) and search.best_s == 0.70
    assert search.final == [1.00, 0.70]
    assert [h[3] for h in search.history] == [times[h[:3]] for h in search.history]
    assert len(search.history) == search.planned == 11


def test_a_gain_within_the_noise_keeps_the_running_settings():
    # 2% faster is not more than min_gain (3%): the running settings stay.
    def step(f, c, y):
        return 0.98 if (f, c) == (0, 0) else 1.0

    search = run(Search((256 * KB, 0, 0)), step)
    assert search.best == (256 * KB, 0, 0) and search.final is None
    # 1 + 3 fusions + 3 credits + 2 cycles, none timed again: bounded.
    assert len(search.history) == 9
    search = run(Search((256 * KB, 0, 0), min_gain=0.0), step)
    assert search.best == (0, 0, 0) and search.final == [1.0, 0.98]


def test_a_win_that_does_not_hold_when_timed_again_keeps_the_running_settings():
    # The running settings' first sample is slow (right after the warm-up); every later
    # sample of every setting takes the same. Fusion 0 wins the search, not the re-timing.
    seen = []

    def step(f, c, y):
        seen.append((f, c, y))
        return 1.2 if len(seen) == 1 else 1.0

    search = run(Search((256 * KB, 0, 0)), step)
    assert search.history[-2:] == [(256 * KB, 0, 0, 1.0), (0, 0, 0, 1.0)]
    assert search.best == (256 * KB, 0, 0) and search.best_s == 1.0


def test_no_cycle_is_tried_when_the_best_has_no_fusion_batches():
    search = run(Search((256 * KB, 0, 300)),
                 lambda f, c, y: 0.5 if f == 0 else 1.0)
    assert search.best == (0, 0, 300)
    assert {h[2] for h in search.history} == {300}
    assert len(search.history) == 7 + 2 < search.planned


def test_settings_outside_the_grid_are_tried_first():
    search = run(Search((128 * KB, 2 * MB, 500), fusions=(0, 128 * KB), credits=(0, 2 * MB),
                        cycles=(0, 500)),
                 lambda f, c, y: 1.0)
    assert [h[:3] for h in search.history] == [(128 * KB, 2 * MB, 500), (0, 2 * MB, 500),
                                               (128 * KB, 0, 500), (128 * KB, 2 * MB, 0)]


def test_a_fixed_setting_is_never_changed():
    search = run(Search((256 * KB, 0, 300), cycles=(300,)),
                 lambda f, c, y: 0.5 if y == 0 else 1.0)
    assert {h[2] for h in search.history} == {300} and search.best[2] == 300


def test_the_settings_a_job_set_explicitly_stay_fixed_from_the_environment():
    tuner = from_environment({"TFPS_AUTOTUNE": "1", "TFPS_CYCLE_US": "250",
                              "TFPS_FUSION_BYTES": "0"})
    assert tuner._grid == ((0,), planner.CREDITS, (250,))
    assert from_environment({"TFPS_AUTOTUNE": "1"})._grid == (
        planner.FUSIONS, planner.CREDITS, CYCLES)
    assert from_environment({"TFPS_AUTOTUNE": "0", "TFPS_CYCLE_US": "250"}) is None
    with pytest.raises(ValueError, match="cycle time while training"):
        from_environment({"TFPS_AUTOTUNE": "maybe"})


def test_a_start_without_the_cycle_is_refused():
    with pytest.raises(ValueError, match="cycle us"):
        Search((256 * KB, 0))


def test_a_bad_sample_size_is_refused():
    with pytest.raises(ValueError, match="at least 2 steps a sample"):
        AutoTune(steps_per_sample=1)
