"""BayesOptSearch (Optuna's GPSampler): translation of every domain kind, refused
features, points, duplicates and patience, constraints, state, and a real run.

A GP suggestion costs about a second of CPU on a mixed space, so most tests stay
in the random phase (`random_search_steps` above what they ask for) and only a
few ask the Gaussian process.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest

import tunefleet as tune
from tests.search.searcher_conformance import (
    MIXED_SPACE,
    bowl_losses,
    check_conformance,
    check_value,
)
from tunefleet._state_log import StateLog, join, split
from tunefleet.search import FINISHED, BayesOptSearch
from tunefleet.space import Float, Integer

optuna = pytest.importorskip("optuna")
pytest.importorskip("torch")

EVERY_KIND: dict[str, Any] = {
    "u": tune.uniform(-1.0, 1.0),
    "lu": tune.loguniform(1e-4, 1e-1),
    "qu": tune.quniform(0.0, 1.0, 0.1),
    "qlu": tune.qloguniform(0.01, 1.0, 0.01),
    "ri": tune.randint(0, 3),
    "qri": tune.qrandint(0, 10, 5),
    "lri": tune.lograndint(1, 100),
    "qlri": tune.qlograndint(8, 512, 8),
    "c": tune.choice(["a", 2, None, (1, 2)]),
}

NESTED: dict[str, Any] = {
    "opt": tune.choice(
        [
            {"name": "sgd", "lr": tune.uniform(0.0, 1.0)},
            {"name": "adam", "beta": tune.loguniform(0.8, 0.999)},
        ]
    ),
    "seed": 3,
    "twice_seed": tune.sample_from(lambda spec: spec.config.seed * 2),
}


def make(space: dict[str, Any], mode: str = "min", **kwargs: Any) -> BayesOptSearch:
    kwargs.setdefault("random_search_steps", 1000)  # random phase: no GP cost
    search = BayesOptSearch(random_state=0, **kwargs)
    assert search.set_search_properties("loss", mode, space, num_samples=-1)
    return search


def run(search: BayesOptSearch, n: int, loss: Any, start: int = 0) -> list[dict[str, Any]]:
    configs = []
    for i in range(start, start + n):
        config = search.suggest(f"t{i}")
        assert isinstance(config, dict), config
        search.on_trial_complete(f"t{i}", {"loss": loss(config)})
        configs.append(config)
    return configs


@pytest.mark.slow  # about 5 s of CPU: the GP makes 13 suggestions
def test_conformance() -> None:
    # the conformance space, smaller: a GP suggestion costs about a second per discrete
    # parameter; "units" is a constant here (the conformance objective reads it)
    keys = ("lr", "dropout", "layers", "act", "nested", "double_lr")
    space = {**{k: MIXED_SPACE[k] for k in keys}, "units": 128}
    check_conformance(
        lambda: BayesOptSearch(random_state=0, random_search_steps=8),
        space=space,
        warmup=9,
        batch=4,
    )


def test_every_domain_kind_has_an_exact_optuna_form() -> None:
    search = make(EVERY_KIND)
    dist = optuna.distributions
    assert search._dists == {
        "u": dist.FloatDistribution(-1.0, 1.0),
        "lu": dist.FloatDistribution(1e-4, 1e-1, log=True),
        "qu": dist.IntDistribution(0, 10),  # multiples of q
        "qlu": dist.IntDistribution(1, 100, log=True),
        "ri": dist.IntDistribution(0, 2),
        "qri": dist.IntDistribution(0, 2),
        "lri": dist.IntDistribution(1, 99, log=True),
        "qlri": dist.IntDistribution(1, 64, log=True),
        "c": dist.CategoricalDistribution([0, 1, 2, 3]),
    }
    configs = run(search, 40, lambda c: 0.0)
    for config in configs:
        for key, domain in EVERY_KIND.items():
            check_value(domain, config[key], key)
    assert {c["ri"] for c in configs} == {0, 1, 2}
    assert {c["qri"] for c in configs} == {0, 5, 10}
    assert all(c["qu"] in {k / 10 for k in range(11)} for c in configs)  # 0.3, not 0.300..04
    assert any(c["c"] is None for c in configs) and any(c["c"] == (1, 2) for c in configs)


def test_gp_suggestions_keep_exact_types() -> None:
    space = {k: EVERY_KIND[k] for k in ("lu", "qu", "qlri", "c")}
    search = make(space, random_search_steps=5)

    def loss(c: dict[str, Any]) -> float:
        value: float = (math.log10(c["lu"]) + 2) ** 2 + c["qu"] + abs(c["qlri"] - 64) / 64
        return value

    for config in run(search, 8, loss):
        for key, domain in space.items():
            if isinstance(domain, (Float, Integer)) or key == "c":
                check_value(domain, config[key], key)


def test_nested_choices_name_each_branch() -> None:
    search = make(NESTED)
    assert set(search._dists) == {"opt", "opt/[0]/lr", "opt/[1]/beta"}
    names = set()
    for config in run(search, 12, lambda c: 0.0):
        assert config["seed"] == 3 and config["twice_seed"] == 6
        opt = config["opt"]
        assert set(opt) == ({"name", "lr"} if opt["name"] == "sgd" else {"name", "beta"})
        names.add(opt["name"])
    assert names == {"sgd", "adam"}


@pytest.mark.parametrize(
    ("space", "kwargs", "message"),
    [
        ({"a": {"n": tune.randn()}}, {}, r'param_space\["a"\]\["n"\] is randn.*no bounds'),
        ({"a": tune.grid_search([1, 2])}, {}, r'param_space\["a"\] is a grid_search'),
        ({"a": 1}, {}, "no parameter to search"),
        ({"x": tune.uniform(0, 1)}, {"utility_kwargs": {"kind": "lcb"}}, r"\['kind'\]='lcb'"),
        ({"x": tune.uniform(0, 1)}, {"patience": 0}, "patience=0 must be >= 1"),
    ],
)
def test_refused_features_say_why(
    space: dict[str, Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make(space, **kwargs)


def test_several_objectives_are_refused() -> None:
    with pytest.raises(ValueError, match="BayesOptSearch optimises one metric"):
        BayesOptSearch().set_search_properties(["a", "b"], ["min", "max"], EVERY_KIND)


def test_ray_bounds_space_with_constants_from_param_space() -> None:
    search = BayesOptSearch({"width": (0, 20), "height": (-100, 100)}, metric="l", mode="max")
    assert search.set_search_properties(None, None, {"epochs": 2}) is False  # own space (Ray)
    config = search.suggest("a")
    assert isinstance(config, dict) and config["epochs"] == 2
    assert 0 <= config["width"] <= 20 and type(config["height"]) is float
    # a second space is declined, as in Ray (the Tuner refuses it)
    assert (
        BayesOptSearch({"w": (0, 1)}).set_search_properties("l", "min", {"y": tune.uniform(0, 1)})
        is False
    )


def test_points_to_evaluate_run_first() -> None:
    points = [{"opt": {"name": "adam", "beta": 0.9}}, {"opt/name": "sgd"}]
    search = make(NESTED, points_to_evaluate=points)
    first = [search.suggest(f"p{i}") for i in range(3)]
    assert first[0] == {"opt": {"name": "adam", "beta": 0.9}, "seed": 3, "twice_seed": 6}
    assert isinstance(first[1], dict) and first[1]["opt"]["name"] == "sgd"
    assert isinstance(first[2], dict) and first[2] not in first[:2]


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ({"opt": {"name": "rmsprop"}}, r'points_to_evaluate\[0\]: param_space\["opt"\]='),
        ({"opt": {"name": "sgd", "lr": 2.0}}, r'param_space\["opt"\]\["lr"\]=2.0 is not a value'),
        ({"opt": {"name": "sgd", "lr": "x"}}, r"='x' is not a value"),
        ({"opt": {"name": "sgd"}, "typo": 1}, r"sets \['typo'\], which are not keys"),
    ],
)
def test_bad_points_are_refused(point: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(NESTED, points_to_evaluate=[point])


def test_evaluated_rewards_are_told_not_run() -> None:
    points = [{"x": 2}, {"x": 7}]
    search = make({"x": tune.randint(0, 10)}, points_to_evaluate=points, evaluated_rewards=[3, 1])
    study = search._study
    assert study is not None
    assert [t.value for t in study.trials] == [3.0, 1.0]
    assert search.suggest("a") not in points


def test_a_duplicate_is_replaced_and_patience_ends_the_search() -> None:
    space = {"a": tune.choice([1, 2, 3])}
    search = make(space, points_to_evaluate=[{"a": 1}, {"a": 1}], patience=10)
    assert search.suggest("p0") == {"a": 1}
    assert search.suggest("p1") in ({"a": 2}, {"a": 3})  # the repeated point is replaced
    again = make(space, points_to_evaluate=[{"a": 1}] * 3, patience=2, skip_duplicate=False)
    assert [again.suggest(f"p{i}") for i in range(3)] == [{"a": 1}, {"a": 1}, FINISHED]
    # a used-up space: random draws find nothing new, so the search waits
    full = make({"a": tune.choice([1])}, patience=100)
    assert full.suggest("a") == {"a": 1} and full.suggest("b") is None


def test_failures_and_constraints_reach_the_model() -> None:
    search = BayesOptSearch(random_state=0, random_search_steps=3)
    search.set_search_properties("loss", "min", {"x": tune.uniform(0, 1)}, constraints=["c"])
    configs = [search.suggest(f"t{i}") for i in range(5)]
    search.on_trial_complete("t0", {"loss": 1.0, "c": -1.0})
    search.on_trial_complete("t1", {"loss": 0.5, "c": 0.5})  # infeasible
    search.on_trial_complete("t2", {"loss": 0.2})  # no constraint value: failed
    search.on_trial_complete("t3", None, error=True)
    search.on_trial_complete("t4", {"loss": 0.3, "c": -0.2})
    search.on_trial_complete("unknown", {"loss": 0.0})
    study = search._study
    assert study is not None
    states = [(t.state.name, t.value, t.constraints) for t in study.trials]
    assert states == [
        ("COMPLETE", 1.0, {"c": -1.0}),
        ("COMPLETE", 0.5, {"c": 0.5}),
        ("FAIL", None, {}),
        ("FAIL", None, {}),
        ("COMPLETE", 0.3, {"c": -0.2}),
    ]
    assert all(isinstance(c, dict) for c in configs)
    config = search.suggest("gp")  # the constrained GP (logCEI)
    assert isinstance(config, dict) and 0 <= config["x"] <= 1


def test_state_round_trip_with_points_and_pending_trials() -> None:
    space = {"x": tune.uniform(0, 1), "c": tune.choice(["a", "b"])}
    points = [{"x": 0.1, "c": "b"}, {"x": 0.2, "c": "a"}]

    def fresh() -> BayesOptSearch:
        return make(space, points_to_evaluate=points)

    search = fresh()
    run(search, 1, lambda c: c["x"])
    pending = search.suggest("pending")
    run(search, 3, lambda c: c["x"], start=10)
    state = json.loads(json.dumps(search.get_state()))
    copy = fresh()
    copy.set_state(state)
    assert pending == {"x": 0.2, "c": "a"}
    for s in (search, copy):
        s.on_trial_complete("pending", {"loss": 0.2})
    assert run(search, 4, lambda c: c["x"], 20) == run(copy, 4, lambda c: c["x"], 20)
    assert search.get_state() == copy.get_state()
    with pytest.raises(ValueError, match="state version"):
        copy.set_state({**state, "version": 99})


def through_store(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as the experiment store gives it back: the head as JSON, each StateLog
    read back from its rows as a new StateLog."""
    head, logs = split(state)
    return dict(join(json.loads(json.dumps(head)), lambda p: json.loads(json.dumps(logs[p]))))


def test_finished_trials_and_asks_are_saved_once_and_the_previous_format_loads() -> None:
    space = {"x": tune.uniform(0, 1), "c": tune.choice(["a", "b"])}
    search = make(space, points_to_evaluate=[{"x": 0.1, "c": "b"}])
    run(search, 6, lambda c: c["x"])
    pending = search.suggest("pending")
    state = search.get_state()
    assert isinstance(state["done"], StateLog) and len(state["done"]) == 6
    assert isinstance(state["asks"], StateLog) and len(state["asks"]) == 7
    assert [t["number"] for t in state["trials"]] == [6]  # the head: the running one only
    assert search.get_state()["done"] is state["done"]
    # the previous format: every trial in "trials", the repeats counted
    saved = json.loads(json.dumps(state))
    every = sorted([*saved.pop("done"), *saved.pop("trials")], key=lambda t: t["number"])
    repeats: dict[str, int] = {}
    for key in saved.pop("asks"):
        repeats[key] = repeats.get(key, 0) + 1
    old = {
        **saved,
        "version": 1,
        "repeats": repeats,
        "trials": [{k: v for k, v in t.items() if k != "number"} for t in every],
    }
    copies = [make(space, points_to_evaluate=[{"x": 0.1, "c": "b"}]) for _ in range(2)]
    copies[0].set_state(through_store(state))
    copies[1].set_state(old)
    for s in (search, *copies):
        s.on_trial_complete("pending", {"loss": 0.3})
    expected = run(search, 4, lambda c: c["x"], 20)
    assert all(run(copy, 4, lambda c: c["x"], 20) == expected for copy in copies)
    assert json.dumps(copies[0].get_state()) == json.dumps(search.get_state())
    assert len(copies[0].get_state()["done"]) == 11 and isinstance(pending, dict)
    with pytest.raises(ValueError, match="asks must be a list of config keys"):
        copies[0].set_state({**through_store(state), "asks": [1]})


def test_missing_optuna_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[bayesopt\]'"):
        BayesOptSearch()


# ---------------------------------------------------------------------- utility_kwargs

BOWL_POINTS = [{"x": v} for v in (0.05, 0.15, 0.25, 0.3, 0.35, 0.45)]
BOWL_LOSSES = [(p["x"] - 0.3) ** 2 for p in BOWL_POINTS]


def bowl(utility: dict[str, Any] | None, scale: float = 1.0) -> BayesOptSearch:
    """Six observations around the minimum at x=0.3, none beyond 0.45: the GP is asked
    at once (the points are told with their rewards)."""
    search = BayesOptSearch(
        {"x": tune.uniform(0, 1)},
        metric="loss",
        mode="min",
        points_to_evaluate=BOWL_POINTS,
        evaluated_rewards=[loss * scale for loss in BOWL_LOSSES],
        utility_kwargs=utility,
        random_state=0,
        random_search_steps=3,
    )
    search.set_search_properties(None, None, {})
    return search


def test_ucb_kappa_moves_the_suggestion_from_exploiting_to_exploring() -> None:
    exploit = bowl({"kind": "ucb", "kappa": 0.0}).suggest("a")  # the GP's mean alone
    explore = bowl({"kind": "ucb", "kappa": 50.0}).suggest("a")  # its uncertainty rules
    assert isinstance(exploit, dict) and isinstance(explore, dict)
    assert abs(exploit["x"] - 0.3) < 0.05, exploit
    assert explore["x"] > 0.7, explore  # far from every observation


@pytest.fixture
def acquisitions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every acquisition GPSampler is asked to optimise; the optimisation is skipped
    (the best point so far is returned), so a suggestion costs only the GP fit."""
    from optuna.samplers import GPSampler

    seen: list[Any] = []

    def record(self: Any, acqf: Any, best_params: Any) -> Any:
        seen.append(acqf)
        return best_params[0]

    monkeypatch.setattr(GPSampler, "_optimize_acqf", record)
    return seen


@pytest.mark.parametrize(
    ("utility", "alone", "beside_running"),
    [
        (None, "LogEI", "qLogEI"),
        ({"kind": "ei", "xi": 0.0}, "LogEI", "qLogEI"),
        ({"kind": "ei", "xi": 10.0}, "LogEI", "qLogEI"),  # losses x1000: 10 is 0.01
        ({"kind": "poi", "xi": 10.0}, "LogPI", "LogPI"),
        ({"kind": "ucb", "kappa": 2.5, "xi": 0.0}, "UCB", "UCB"),
        ({}, "UCB", "UCB"),  # bayes_opt's defaults: ucb, kappa 2.576
    ],
)
def test_each_kind_is_the_acquisition_optimised(
    acquisitions: list[Any], utility: dict[str, Any] | None, alone: str, beside_running: str
) -> None:
    import numpy as np

    search = bowl(utility, scale=1000.0)
    search.suggest("a")
    search.suggest("b")  # "a" still running
    assert [type(a).__name__ for a in acquisitions] == [alone, beside_running]
    first, second = acquisitions
    kappa = (utility or {}).get("kappa", 2.576)
    if alone == "UCB":
        assert first._beta == pytest.approx(kappa**2)
        # the running trial is believed at the GP's mean: one more point, less variance
        assert second._gpr._X_all.shape[0] == first._gpr._X_all.shape[0] + 1
        return
    # xi in the metric's units (here x1000) becomes a margin in GPSampler's standardized
    # scores: (best - mean) / std + xi / std, with the losses negated (maximised)
    scores = -np.array(BOWL_LOSSES) * 1000.0
    xi = (utility or {}).get("xi", 0.0)
    expected = (scores.max() - scores.mean()) / scores.std() + xi / scores.std()
    assert first._threshold == pytest.approx(expected)
    assert second._threshold == pytest.approx(expected)


@pytest.mark.parametrize(
    ("utility", "error", "message"),
    [
        ({"kind": "UCB"}, ValueError, r"utility_kwargs\['kind'\]='UCB' must be one of"),
        ({"kind": "ei", "alpha": 1}, ValueError, r"unknown keys \['alpha'\]"),
        ({"kappa": -1.0}, ValueError, r"\['kappa'\]=-1.0 must be a finite number >= 0"),
        ({"xi": math.nan}, ValueError, r"\['xi'\]=nan must be a finite"),
        ({"xi": "0.1"}, TypeError, r"\['xi'\]='0.1' must be a number"),
        ({"kappa_decay_delay": -1}, ValueError, r"\['kappa_decay_delay'\]=-1 must be an int"),
        ("ucb", TypeError, r"utility_kwargs='ucb' must be a dict or None"),
    ],
)
def test_bad_utility_kwargs_are_refused_naming_the_value(
    utility: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        BayesOptSearch(utility_kwargs=utility)


def test_an_acquisition_other_than_ei_is_refused_with_constraints() -> None:
    search = BayesOptSearch(utility_kwargs={"kind": "ucb", "kappa": 2.5})
    with pytest.raises(ValueError, match=r"kind='ucb' \(kappa=2.5\).*constraints.*'ei'"):
        search.set_search_properties("loss", "min", {"x": tune.uniform(0, 1)}, constraints=["c"])


def test_the_private_optuna_api_relied_on_is_there() -> None:
    # pins optuna._gp.acqf.UCB/LogEI/qLogEI/LogPI and GPSampler's hooks, with their
    # parameters: a new Optuna that renames one fails here, not in a user's run
    from tunefleet.search._bayesopt_acqf import PRIVATE_API, check_optuna

    check_optuna(optuna, "pinned")
    names = {f"{module}.{name}" for module, name, _ in PRIVATE_API}
    assert {"optuna._gp.acqf.UCB", "optuna._gp.acqf.LogPI"} <= names


def test_an_optuna_without_the_acquisitions_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from optuna._gp import acqf

    monkeypatch.delattr(acqf, "UCB")
    with pytest.raises(ValueError, match=r"optuna 5.*optuna \S+ is installed.*'kind': 'ei'"):
        BayesOptSearch(utility_kwargs={"kind": "ucb", "kappa": 2.5, "xi": 0.0})
    BayesOptSearch(utility_kwargs={"kind": "ei", "xi": 0.0})  # GPSampler's own: still fine


def test_state_round_trip_keeps_the_acquisition() -> None:
    utility = {"kind": "ucb", "kappa": 50.0, "xi": 0.0}
    search = bowl(utility)
    state = json.loads(json.dumps(search.get_state()))
    copy = bowl(utility)
    copy.set_state(state)
    suggestion = search.suggest("a")
    assert copy.suggest("a") == suggestion
    assert isinstance(suggestion, dict) and suggestion["x"] > 0.7  # still UCB, exploring


# ---------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_tuner_run_improves_on_the_random_start(storage: str) -> None:
    losses = bowl_losses(BayesOptSearch(random_state=1, random_search_steps=6), 16, storage)
    first, last = sorted(losses[:6]), sorted(losses[-6:])
    assert last[3] < first[3], (first, last)  # the GP trials' median is better
    assert min(losses) < 0.05
