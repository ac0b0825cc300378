"""The keys the trial's session fills into every result (Ray Tune's auto-filled metrics):
running totals of reported increments, and where and when the result was made."""

from __future__ import annotations

import platform
from typing import Any

from tunefleet.session import RunningTotals, host_keys


def test_totals_appear_only_once_an_increment_is_reported() -> None:
    totals = RunningTotals()
    first: dict[str, Any] = {"loss": 1.0}
    totals.fill(first)
    assert first == {"loss": 1.0}
    results: list[dict[str, Any]] = [
        {"timesteps_this_iter": 5},
        {"timesteps_this_iter": 2.5, "episodes_this_iter": 1},
    ]
    for result in results:
        totals.fill(result)
    assert results[0]["timesteps_total"] == 5 and "episodes_total" not in results[0]
    assert results[1]["timesteps_total"] == 7.5 and results[1]["episodes_total"] == 1
    assert results[1]["timesteps_since_restore"] == 7.5
    later: dict[str, Any] = {"loss": 0.5}  # no increment this time: the totals so far
    totals.fill(later)
    assert later["timesteps_total"] == 7.5 and later["episodes_total"] == 1


def test_a_reported_total_wins_and_non_numbers_are_not_counted() -> None:
    totals = RunningTotals()
    own: dict[str, Any] = {"timesteps_this_iter": 3, "timesteps_total": 100}
    totals.fill(own)
    assert own["timesteps_total"] == 100
    odd: dict[str, Any] = {"timesteps_this_iter": True, "episodes_this_iter": "2"}
    totals.fill(odd)
    assert odd["timesteps_total"] == 3 and "episodes_total" not in odd


def test_host_keys_name_the_machine_and_the_local_time() -> None:
    keys = host_keys(0.0)
    assert keys["hostname"] == platform.node() and keys["node_ip"]
    assert len(keys["date"]) == len("1970-01-01_00-00-00")
