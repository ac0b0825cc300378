"""QMCSearch: exact inverse-CDF mapping, coverage, conditional spaces, state, Tuner runs."""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from typing import Any

import pytest

import tunefleet as tune
from tests.search.searcher_conformance import check_conformance
from tunefleet.search import QMCSearch
from tunefleet.space import SearchSpaceError

pytest.importorskip("scipy")  # not scipy.stats: the trial workers import this module


def discrepancy(points: list[list[float]]) -> float:
    from scipy.stats import qmc

    return float(qmc.discrepancy(points))


def make(space: dict[str, Any], **kwargs: Any) -> QMCSearch:
    searcher = QMCSearch(**{"seed": 0, **kwargs})
    assert searcher.set_search_properties("loss", "min", space)
    return searcher


def draw(searcher: QMCSearch, n: int, start: int = 0) -> list[dict[str, Any]]:
    configs = [searcher.suggest(f"t{i}") for i in range(start, start + n)]
    assert all(isinstance(c, dict) for c in configs)
    return configs  # type: ignore[return-value]


@pytest.mark.parametrize(
    "kwargs", [{"seed": 0}, {"seed": 1, "qmc_type": "halton"}, {"scramble": False}]
)
def test_conformance(kwargs: dict[str, Any]) -> None:
    check_conformance(lambda: QMCSearch(**kwargs))


def test_64_points_cover_a_box_better_than_random() -> None:
    points = draw(make({"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)}), 64)
    ours = discrepancy([[p["x"], p["y"]] for p in points])
    randoms = []
    for seed in range(10):
        rng = random.Random(seed)
        randoms.append(discrepancy([[rng.random(), rng.random()] for _ in range(64)]))
    assert ours < min(randoms), (ours, sorted(randoms))
    assert ours < statistics.median(randoms) / 5


def strata(values: list[float], n: int) -> list[int]:
    return sorted(min(int(v * n), n - 1) for v in values)


def test_each_domain_is_its_inverse_cdf_of_the_unit_coordinate() -> None:
    space = {
        "u": tune.uniform(-2, 6),
        "log": tune.loguniform(1e-4, 1),
        "n": tune.randint(0, 8),
        "q": tune.quniform(0.0, 0.7, 0.1),
        "c": tune.choice(["a", "b", None, 4]),
        "g": tune.randn(1.0, 2.0),
    }
    points = draw(make(space), 64)
    # 64 Sobol' points hold one point in each 1/64 of every axis (a (0, m, 1)-net)
    assert strata([(p["u"] + 2) / 8 for p in points], 64) == list(range(64))
    assert strata([(math.log10(p["log"]) + 4) / 4 for p in points], 64) == list(range(64))
    normal = statistics.NormalDist(1.0, 2.0)
    assert strata([normal.cdf(p["g"]) for p in points], 64) == list(range(64))
    # equal-width bins: every int / multiple / category equally often
    assert sorted(p["n"] for p in points) == sorted(list(range(8)) * 8)
    assert [sum(p["c"] == c for p in points) for c in ("a", "b", None, 4)] == [16] * 4
    assert all(type(p["n"]) is int and type(p["u"]) is float for p in points)
    assert {p["q"] for p in points} == {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7}
    assert [sum(p["q"] == v for p in points) for v in (0.0, 0.7)] == [8, 8]


def test_conditional_choices_give_each_branch_its_own_dimensions() -> None:
    space = {
        "opt": tune.choice(
            [
                {"name": "sgd", "lr": tune.loguniform(1e-3, 1), "momentum": tune.uniform(0, 1)},
                {"name": "adam", "lr": tune.loguniform(1e-5, 1e-2)},
            ]
        ),
        "wd": tune.uniform(0, 1),
        "double": tune.sample_from(lambda spec: 2 * spec.config.wd),
    }
    searcher = make(space)
    assert set(searcher._dims) == {"opt", "opt/[0]/lr", "opt/[0]/momentum", "opt/[1]/lr", "wd"}
    points = draw(searcher, 32)
    sgd = [p["opt"] for p in points if p["opt"]["name"] == "sgd"]
    adam = [p["opt"] for p in points if p["opt"]["name"] == "adam"]
    assert len(sgd) == len(adam) == 16
    assert all(set(o) == {"name", "lr", "momentum"} and 1e-3 <= o["lr"] < 1 for o in sgd)
    assert all(set(o) == {"name", "lr"} and 1e-5 <= o["lr"] < 1e-2 for o in adam)
    assert all(p["double"] == 2 * p["wd"] for p in points)


def test_points_to_evaluate_come_first() -> None:
    searcher = make(
        {"x": tune.uniform(0, 1), "y": tune.randint(0, 5)},
        points_to_evaluate=[{"x": 0.5, "y": 2}, {"x": 0.25}],
    )
    first, second, third = draw(searcher, 3)
    assert first == {"x": 0.5, "y": 2}
    assert second["x"] == 0.25 and second["y"] in range(5)
    fresh = draw(make({"x": tune.uniform(0, 1), "y": tune.randint(0, 5)}), 1)[0]
    assert third == fresh  # the points do not use up the sequence


def test_state_round_trip_fast_forwards_the_sequence() -> None:
    space = {"x": tune.uniform(0, 1), "c": tune.choice([1, 2, 3])}
    searcher = make(space, points_to_evaluate=[{"x": 0.1}])
    draw(searcher, 10)
    state = json.loads(json.dumps(searcher.get_state()))
    assert state["drawn"] == 9 and state["points_done"] == 1
    before = QMCSearch(seed=123)
    before.set_state(state)  # before the space is known
    before.set_search_properties("loss", "min", space)
    after = make(space, seed=99)
    after.set_state(state)  # after
    ahead = draw(searcher, 5, 10)
    assert draw(before, 5, 10) == ahead and draw(after, 5, 10) == ahead


def test_seed_reproduces_and_an_unseeded_searcher_records_its_seed() -> None:
    space = {"x": tune.uniform(0, 1)}
    assert draw(make(space, seed=4), 8) == draw(make(space, seed=4), 8)
    assert draw(make(space, seed=4), 8) != draw(make(space, seed=5), 8)
    unseeded = QMCSearch()
    assert isinstance(unseeded.get_state()["seed"], int)


def test_any_metric_is_accepted_even_several() -> None:
    searcher = QMCSearch(seed=0)
    assert searcher.set_search_properties(["a", "b"], ["min", "max"], {"x": tune.uniform(0, 1)})
    # a second space is declined, as in Ray (the searcher already has one)
    assert searcher.set_search_properties(None, None, {"x": tune.uniform(0, 1)}) is False


def test_what_it_refuses_is_named() -> None:
    with pytest.raises(SearchSpaceError, match=r"param_space\['g'\] is a grid_search"):
        make({"g": tune.grid_search([1, 2])})
    with pytest.raises(ValueError, match="qmc_type='lhs' must be one of"):
        QMCSearch(qmc_type="lhs")
    with pytest.raises(ValueError, match="seed=-1 must be"):
        QMCSearch(seed=-1)
    # Ray's rule: a searcher with its own space declines a second one (the Tuner
    # then refuses a param_space with domains: tests/search/test_searcher_api.py)
    declined = QMCSearch({"x": tune.uniform(0, 1)}).set_search_properties(
        "loss", "min", {"y": tune.uniform(0, 1)}
    )
    assert declined is False
    own = QMCSearch({"x": tune.uniform(0, 1)}, seed=0)
    assert own.set_search_properties("loss", "min", {"const": 3}) is False
    assert set(draw(own, 1)[0]) == {"x", "const"}
    with pytest.raises(RuntimeError, match="set_search_properties"):
        QMCSearch().suggest("t0")


def test_missing_scipy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[qmc\]'"):
        QMCSearch()


def test_importing_the_searchers_imports_no_library() -> None:
    code = (
        "import sys, tunefleet, tunefleet.search._qmc, tunefleet.search._bohb\n"
        "print(sorted(m for m in ('scipy', 'optuna', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def quadratic(config: dict[str, Any]) -> None:
    tune.report({"loss": (config["x"] - 0.3) ** 2})


def run(storage: str, name: str, num_samples: int, **restore: Any) -> Any:
    tune_config = tune.TuneConfig(
        metric="loss", mode="min", search_alg=QMCSearch(seed=7), num_samples=num_samples
    )
    if restore:
        return tune.Tuner.restore(restore["path"], quadratic, tune_config=tune_config).fit()
    return tune.Tuner(
        quadratic,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune_config,
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0),
    ).fit()


def test_tuner_run_covers_the_range_and_resumes_the_sequence(storage: str) -> None:
    grid = run(storage, "full", 8)
    xs = sorted(r.config["x"] for r in grid)
    assert len(grid) == 8 and grid.num_errors == 0
    assert strata(xs, 8) == list(range(8))  # one trial in each 1/8 of the range
    assert grid.get_best_result().metrics["loss"] < (1 / 8) ** 2
    half = run(storage, "half", 4)
    resumed = run(storage, "", 8, path=half.experiment_path)
    assert sorted(r.config["x"] for r in resumed) == xs  # the same sequence, continued
