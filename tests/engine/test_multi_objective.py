"""Several objectives and constraints: TuneConfig, the Pareto front, feasibility."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunefleet as tune
from tunefleet._metrics import crowding_distance, dominates, non_dominated_sort, pareto_front
from tunefleet.schedulers import ASHAScheduler, HyperBandScheduler


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 3)), max_size=40))
def test_pareto_front_is_the_first_non_dominated_front(raw: list[tuple[int, int, int]]) -> None:
    points = [list(map(float, p)) for p in raw]
    brute = [i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)]
    assert pareto_front(points) == brute
    fronts = non_dominated_sort(points)
    assert (fronts[0] if fronts else []) == brute
    assert sorted(i for f in fronts for i in f) == list(range(len(points)))
    for later, earlier in zip(fronts[1:], fronts, strict=False):  # each is dominated by the last
        assert all(any(dominates(points[j], points[i]) for j in earlier) for i in later)
    if fronts:
        dist = crowding_distance(points, fronts[0])
        assert set(dist) == set(fronts[0]) and all(d >= 0 for d in dist.values())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": ["a", "a"], "mode": "min"}, "names a metric twice"),
        ({"metric": ["a", "b"], "mode": ["min"]}, "one mode per metric"),
        ({"metric": "a", "mode": ["min"]}, "is a list but metric='a' is not"),
        ({"metric": ["a", "b"], "mode": ["min", "up"]}, r"TuneConfig.mode\[1\]='up'"),
        ({"metric": ["a", ""], "mode": "min"}, r"TuneConfig.metric\[1\]=''"),
        ({"metric": "a", "mode": "min", "constraints": "c"}, "list of reported names"),
        ({"metric": "a", "mode": "min", "constraints": ["c", 3]}, r"constraints\[1\]=3"),
    ],
)
def test_objectives_and_constraints_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tune.TuneConfig(**kwargs).validate()


def two_objectives(config: dict[str, Any]) -> None:
    x = config["x"]
    tune.report(loss=(x - 1.0) ** 2, latency=x, memory_excess=x - 3.5)


XS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]


def test_pareto_front_and_constraints_end_to_end(storage: str, capsys: Any) -> None:
    grid = tune.Tuner(
        two_objectives,
        param_space={"x": tune.grid_search(XS)},
        tune_config=tune.TuneConfig(
            metric=["loss", "latency"], mode=["min", "min"], constraints=["memory_excess"]
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=1),
    ).fit()
    assert grid.num_errors == 0
    # loss falls until x=1 while latency rises: the front is x in [0, 1]; x=4 is infeasible
    front = sorted(r.config["x"] for r in grid.get_pareto_front())
    assert front == [0.0, 0.5, 1.0]
    assert {r.config["x"]: r.feasible for r in grid}[4.0] is False
    assert all(r.feasible for r in grid if r.config["x"] < 3.5)
    with pytest.raises(ValueError, match="several objectives"):
        grid.get_best_result()
    # one objective at a time: the best feasible trial (x=4 has the highest latency)
    assert grid.get_best_result(metric="latency", mode="max").config["x"] == 3.0
    assert sorted(r.config["x"] for r in grid.get_pareto_front(["loss"], "min")) == [1.0]
    out = capsys.readouterr().out
    assert "Pareto front of loss (min), latency (min): 3 trials" in out


def test_single_metric_scheduler_needs_its_own_metric_with_several(storage: str) -> None:
    with pytest.raises(ValueError, match="HyperBandScheduler optimises one metric"):
        tune.Tuner(
            two_objectives,
            param_space={"x": tune.grid_search(XS)},
            tune_config=tune.TuneConfig(
                metric=["loss", "latency"], mode="min", scheduler=HyperBandScheduler(max_t=3)
            ),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        ).fit()
    grid = tune.Tuner(
        two_objectives,
        param_space={"x": tune.grid_search(XS)},
        tune_config=tune.TuneConfig(
            metric=["loss", "latency"],
            mode="min",
            scheduler=ASHAScheduler(metric="loss", mode="min", max_t=3),
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == len(XS) and grid.num_errors == 0


def nan_latency(config: dict[str, Any]) -> None:
    tune.report(loss=config["x"], latency=math.nan if config["x"] == 2 else config["x"])


def test_nan_in_any_objective_fails_the_trial(storage: str) -> None:
    grid = tune.Tuner(
        nan_latency,
        param_space={"x": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(metric=["loss", "latency"], mode="min"),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=tune.FailureConfig(nan_policy="error"),  # the default is "worst"
        ),
    ).fit()
    errors = {r.config["x"]: r.error for r in grid}
    assert errors[1] is None and errors[3] is None
    assert errors[2] is not None and "metric 'latency' is nan" in str(errors[2])


def test_the_summary_front_leaves_infeasible_trials_out() -> None:
    import io

    from tunefleet.progress.live import StatusReporter
    from tunefleet.trial import Trial, TrialStatus

    def trial(i: int, loss: float, latency: float, excess: float) -> Trial:
        t = Trial(trial_id=f"t{i}", index=i, name=f"t{i}", config={}, resources={}, path="")
        t.status = TrialStatus.TERMINATED
        t.last_result = {"loss": loss, "latency": latency, "excess": excess}
        return t

    trials = [trial(0, 1.0, 1.0, 0.0), trial(1, 0.1, 0.1, 5.0), trial(2, 2.0, 0.5, -1.0)]
    reporter = StatusReporter(
        verbose=1, metric=["loss", "latency"], mode="min", constraints=["excess"], out=io.StringIO()
    )
    text = reporter.summary(trials, "/x", None)
    assert "2 trials (last results)" in text and "t1:" not in text  # t1 dominates, infeasible
