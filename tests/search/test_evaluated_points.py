"""add_evaluated_point / add_evaluated_trials (Ray's names): what each searcher's model
records, Ray's rules for trials (skipped, failed, pruned), and the refusals."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.search import (
    BasicVariantGenerator,
    BayesOptSearch,
    HyperOptSearch,
    OptunaSearch,
    Searcher,
    TuneBOHB,
)
from tunefleet.trial import TrialStatus

SPACE: dict[str, Any] = {"x": tune.uniform(0.0, 1.0)}


def trial(x: float, status: TrialStatus, last: dict[str, Any]) -> Any:
    """A stand-in with what the method reads of a `Trial` (config, status, last_result)."""
    return SimpleNamespace(config={"x": x}, status=status, last_result=last)


def test_optuna_records_complete_failed_and_pruned_trials() -> None:
    pytest.importorskip("optuna")
    search = OptunaSearch(SPACE, "loss", "min", seed=0)
    search.add_evaluated_point({"x": 0.1}, 0.5)
    search.add_evaluated_point({"x": 0.2}, None, error=True)
    search.add_evaluated_point({"x": 0.3}, 0.9, pruned=True, intermediate_values=[2.0, 0.9])
    study = search._study
    assert study is not None
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "PRUNED"]
    assert trials[0].value == 0.5 and trials[2].intermediate_values == {0: 2.0, 1: 0.9}
    with pytest.raises(ValueError, match="must be 1 finite number"):
        search.add_evaluated_point({"x": 0.4}, float("nan"))
    with pytest.raises(TypeError, match="intermediate_values"):
        search.add_evaluated_point({"x": 0.4}, 1.0, intermediate_values=["a"])  # type: ignore[list-item]


def test_hyperopt_and_bayesopt_count_points_in_their_state() -> None:
    pytest.importorskip("hyperopt")
    pytest.importorskip("optuna")
    hyper = HyperOptSearch(SPACE, "loss", "max", random_state_seed=0)
    bayes = BayesOptSearch(SPACE, "loss", "max", random_state=0)
    searchers: list[Searcher] = [hyper, bayes]
    for search in searchers:
        search.add_evaluated_point({"x": 0.1}, 0.5)
        search.add_evaluated_point({"x": 0.2}, 0.0, error=True)
        search.add_evaluated_point({"x": 0.3}, float("inf"))  # dropped, as a result is
    # HyperOpt keeps a failed trial out of its list (as for a failed run)
    assert [t["result"]["loss"] for t in hyper.get_state()["done"]] == [-0.5]
    assert [t["state"] for t in bayes.get_state()["done"]] == ["COMPLETE", "FAIL"]
    with pytest.raises(TypeError, match="value='a' must be a number"):
        hyper.add_evaluated_point({"x": 0.1}, "a")  # type: ignore[arg-type]


def test_trials_follow_rays_rules() -> None:
    pytest.importorskip("optuna")
    search = OptunaSearch(SPACE, "loss", "min", seed=0)
    search.add_evaluated_trials(
        [
            trial(0.1, TrialStatus.TERMINATED, {"loss": 1.0, "done": True}),
            trial(0.2, TrialStatus.TERMINATED, {"loss": 2.0}),  # stopped early: pruned
            trial(0.3, TrialStatus.ERROR, {"loss": 3.0}),
            trial(0.4, TrialStatus.TERMINATED, {"other": 1.0, "done": True}),  # skipped
        ],
        "loss",
    )
    search.add_evaluated_trials(
        trial(0.5, TrialStatus.TERMINATED, {"loss": 0.5, "done": True}), "loss"
    )
    study = search._study
    assert study is not None
    states = [(t.params["x"], t.state.name) for t in study.get_trials()]
    assert states == [(0.1, "COMPLETE"), (0.2, "PRUNED"), (0.3, "FAIL"), (0.5, "COMPLETE")]


def test_bayesopt_analysis_is_told_to_the_model_at_setup(tmp_path: Any) -> None:
    pytest.importorskip("optuna")

    def objective(config: dict[str, Any]) -> dict[str, float]:
        return {"loss": (config["x"] - 0.5) ** 2}

    grid = tune.Tuner(
        objective,
        param_space={"x": tune.grid_search([0.1, 0.9])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="e", verbose=0),
    ).fit()
    search = BayesOptSearch(SPACE, "loss", "min", analysis=grid)
    search.suggest("t0")
    assert [t["params"]["x"] for t in search.get_state()["done"]][:2] == [0.1, 0.9]
    later = BayesOptSearch(SPACE, "loss", "min")
    later.register_analysis(grid)
    assert len(later.get_state()["done"]) == 2


def test_refusals_name_the_value() -> None:
    pytest.importorskip("optuna")
    with pytest.raises(NotImplementedError, match="BasicVariantGenerator does not take"):
        BasicVariantGenerator().add_evaluated_trials([], "loss")
    search = OptunaSearch(SPACE, "loss", "min")
    with pytest.raises(TypeError, match="trials_or_analysis=3 must be a Trial"):
        search.add_evaluated_trials(3, "loss")
    with pytest.raises(TypeError, match=r"trials_or_analysis\[0\]='x' is not a Trial"):
        search.add_evaluated_trials(["x"], "loss")
    with pytest.raises(TypeError, match="metric=None must be a metric name"):
        search.add_evaluated_trials([], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"storage=.* is not supported"):
        OptunaSearch(SPACE, "loss", "min", None, None, "study", "sqlite:///x.db")
    with pytest.raises(TypeError, match="second argument is bohb_config"):
        TuneBOHB(SPACE, "loss", "min")  # type: ignore[arg-type]
