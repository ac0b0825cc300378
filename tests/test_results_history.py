"""Each reported result with the config it was reported under (``config/<key>``
columns, as Ray Tune's), PBT's config changes included; `Result.get_best_checkpoint`."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from tunefleet.checkpoint import Checkpoint
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


# -- Result.get_best_checkpoint ------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """One trial with checkpoints 1-5 (loss 3, 1, NaN, 1, 2; `acc` only from 4 on,
    `nested/f1` on 5), one trial without checkpoints."""
    path = tmp_path / "saved"
    losses = [3.0, 1.0, math.nan, 1.0, 2.0]
    with ExperimentStore(path) as store:
        trial = _trial(path, 0, {"lr": 0.1})
        store.add_trial(trial)
        for it, loss in enumerate(losses, start=1):
            result: dict[str, Any] = {"training_iteration": it, "loss": loss, "note": "x"}
            if it >= 4:
                result["acc"] = it / 10
            if it == 5:
                result["nested"] = {"f1": 0.5}
            store.add_result(trial.trial_id, result)
            ckpt = os.path.join(trial.path, "checkpoints", f"checkpoint_{it:06d}")
            store.add_checkpoint(trial.trial_id, it, ckpt, result)
            trial.last_result, trial.latest_checkpoint = result, ckpt
        store.update_trial(trial)
        store.add_trial(_trial(path, 1, {"lr": 0.2}))
    return path


def _step(checkpoint: Checkpoint | None) -> int:
    assert checkpoint is not None
    return int(os.path.basename(checkpoint.path).split("_")[1])


def test_get_best_checkpoint_by_min_and_max(saved: Path) -> None:
    result = ResultGrid(saved)[0]
    assert _step(result.get_best_checkpoint("loss", "min")) == 2  # a tie: the older wins
    assert _step(result.get_best_checkpoint("loss", "max")) == 1  # NaN never wins
    assert _step(result.get_best_checkpoint("acc", "min")) == 4  # the others lack acc
    assert _step(result.get_best_checkpoint("nested/f1", "max")) == 5
    assert _step(result.get_best_checkpoint(metric="training_iteration", mode="max")) == 5


def test_get_best_checkpoint_bad_input_is_named(saved: Path) -> None:
    grid = ResultGrid(saved)
    result = grid[0]
    with pytest.raises(ValueError, match=r"mode='minimum' is not valid; choose 'min' or 'max'"):
        result.get_best_checkpoint("loss", "minimum")
    with pytest.raises(ValueError, match=r"metric='' is not valid.*non-empty string"):
        result.get_best_checkpoint("", "min")
    with pytest.raises(ValueError, match=r"value of 'note' saved with .*checkpoint_000001 is 'x'"):
        result.get_best_checkpoint("note", "min")
    with pytest.raises(RuntimeError, match=r"saved with 'los'\. Did you mean 'loss'\?.*acc, loss"):
        result.get_best_checkpoint("los", "min")
    with pytest.raises(RuntimeError, match=r"trial t0001 has no checkpoint on disk"):
        grid[1].get_best_checkpoint("loss", "min")
