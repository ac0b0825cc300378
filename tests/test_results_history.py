"""Each reported result with the config it was reported under (``config/<key>``
columns, as Ray Tune's), PBT's config changes included; `Result.get_best_checkpoint`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tunefleet.results import ExperimentAnalysis, ResultGrid
from tunefleet.store import ExperimentStore
from tunefleet.trial import Trial, TrialStatus


def _trial(exp: Path, index: int, config: dict[str, Any]) -> Trial:
    trial_id = f"t{index:04d}"
    return Trial(
        trial_id=trial_id,
        index=index,
        name=f"train_{trial_id}",
        config=config,
        resources={"cpu": 1.0},
        path=str(exp / "trials" / trial_id),
    )


def _report(store: ExperimentStore, trial: Trial, iterations: range) -> None:
    for it in iterations:
        result = {"training_iteration": it, "loss": 1.0 / it}
        store.add_result(trial.trial_id, result)
        trial.last_result = result
        trial.num_results += 1


def _exploit(store: ExperimentStore, trial: Trial, new: dict[str, Any], resume_at: int) -> None:
    store.add_event(
        trial.trial_id,
        "exploit",
        {
            "source": "t0001",
            "iteration": resume_at,
            "at_iteration": trial.iteration,
            "old_config": trial.config,
            "new_config": new,
        },
    )
    trial.config = new


@pytest.fixture
def pbt(tmp_path: Path) -> Path:
    """t0000 runs 1-4 at lr 0.1, is exploited (resumes after 2) and runs 3-6 at lr 0.2,
    is exploited by a trial ahead of it (resumes after 8) and runs 9-10 at lr 0.3;
    t0001 is never exploited; t0002 never reports."""
    path = tmp_path / "pbt"
    with ExperimentStore(path) as store:
        store.write_meta({"name": "pbt", "metric": "loss", "mode": "min"})
        first = _trial(path, 0, {"lr": 0.1, "net": {"width": 4}})
        store.add_trial(first)
        _report(store, first, range(1, 5))
        _exploit(store, first, {"lr": 0.2, "net": {"width": 4}}, resume_at=2)
        _report(store, first, range(3, 7))
        _exploit(store, first, {"lr": 0.3, "net": {"width": 8}}, resume_at=8)
        _report(store, first, range(9, 11))
        second = _trial(path, 1, {"lr": 0.5, "net": {"width": 2}})
        store.add_trial(second)
        _report(store, second, range(1, 4))
        silent = _trial(path, 2, {"lr": 0.9, "net": {"width": 1}})
        store.add_trial(silent)
        for trial in (first, second, silent):
            trial.status = TrialStatus.TERMINATED
            store.update_trial(trial)
    return path


LRS = [0.1] * 4 + [0.2] * 4 + [0.3] * 2
ITERATIONS = [1, 2, 3, 4, 3, 4, 5, 6, 9, 10]


def test_metrics_dataframe_has_the_config_of_each_result(pbt: Path) -> None:
    frame = ResultGrid(pbt)[0].metrics_dataframe
    assert list(frame["training_iteration"]) == ITERATIONS
    assert list(frame["config/lr"]) == LRS
    assert list(frame["config/net/width"]) == [4] * 8 + [8] * 2
    assert "config" not in frame.columns
    plain = ResultGrid(pbt)[1].metrics_dataframe
    assert list(plain["config/lr"]) == [0.5] * 3
    assert ResultGrid(pbt)[2].metrics_dataframe.empty


def test_trial_dataframes_match_metrics_dataframe(pbt: Path) -> None:
    analysis = ExperimentAnalysis(pbt)
    frames = analysis.trial_dataframes
    assert list(frames["t0000"]["config/lr"]) == LRS
    assert list(frames["t0001"]["config/net/width"]) == [2] * 3
    assert frames["t0002"].empty
    assert list(analysis.fetch_trial_dataframes()["t0000"]["config/lr"]) == LRS


def test_last_results_carry_the_current_config(pbt: Path) -> None:
    analysis = ExperimentAnalysis(pbt)
    assert analysis.results["t0000"]["config"] == {"lr": 0.3, "net": {"width": 8}}
    assert analysis.results["t0002"] == {}
    frame = analysis.results_df
    assert frame.loc["t0000", "config/lr"] == 0.3 and frame.loc["t0001", "config/net/width"] == 2
    assert analysis.best_result["config"] == {"lr": 0.3, "net": {"width": 8}}
