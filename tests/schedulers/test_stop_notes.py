"""`tunefleet show` says where a scheduler stopped each trial: ASHA's rung, HyperBand's
bracket, the median rule (issue 17). Real runs on the local backend; the trials run one
at a time, best first, so every later trial is stopped at a known place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.schedulers.test_schedulers import make_trial
from tunefleet.cli.main import main
from tunefleet.progress._text import why_ended
from tunefleet.schedulers import ASHAScheduler, HyperBandForBOHB, MedianStoppingRule
from tunefleet.schedulers._base import Decision
from tunefleet.store import StoreReader


def falling(config: dict[str, Any]) -> None:
    for i in range(8):
        tune.report({"loss": config["x"] / (i + 1)})


def _run(storage: str, name: str, scheduler: Any, concurrent: int = 1) -> dict[float, str]:
    tune.Tuner(
        falling,
        param_space={"x": tune.grid_search([1.0, 2.0, 3.0, 4.0])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=scheduler, max_concurrent_trials=concurrent
        ),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0),
    ).fit()
    with StoreReader(Path(storage, name)) as reader:
        return {t.config["x"]: why_ended(t) for t in reader.trials()}


def test_asha_names_the_rung(storage: str, capsys: pytest.CaptureFixture[str]) -> None:
    scheduler = ASHAScheduler(grace_period=1, reduction_factor=2, max_t=8)  # rungs 1, 2, 4, 8
    why = _run(storage, "asha", scheduler)
    # Ray's default stop_last_trials=True: the best trial is stopped at max_t
    assert why[1.0] == "stopped by AsyncHyperBandScheduler (max_t=8 reached) at iter 8"
    for x in (2.0, 3.0, 4.0):
        assert why[x] == "stopped by AsyncHyperBandScheduler (rung 1 of 4) at iter 1", why
    assert main(["show", "asha", "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "(rung 1 of 4) at iter 1" in out


def test_median_rule_says_below_the_median(storage: str) -> None:
    scheduler = MedianStoppingRule(
        time_attr="training_iteration", grace_period=1, min_samples_required=1
    )
    why = _run(storage, "median", scheduler)
    assert why[1.0] == "completed"
    assert why[2.0] == "stopped by MedianStoppingRule (below the median) at iter 1", why


def test_hyperband_names_the_bracket() -> None:
    """HyperBand's cut happens when a bracket's last trial reaches the milestone; the
    scheduler is driven directly so the trials wait there as long as it takes."""
    hb = HyperBandForBOHB(metric="m", mode="max", max_t=9, reduction_factor=3)
    trials = [make_trial(i) for i in range(9)]  # its first bracket, s=2: 9 trials, r=1
    for t in trials:
        hb.on_trial_add(t)
    for i, t in enumerate(trials[:-1]):
        assert hb.on_trial_result(t, {"training_iteration": 1, "m": i}) is Decision.PAUSE
        assert hb.stop_note(t) is None
    assert hb.on_trial_result(trials[-1], {"training_iteration": 1, "m": 8.5}) is (
        Decision.CONTINUE
    )
    cut = trials[0]  # m=0: not in the top third; resumed, it is stopped
    assert hb.on_trial_result(cut, {"training_iteration": 2, "m": 0}) is Decision.STOP
    assert hb.stop_note(cut) == "cut at bracket 1's halving"
    assert hb.stop_note(cut) is None  # read once: nothing kept per trial afterwards
