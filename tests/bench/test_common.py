"""bench/common.py: a percentile means what it says, and ratios pair runs by round."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# Loaded under a name of its own: the scripts import it as a top-level `common`.
_spec = importlib.util.spec_from_file_location(
    "alarmtop_bench_common", Path(__file__).resolve().parents[2] / "bench" / "common.py")
assert _spec is not None and _spec.loader is not None
common = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = common
_spec.loader.exec_module(common)
paired_ratio, percentile = common.paired_ratio, common.percentile
samples_needed, summary = common.samples_needed, common.summary


def test_a_p99_of_fifty_samples_is_not_their_max_under_another_name() -> None:
    presses = [float(ms) for ms in range(1, 51)]
    assert percentile(presses, 99) is None
    assert percentile(presses, 50) == 25.0


def test_a_p99_needs_two_samples_above_it() -> None:
    assert samples_needed(99) == 200
    assert samples_needed(90) == 20
    values = [float(v) for v in range(1, 201)]
    p99 = percentile(values, 99)
    assert p99 == 198.0
    assert sum(v > p99 for v in values) == 2


def test_no_samples_give_no_percentile() -> None:
    assert percentile([], 50) is None


def test_ratios_pair_the_runs_of_one_round() -> None:
    ours, theirs = [100.0, 200.0, 300.0], [10.0, 40.0, 20.0]
    assert paired_ratio(ours, theirs) == (10.0, 5.0, 15.0)
    # a time or a cost: the peer's over ours
    assert paired_ratio([1.0, 2.0, 4.0], [10.0, 10.0, 10.0],
                        higher_is_better=False) == (5.0, 2.5, 10.0)


def test_a_missing_figure_is_left_out_not_counted_as_zero() -> None:
    assert summary([None, 3.0, 1.0]) == (2.0, 1.0, 3.0)
    assert summary([None]) is None
    assert paired_ratio([None, 4.0], [1.0, 2.0]) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("p", [50, 90, 99, 99.9])
def test_enough_samples_always_give_a_percentile(p: float) -> None:
    values = [float(v) for v in range(samples_needed(p))]
    assert percentile(values, p) is not None
