"""Resources per trial: `tune.with_resources(trainable, lambda config: ...)` and a class's
`default_resource_request(config)` give each trial its own resources, and the local
backend admits each trial by its own (real worker processes on this 2-core machine).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import meet, meeting, overlap
from tests.helpers.results import metrics_of
from tunefleet.engine.trial_resources import TrialResources
from tunefleet.trainable import resource_request


def timed(config: dict[str, Any]) -> None:
    """Record when it ran; the 1-CPU trials meet (so they provably run side by side)."""
    start = time.time()
    if config["cpus"] == 1:
        assert meet(config, tune.get_context().get_trial_id())
    cpus = tune.get_context().get_trial_resources().required_resources["CPU"]
    tune.report({"start": start, "end": time.time(), "cpus": cpus})


def test_trials_are_admitted_by_their_own_resources(storage: str, tmp_path: Path) -> None:
    # Two 1-CPU trials meet, so they run together; the 2-CPU one fills the machine
    # alone, and the 1-CPU trial after it waits for it.
    grid = tune.Tuner(
        tune.with_resources(timed, lambda config: {"CPU": config["cpus"]}),
        param_space={"cpus": tune.grid_search([1, 1, 2, 1]), **meeting(tmp_path, 2)},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, resources={"cpu": 2}),
    ).fit()
    assert grid.num_errors == 0
    ran = {r.metrics["trial_id"]: metrics_of(r) for r in grid}
    assert sorted(m["cpus"] for m in ran.values()) == [1.0, 1.0, 1.0, 2.0]
    big = next(m for m in ran.values() if m["cpus"] == 2.0)
    for other in (m for m in ran.values() if m is not big):
        assert overlap([(big["start"], big["end"]), (other["start"], other["end"])]) == 1
    assert overlap([(m["start"], m["end"]) for m in ran.values()]) == 2


class AsksPerTrial(tune.Trainable):
    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        return tune.PlacementGroupFactory([{"CPU": config["cpus"]}, {"CPU": 0.5}])

    def step(self) -> dict[str, Any]:
        pgf = self.trial_resources
        return {"cpu": pgf.required_resources["CPU"], "bundles": len(pgf.bundles), "done": True}


def test_default_resource_request_is_asked_per_trial(storage: str) -> None:
    grid = tune.Tuner(
        AsksPerTrial,
        param_space={"cpus": tune.grid_search([0.5, 1.5])},
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0
    got = sorted((r.config["cpus"], metrics_of(r)["cpu"], metrics_of(r)["bundles"]) for r in grid)
    assert got == [(0.5, 1.0, 2), (1.5, 2.0, 2)]


def test_a_trial_that_never_fits_is_refused_naming_it(storage: str) -> None:
    with pytest.raises(ValueError, match=r"Trial \w+_00000 \(config \{'cpus': 5\}\) can never run"):
        tune.Tuner(
            tune.with_resources(timed, lambda config: {"cpu": config["cpus"]}),
            param_space={"cpus": 5},
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        ).fit()


def _resources(request: Any, fits: bool = True) -> TrialResources:
    unfit = None if fits else "needs cpu=4 but the machine has 2"
    return TrialResources(request, {"cpu": 1.0, "gpu": 0.0}, lambda _: unfit, "resources_fn")


def test_what_the_function_returns() -> None:
    got = _resources(lambda c: {"GPU": c["g"], "custom_resources": {"slot": 1}})
    assert got.of("t1", {"g": 0.5}) == {"cpu": 1.0, "gpu": 0.5, "slot": 1.0}
    assert got.placement("t1", {"g": 0.5}) is None
    assert _resources(lambda c: None).of("t1", {}) == {"cpu": 1.0, "gpu": 0.0}
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2, "GPU": 1}])
    with_pgf = _resources(lambda c: pgf)
    assert with_pgf.of("t2", {}) == {"cpu": 3.0, "gpu": 1.0}
    assert with_pgf.placement("t2", {}) == pgf


@pytest.mark.parametrize(
    ("request_fn", "error", "message"),
    [
        (
            lambda c: {"cpu": -1},
            ValueError,
            r"resources_fn for trial t1 \(config \{'x': 1\}\) "
            r"returned \{'cpu': -1\}: resources\['cpu'\]=-1 must be a finite number",
        ),
        (lambda c: {"gpu": "one"}, ValueError, r"returned \{'gpu': 'one'\}: .* must be a number"),
        (lambda c: 2, TypeError, r"returned 2: return a dict such as"),
        (lambda c: c["missing"], ValueError, r"\(config \{'x': 1\}\) raised KeyError\('missing'\)"),
    ],
)
def test_bad_values_name_the_trial_config_and_value(
    request_fn: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        _resources(request_fn).of("t1", {"x": 1})


def test_resources_that_never_fit_are_refused() -> None:
    with pytest.raises(ValueError, match=r"Trial t1 \(config \{\}\) can never run .* gave it "):
        _resources(lambda c: {"cpu": 4}, fits=False).of("t1", {})


def test_only_varying_resources_are_asked_per_trial() -> None:
    def fn(config: dict[str, Any]) -> None:
        pass

    assert resource_request(fn) is None
    assert resource_request(tune.with_resources(fn, {"cpu": 2})) is None
    assert resource_request(AsksPerTrial) is not None
    assert resource_request(tune.with_resources(AsksPerTrial, {"cpu": 1})) is None  # it wins
    per_config = tune.with_resources(tune.with_parameters(fn, data=1), lambda c: {"cpu": 1})
    assert resource_request(per_config) is not None
    assert resource_request(tune.Trainable) is None
