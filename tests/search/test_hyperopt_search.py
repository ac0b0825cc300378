"""HyperOptSearch: translation of every domain kind, conditional choices, points,
batches, state, and real runs through the Tuner (resume included)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

import tunefleet as tune
from tests.search.searcher_conformance import bowl, bowl_losses, check_conformance, check_value
from tunefleet._state_log import StateLog, join, split
from tunefleet.search import HyperOptSearch
from tunefleet.space import Float, Integer

hp = pytest.importorskip("hyperopt").hp

EVERY_KIND: dict[str, Any] = {
    "u": tune.uniform(-1.0, 1.0),
    "lu": tune.loguniform(1e-4, 1e-1),
    "qu": tune.quniform(0.0, 1.0, 0.1),
    "qlu": tune.qloguniform(0.01, 1.0, 0.01),
    "ri": tune.randint(0, 3),
    "qri": tune.qrandint(0, 10, 5),
    "lri": tune.lograndint(1, 100),
    "qlri": tune.qlograndint(8, 512, 8),
    "n": tune.randn(1.0, 2.0),
    "qn": tune.qrandn(0.0, 1.0, 0.25),
    "c": tune.choice(["a", 2, None, (1, 2)]),
}

NESTED: dict[str, Any] = {
    "opt": tune.choice(
        [
            {"name": "sgd", "lr": tune.uniform(0.0, 1.0)},
            {
                "name": "adam",
                "beta": tune.loguniform(0.8, 0.999),
                "inner": tune.choice([1, {"k": tune.randint(0, 4)}]),
            },
        ]
    ),
    "seed": 3,
    "twice_seed": tune.sample_from(lambda spec: spec.config.seed * 2),
}


def make(space: dict[str, Any], mode: str = "min", **kwargs: Any) -> HyperOptSearch:
    search = HyperOptSearch(random_state_seed=0, **kwargs)
    assert search.set_search_properties("loss", mode, space, num_samples=-1)
    return search


def run(search: HyperOptSearch, n: int, loss: Any, start: int = 0) -> list[dict[str, Any]]:
    configs = []
    for i in range(start, start + n):
        config = search.suggest(f"t{i}")
        assert isinstance(config, dict)
        search.on_trial_complete(f"t{i}", {"loss": loss(config)})
        configs.append(config)
    return configs


def test_conformance() -> None:
    check_conformance(lambda: HyperOptSearch(random_state_seed=0, n_initial_points=4))


def test_every_domain_kind_keeps_exact_types_and_bounds() -> None:
    search = make(EVERY_KIND, n_initial_points=5)
    kinds = {label: node.name for label, node in search._domain.params.items()}
    assert kinds == {
        "u": "uniform",
        "lu": "loguniform",
        "qu": "quniform",
        "qlu": "qloguniform",
        "ri": "quniform",
        "qri": "quniform",
        "lri": "qloguniform",
        "qlri": "qloguniform",
        "n": "normal",
        "qn": "qnormal",
        "c": "randint",
    }
    configs = run(search, 40, lambda c: c["u"] ** 2 + abs(c["qn"]))
    for config in configs:
        for key, domain in EVERY_KIND.items():
            if isinstance(domain, (Float, Integer)) or key == "c":
                check_value(domain, config[key], key)
        assert type(config["n"]) is float
        assert type(config["qn"]) is float and config["qn"] / 0.25 == round(config["qn"] / 0.25)
    assert {c["ri"] for c in configs} == {0, 1, 2}  # upper exclusive, every value reachable
    assert {c["qri"] for c in configs} == {0, 5, 10}  # upper inclusive
    assert all(c["qu"] in {k / 10 for k in range(11)} for c in configs)  # 0.3, not 0.300..04
    assert any(c["c"] is None for c in configs) and any(c["c"] == (1, 2) for c in configs)


def test_a_category_comes_back_as_the_very_object() -> None:
    marker = object()
    search = make({"c": tune.choice([marker, "other"])})
    assert any(run(search, 10, lambda c: 0.0)[i]["c"] is marker for i in range(10))


def test_nested_choices_become_conditional_hyperopt_parameters() -> None:
    search = make(NESTED, n_initial_points=5)
    assert set(search._domain.params) == {
        "opt",
        "opt/[0]/lr",
        "opt/[1]/beta",
        "opt/[1]/inner",
        "opt/[1]/inner/[1]/k",
    }
    seen = set()
    for config in run(search, 30, lambda c: c["opt"].get("lr", 1.0)):
        opt = config["opt"]
        assert config["seed"] == 3 and config["twice_seed"] == 6
        if opt["name"] == "sgd":
            assert set(opt) == {"name", "lr"} and type(opt["lr"]) is float
        else:
            assert set(opt) == {"name", "beta", "inner"} and 0.8 <= opt["beta"] <= 0.999
            assert opt["inner"] == 1 or set(opt["inner"]) == {"k"}
            if isinstance(opt["inner"], dict):
                assert type(opt["inner"]["k"]) is int and 0 <= opt["inner"]["k"] < 4
        seen.add((opt["name"], type(opt.get("inner")).__name__))
    assert seen == {("sgd", "NoneType"), ("adam", "int"), ("adam", "dict")}
    # only the chosen branch's parameters have values in HyperOpt's trials
    for doc in search._trials.trials:
        vals = doc["misc"]["vals"]
        assert bool(vals["opt/[0]/lr"]) == (vals["opt"] == [0])
        assert bool(vals["opt/[1]/beta"]) == (vals["opt"] == [1])


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"a": {"b": tune.grid_search([1, 2])}}, r'param_space\["a"\]\["b"\] is a grid_search'),
        ({"a": 1, "f": tune.sample_from(lambda: 2)}, "no parameter to search"),
        ({"x": tune.uniform(0, 1), "y": hp.uniform("y", 0, 1)}, "mixes HyperOpt expressions"),
        ({"a/b": tune.uniform(0, 1), "a": {"b": tune.uniform(0, 1)}}, "same parameter name"),
    ],
)
def test_refused_spaces_name_the_problem(space: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(space)


def test_several_objectives_and_a_missing_metric_are_refused() -> None:
    with pytest.raises(ValueError, match="HyperOptSearch optimises one metric"):
        HyperOptSearch().set_search_properties(["a", "b"], ["min", "max"], EVERY_KIND)
    with pytest.raises(ValueError, match="needs a metric and a mode"):
        HyperOptSearch().set_search_properties(None, None, EVERY_KIND)


def test_points_to_evaluate_run_first_with_exact_values() -> None:
    points = [
        {"opt": {"name": "adam", "beta": 0.9, "inner": {"k": 2}}},
        {"opt": {"name": "sgd"}},  # lr left out: drawn at random
        {"opt/name": "sgd", "opt/lr": 0.25},  # flat keys
    ]
    search = make(NESTED, points_to_evaluate=points)
    first: list[Any] = [search.suggest(f"p{i}") for i in range(4)]
    assert first[0] == {
        "opt": {"name": "adam", "beta": 0.9, "inner": {"k": 2}},
        "seed": 3,
        "twice_seed": 6,
    }
    assert first[1]["opt"]["name"] == "sgd" and 0 <= first[1]["opt"]["lr"] <= 1
    assert first[2]["opt"] == {"name": "sgd", "lr": 0.25}
    assert isinstance(first[3], dict) and first[3] not in first[:3]


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ({"opt": {"name": "rmsprop"}}, r'points_to_evaluate\[0\]: param_space\["opt"\]='),
        ({"opt": {"name": "sgd", "lr": 2.0}}, r'param_space\["opt"\]\["lr"\]=2.0 is not a value'),
        ({"opt": {"name": "sgd"}, "typo": 1}, r"sets \['typo'\], which are not keys"),
    ],
)
def test_bad_points_are_refused(point: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(NESTED, points_to_evaluate=[point])


def test_evaluated_rewards_are_told_not_run() -> None:
    points = [{"x": 0.5}, {"x": -0.5}]
    search = make(
        {"x": tune.uniform(-1, 1)},
        mode="max",
        points_to_evaluate=points,
        evaluated_rewards=[1.0, 3.0],
    )
    losses = sorted(d["result"]["loss"] for d in search._trials.trials)
    assert losses == [-3.0, -1.0]  # max: negated for HyperOpt
    assert search.suggest("a") not in [{"x": 0.5}, {"x": -0.5}]
    with pytest.raises(ValueError, match="2 points_to_evaluate"):
        HyperOptSearch(points_to_evaluate=points, evaluated_rewards=[1.0])


def test_native_hyperopt_space_with_constants_from_param_space() -> None:
    space = {"x": hp.uniform("x", 0, 1), "act": hp.choice("act", ["relu", "tanh"])}
    search = HyperOptSearch(
        space,
        metric="loss",
        mode="min",
        random_state_seed=0,
        points_to_evaluate=[{"x": 0.5, "act": "tanh"}],
    )
    assert search.set_search_properties(None, None, {"epochs": 3}) is False  # own space (Ray)
    assert search.suggest("a") == {"epochs": 3, "x": 0.5, "act": "tanh"}
    config = search.suggest("b")
    assert isinstance(config, dict) and type(config["x"]) is float
    assert config["act"] in ("relu", "tanh") and config["epochs"] == 3
    # a second space is declined, as in Ray (the Tuner refuses it)
    assert (
        HyperOptSearch(space).set_search_properties("l", "min", {"y": tune.uniform(0, 1)}) is False
    )


def test_a_batch_on_a_small_discrete_space_has_no_duplicates() -> None:
    search = make({"a": tune.choice([1, 2, 3]), "b": tune.randint(0, 3)}, n_initial_points=2)
    run(search, 2, lambda c: c["a"] + c["b"])
    batch = [search.suggest(f"b{i}") for i in range(5)]
    assert len({json.dumps(c, sort_keys=True) for c in batch}) == 5


def test_failures_and_infeasible_trials() -> None:
    search = HyperOptSearch(random_state_seed=0)
    search.set_search_properties("loss", "min", {"x": tune.uniform(0, 1)}, constraints=["c"])
    for i in range(4):
        search.suggest(f"t{i}")
    search.on_trial_complete("t0", {"loss": 1.0, "c": -1.0})
    search.on_trial_complete("t1", {"loss": 0.5, "c": 0.5})  # infeasible
    search.on_trial_complete("t2", None)  # no metric: dropped
    search.on_trial_complete("t3", {"loss": 0.1, "c": -1.0}, error=True)
    search.on_trial_complete("unknown", {"loss": 0.0})
    results = {d["tid"]: d["result"] for d in search._trials.trials}
    assert results == {0: {"status": "ok", "loss": 1.0}, 1: {"status": "fail"}}


def test_state_round_trip_with_pending_trials_gives_the_same_suggestions() -> None:
    points = [{"x": 0.1, "c": "b"}, {"x": 0.2, "c": "a"}]
    space = {"x": tune.uniform(0, 1), "c": tune.choice(["a", "b"])}

    def fresh() -> HyperOptSearch:
        return make(space, n_initial_points=3, points_to_evaluate=points)

    search = fresh()
    run(search, 1, lambda c: c["x"])
    pending = search.suggest("pending")  # the second point, still running
    run(search, 4, lambda c: c["x"], start=10)
    state = json.loads(json.dumps(search.get_state()))
    copy = fresh()
    copy.set_state(state)
    for s in (search, copy):
        s.on_trial_complete("pending", {"loss": 0.2})
    assert pending == {"x": 0.2, "c": "a"}
    assert run(search, 5, lambda c: c["x"], 20) == run(copy, 5, lambda c: c["x"], 20)
    with pytest.raises(ValueError, match="state version"):
        copy.set_state({**state, "version": 99})


def through_store(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as the experiment store gives it back: the head as JSON, each StateLog
    read back from its rows as a new StateLog."""
    head, logs = split(state)
    return dict(join(json.loads(json.dumps(head)), lambda p: json.loads(json.dumps(logs[p]))))


def test_finished_trials_are_saved_once_and_a_resume_suggests_the_same() -> None:
    space = {"x": tune.uniform(0, 1), "c": tune.choice(["a", "b"])}

    def fresh() -> HyperOptSearch:
        return make(space, n_initial_points=3)

    search = fresh()
    search.add_evaluated_point({"x": 0.4, "c": "a"}, 0.16)
    search.add_evaluated_point({"x": 0.9, "c": "b"}, 0.0, error=True)
    run(search, 5, lambda c: c["x"])
    pending = search.suggest("pending")
    state = search.get_state()
    # the failed point is dropped, as HyperOpt's Trials drops it
    assert isinstance(state["done"], StateLog) and len(state["done"]) == 6
    assert [d["tid"] for d in state["trials"]] == [7]  # the head: the running trial only
    assert search.get_state()["done"] is state["done"]
    copy = fresh()
    copy.set_state(through_store(state))
    for s in (search, copy):
        s.on_trial_complete("pending", {"loss": 0.3})
    assert run(search, 5, lambda c: c["x"], 20) == run(copy, 5, lambda c: c["x"], 20)
    assert json.dumps(copy.get_state()) == json.dumps(search.get_state())
    assert len(copy.get_state()["done"]) == 12 and isinstance(pending, dict)
    # the previous format: every trial in "trials", in tid order
    saved = json.loads(json.dumps(search.get_state()))
    every = sorted([*saved.pop("done"), *saved["trials"]], key=lambda d: d["tid"])
    old = fresh()
    old.set_state({**saved, "version": 1, "trials": every})
    assert json.dumps(old.get_state()) == json.dumps(search.get_state())
    with pytest.raises(ValueError, match="done must be a list of trials with a tid"):
        old.set_state({**saved, "done": [{"x": 1}]})


def test_missing_hyperopt_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hyperopt", None)
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[hyperopt\]'"):
        HyperOptSearch()


# ---------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_tuner_run_improves_on_the_random_start(storage: str) -> None:
    losses = bowl_losses(HyperOptSearch(n_initial_points=8, random_state_seed=1), 30, storage)
    first, last = sorted(losses[:8]), sorted(losses[-8:])
    assert last[4] < first[4], (first, last)  # the median of the TPE trials is better
    assert min(losses) < 0.1


def suggested(grid: Any) -> list[dict[str, Any]]:
    ordered = sorted(grid, key=lambda r: r.metrics["trial_id"])
    return [{k: r.config[k] for k in ("x", "lr")} for r in ordered]


@pytest.mark.slow
def test_resume_continues_with_the_same_suggestions(storage: str) -> None:
    space = {"x": tune.uniform(-2, 2), "lr": tune.loguniform(1e-5, 1e-1)}

    def config(n: int) -> tune.TuneConfig:
        search = HyperOptSearch(n_initial_points=3, random_state_seed=5)
        return tune.TuneConfig(
            metric="loss", mode="min", search_alg=search, num_samples=n, max_concurrent_trials=1
        )

    straight = tune.Tuner(
        bowl,
        param_space=space,
        tune_config=config(6),
        run_config=tune.RunConfig(name="straight", storage_path=storage, verbose=0),
    ).fit()
    first = tune.Tuner(
        bowl,
        param_space=space,
        tune_config=config(3),
        run_config=tune.RunConfig(name="resumed", storage_path=storage, verbose=0),
    ).fit()
    resumed = tune.Tuner.restore(first.experiment_path, bowl, tune_config=config(6)).fit()
    assert len(resumed) == 6 and resumed.num_errors == 0
    assert suggested(resumed) == suggested(straight)
