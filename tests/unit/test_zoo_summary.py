"""The zoo's plan-against-best verdict (benchmarks/zoo.py): the paired ratio's geometric
mean and one-sided 95% bounds against NumPy on the log ratios, and the sentence each
outcome gets: within 5% of every hand-picked mode, more than 5% slower than one, or not
settled by the repeats."""

import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import zoo  # noqa: E402


def row(*steps):
    return {"repeat_step_s": list(steps)}


def test_paired_bounds_match_a_t_interval_on_the_log_ratios():
    plan = row(0.62, 0.70, 0.76, 0.66, 0.71, 0.69)
    best = row(0.65, 0.66, 0.69, 0.64, 0.70, 0.66)
    logs = np.log(np.array(plan["repeat_step_s"]) / np.array(best["repeat_step_s"]))
    half = 2.015 * logs.std(ddof=1) / math.sqrt(len(logs))  # t(0.95, 5 degrees of freedom)
    mean, low, high, n = zoo.paired_bounds(plan, best)
    assert n == 6
    assert mean == pytest.approx(math.exp(logs.mean()))
    assert low == pytest.approx(math.exp(logs.mean() - half))
    assert high == pytest.approx(math.exp(logs.mean() + half))
    assert low < mean < high


def test_a_failed_repeat_drops_its_pair_and_one_pair_settles_nothing():
    plan, best = row(1.0, None, 1.2, 1.1), row(1.0, 1.0, None, 1.0)
    assert zoo.paired_bounds(plan, best)[3] == 2  # repeats 0 and 3 only
    assert zoo.paired_bounds(row(1.0, None), row(1.0, 1.0)) is None
    assert zoo.paired_bounds({}, best) is None


def test_the_verdict_says_within_over_or_not_settled():
    same = row(1.00, 1.01, 0.99, 1.00)
    tight = zoo.paired_bounds(same, row(1.00, 1.00, 1.00, 1.00))
    assert tight[2] <= zoo.WITHIN
    assert zoo.verdict({"sum": tight}).startswith("yes")
    slow = zoo.paired_bounds(row(1.10, 1.12, 1.11), row(1.0, 1.0, 1.0))
    assert slow[1] > zoo.WITHIN
    assert zoo.verdict({"sum": tight, "ps": slow}) == "no: over 5% slower than ps"
    noisy = zoo.paired_bounds(row(0.9, 1.2, 1.0), row(1.0, 1.0, 1.0))
    assert noisy[1] <= zoo.WITHIN < noisy[2]
    assert zoo.verdict({"sum": tight, "ps": noisy}).startswith("not settled")
    assert "ps" in zoo.verdict({"sum": tight, "ps": noisy})
    assert zoo.verdict({"sum": None}) == "—"
