"""AutoTune's bounded search (tf_ps_ops/plan/autotune.py), on step times given by hand:
which settings it tries, in what order, and what it keeps. The callback and the engine's
setter are tested on a real cluster (tests/multiprocess/test_plan_auto.py)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tf_ps_ops.plan.autotune import AutoTune, Search  # noqa: E402

KB, MB = 1 << 10, 1 << 20


def run(search, step_of):
    while search.candidate is not None:
        search.record(step_of(*search.candidate))
    return search


def test_fusion_first_then_credit_with_the_best_fusion():
    times = {(256 * KB, 0): 1.00, (0, 0): 1.10, (64 * KB, 0): 0.90, (1 * MB, 0): 0.95,
             (64 * KB, 1 * MB): 0.80, (64 * KB, 4 * MB): 0.85, (64 * KB, 16 * MB): 0.99}
    search = run(Search((256 * KB, 0)), lambda f, c: times[(f, c)])
    assert [(f, c) for f, c, _ in search.history] == [
        (256 * KB, 0), (0, 0), (64 * KB, 0), (1 * MB, 0),
        (64 * KB, 1 * MB), (64 * KB, 4 * MB), (64 * KB, 16 * MB)]
    assert search.best == (64 * KB, 1 * MB) and search.best_s == 0.80


def test_a_gain_within_the_noise_keeps_the_running_settings():
    # 2% faster is not more than min_gain (3%): the running settings stay.
    search = run(Search((256 * KB, 0)), lambda f, c: 0.98 if (f, c) == (0, 0) else 1.0)
    assert search.best == (256 * KB, 0)
    assert len(search.history) == search.planned == 7  # 1 + 3 fusions + 3 credits: bounded
    search = run(Search((256 * KB, 0), min_gain=0.0),
                 lambda f, c: 0.98 if (f, c) == (0, 0) else 1.0)
    assert search.best == (0, 0)


def test_settings_outside_the_grid_are_tried_first():
    search = run(Search((128 * KB, 2 * MB), fusions=(0, 128 * KB), credits=(0, 2 * MB)),
                 lambda f, c: 1.0)
    assert [(f, c) for f, c, _ in search.history] == [(128 * KB, 2 * MB), (0, 2 * MB),
                                                       (128 * KB, 0)]


def test_a_bad_sample_size_is_refused():
    with pytest.raises(ValueError, match="at least 2 steps a sample"):
        AutoTune(steps_per_sample=1)
