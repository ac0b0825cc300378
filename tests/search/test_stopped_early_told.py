"""A trial the scheduler stops early reaches the searcher as stopped early, not completed.

ASHA stops most trials at a low rung; their last loss is an epoch-1 or epoch-3 value,
not a final one. OptunaSearch used to tell it to the study as the trial's value, so
TPE compared epoch-1 losses with epoch-9 ones and converged on configs that start
fast. Now the controller tells `on_trial_stopped_early` when the scheduler stopped a
trial before its budget (`TrialScheduler.stopped_early`); OptunaSearch records the
trial as PRUNED with its value at its step (TPE ranks those after the complete ones);
BayesOptSearch and HyperOptSearch leave it out; a searcher that does not know the
hook hears `on_trial_complete`, as in Ray Tune. Real runs on the simulated backend.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import ASHAScheduler, HyperBandScheduler, MedianStoppingRule
from tunefleet.search import (
    BayesOptSearch,
    ConcurrencyLimiter,
    HyperOptSearch,
    OptunaSearch,
    Searcher,
)

MAX_T = 9
SPACE = {"x": tune.uniform(0.0, 1.0)}


def loss(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


def run(
    tmp_path: Path, searcher: Searcher, scheduler: Any, samples: int = 24, space: Any = SPACE
) -> tune.ResultGrid:
    grid = tune.Tuner(
        SimulatedTrainable(loss, cost=1.0, max_budget=MAX_T, workers=4),
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=samples,
            search_alg=searcher,
            scheduler=scheduler,
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    return grid


def last_iterations(grid: tune.ResultGrid) -> dict[str, int]:
    return {r.metrics["trial_id"]: int(r.metrics["training_iteration"]) for r in grid}


def study_trials(search: OptunaSearch) -> dict[str, optuna.trial.FrozenTrial]:
    """The study's trial of each tunefleet trial id."""
    assert search._study is not None
    by_number = {t.number: t for t in search._study.get_trials(deepcopy=False)}
    return {str(tid): by_number[int(number)] for tid, number in search._asked}


def asha() -> ASHAScheduler:
    return ASHAScheduler(max_t=MAX_T, grace_period=1, reduction_factor=3)


def test_optuna_hears_asha_stops_as_pruned_at_their_step(tmp_path: Path) -> None:
    search = OptunaSearch(seed=0)
    grid = run(tmp_path, search, asha())
    reached = last_iterations(grid)
    trials = study_trials(search)
    assert set(trials) == set(reached)
    pruned = [tid for tid, t in reached.items() if t < MAX_T]
    complete = [tid for tid, t in reached.items() if t == MAX_T]
    assert pruned and complete, reached  # ASHA stopped some below max_t, not all
    states = optuna.trial.TrialState
    for tid in pruned:
        trial, step = trials[tid], reached[tid]
        assert trial.state is states.PRUNED, (tid, step, trial.state)
        value = grid[[r.metrics["trial_id"] for r in grid].index(tid)].metrics["loss"]
        assert trial.intermediate_values == {step: pytest.approx(value)}
    for tid in complete:  # stopped by ASHA at max_t: that is a completion
        assert trials[tid].state is states.COMPLETE, tid
        assert trials[tid].intermediate_values == {}


def test_pruned_trials_survive_a_state_round_trip_and_the_next_asks_agree(
    tmp_path: Path,
) -> None:
    search = OptunaSearch(seed=1)
    run(tmp_path, search, asha())
    state = json.loads(json.dumps(search.get_state()))
    copy = OptunaSearch(seed=1)
    copy.set_search_properties("loss", "min", SPACE)
    copy.set_state(state)
    before = {tid: (t.state, t.intermediate_values) for tid, t in study_trials(search).items()}
    after = {tid: (t.state, t.intermediate_values) for tid, t in study_trials(copy).items()}
    assert after == before
    assert any(s is optuna.trial.TrialState.PRUNED for s, _ in after.values())
    ahead = [search.suggest(f"next_{i}") for i in range(3)]
    again = [copy.suggest(f"next_{i}") for i in range(3)]
    assert ahead == again


def test_the_limiter_passes_stopped_early_on_in_batch_mode(tmp_path: Path) -> None:
    search = OptunaSearch(seed=2)
    grid = run(tmp_path, ConcurrencyLimiter(search, max_concurrent=4, batch=True), asha())
    reached = last_iterations(grid)
    trials = study_trials(search)
    for tid, t in reached.items():
        expected = "PRUNED" if t < MAX_T else "COMPLETE"
        assert trials[tid].state.name == expected, (tid, t)


def test_median_stopping_and_never_resumed_hyperband_trials_are_stopped_early(
    tmp_path: Path,
) -> None:
    median = OptunaSearch(seed=3)
    grid = run(
        tmp_path / "median",
        median,
        MedianStoppingRule(time_attr="training_iteration", grace_period=1, min_samples_required=2),
    )
    reached = last_iterations(grid)
    assert any(t < MAX_T for t in reached.values()), reached
    for tid, trial in study_trials(median).items():
        assert trial.state.name == ("PRUNED" if reached[tid] < MAX_T else "COMPLETE"), tid
    band = OptunaSearch(seed=4)
    grid = run(tmp_path / "hyperband", band, HyperBandScheduler(max_t=MAX_T, reduction_factor=3))
    reached = last_iterations(grid)
    assert any(t < MAX_T for t in reached.values()), reached
    for tid, trial in study_trials(band).items():
        assert trial.state.name == ("PRUNED" if reached[tid] < MAX_T else "COMPLETE"), tid


class RayStyleSearcher(Searcher):
    """A searcher written for Ray Tune: it knows `on_trial_complete` only."""

    def __init__(self) -> None:
        super().__init__(metric="loss", mode="min")
        self.completed: dict[str, dict[str, Any] | None] = {}
        self.count = 0

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        self.count += 1
        return {"x": (self.count * 0.37) % 1.0}

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.completed[trial_id] = result


def test_a_searcher_without_the_hook_hears_every_end_as_a_completion(tmp_path: Path) -> None:
    searcher = RayStyleSearcher()
    grid = run(tmp_path, searcher, asha(), space={})  # the searcher's configs are its own
    reached = last_iterations(grid)
    assert any(t < MAX_T for t in reached.values())
    assert set(searcher.completed) == set(reached)
    for tid, result in searcher.completed.items():
        assert result is not None and result["training_iteration"] == reached[tid]


def test_bayesopt_and_hyperopt_leave_stopped_trials_out_of_their_model(tmp_path: Path) -> None:
    bayes = BayesOptSearch(random_state=0)
    grid = run(tmp_path / "bayes", bayes, asha(), samples=12)
    reached = last_iterations(grid)
    assert bayes._study is not None
    states = [t.state.name for t in bayes._study.get_trials(deepcopy=False)]
    stopped = sum(t < MAX_T for t in reached.values())
    assert stopped and states.count("PRUNED") == stopped, (states, reached)
    assert states.count("COMPLETE") == len(reached) - stopped
    hyper = HyperOptSearch(random_state_seed=0)
    grid = run(tmp_path / "hyperopt", hyper, asha(), samples=12)
    reached = last_iterations(grid)
    stopped = sum(t < MAX_T for t in reached.values())
    assert stopped and len(hyper._done) == len(reached) - stopped  # TPE's observations
