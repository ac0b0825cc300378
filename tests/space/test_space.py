"""Search-space domains: bounds, types, validation, JSON form, resolution, grids."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tunefleet import space as tune
from tunefleet.space import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    Normal,
    SearchSpaceError,
    flatten,
    grid_point,
    grid_points,
    grid_size,
    has_domains,
    resolve,
    space_from_json,
    space_to_json,
    validate_space,
)

SEEDS = st.integers(min_value=0, max_value=2**32)
QS = st.sampled_from([0.001, 0.01, 0.1, 0.25, 0.5, 1.0, 3.0, 7.5])
fast = settings(max_examples=60, deadline=None)


def draws(domain: Domain, seed: int, n: int = 20) -> list[Any]:
    rng = random.Random(seed)
    return [domain.sample(rng) for _ in range(n)]


def is_multiple(value: float, q: float) -> bool:
    return abs(value / q - round(value / q)) < 1e-6


# ---------------------------------------------------------------- bounds and types


@fast
@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6), SEEDS)
def test_uniform_in_bounds_and_float(lower: float, width: float, seed: int) -> None:
    upper = lower + width
    assume(lower < upper)
    for v in draws(tune.uniform(lower, upper), seed):
        assert type(v) is float and lower <= v <= upper


@fast
@given(st.floats(-1e3, 1e3), st.floats(0, 1e3), QS, SEEDS)
def test_quniform_multiples_of_q_inside_bounds(
    lower: float, width: float, q: float, seed: int
) -> None:
    upper = lower + width
    try:
        domain = tune.quniform(lower, upper, q)
    except SearchSpaceError:
        assume(False)  # no multiple of q in the range: rejected, tested elsewhere
        raise
    for v in draws(domain, seed):
        assert type(v) is float and lower <= v <= upper and is_multiple(v, q)
        assert domain.min_value <= v <= domain.max_value


@fast
@given(st.floats(1e-8, 1e3), st.floats(1.001, 1e6), SEEDS, st.sampled_from([2, math.e, 10]))
def test_loguniform_in_bounds(lower: float, factor: float, seed: int, base: float) -> None:
    upper = lower * factor
    for v in draws(tune.loguniform(lower, upper, base=base), seed):
        assert type(v) is float and lower <= v <= upper


@fast
@given(st.floats(1e-3, 1e2), st.floats(1.0, 1e3), QS, SEEDS)
def test_qloguniform_multiples_inside_bounds(
    lower: float, factor: float, q: float, seed: int
) -> None:
    upper = lower * factor
    try:
        domain = tune.qloguniform(lower, upper, q)
    except SearchSpaceError:
        assume(False)
        raise
    for v in draws(domain, seed):
        assert type(v) is float and lower <= v <= upper and is_multiple(v, q)


@fast
@given(st.integers(-(10**9), 10**9), st.integers(1, 10**6), SEEDS)
def test_randint_upper_exclusive_and_int(lower: int, width: int, seed: int) -> None:
    for v in draws(tune.randint(lower, lower + width), seed):
        assert type(v) is int and lower <= v < lower + width


@fast
@given(st.integers(-1000, 1000), st.integers(0, 1000), st.integers(1, 12), SEEDS)
def test_qrandint_upper_inclusive_multiples(lower: int, width: int, q: int, seed: int) -> None:
    upper = lower + width
    try:
        domain = tune.qrandint(lower, upper, q)
    except SearchSpaceError:
        assume(False)
        raise
    for v in draws(domain, seed):
        assert type(v) is int and lower <= v <= upper and v % q == 0


@fast
@given(st.integers(1, 10**6), st.integers(1, 10**6), SEEDS)
def test_lograndint_in_bounds(lower: int, width: int, seed: int) -> None:
    for v in draws(tune.lograndint(lower, lower + width), seed):
        assert type(v) is int and lower <= v < lower + width


@fast
@given(st.integers(1, 10**5), st.integers(0, 10**5), st.integers(1, 50), SEEDS)
def test_qlograndint_in_bounds_multiples(lower: int, width: int, q: int, seed: int) -> None:
    upper = lower + width
    try:
        domain = tune.qlograndint(lower, upper, q)
    except SearchSpaceError:
        assume(False)
        raise
    for v in draws(domain, seed):
        assert type(v) is int and lower <= v <= upper and v % q == 0


@fast
@given(st.floats(-1e3, 1e3), st.floats(1e-3, 1e3), QS, SEEDS)
def test_randn_and_qrandn(mean: float, sd: float, q: float, seed: int) -> None:
    assert all(type(v) is float for v in draws(tune.randn(mean, sd), seed))
    for v in draws(tune.qrandn(mean, sd, q), seed):
        assert type(v) is float and is_multiple(v, q)


@fast
@given(st.lists(st.integers() | st.text(), min_size=1, max_size=8), SEEDS)
def test_choice_gives_a_category(categories: list[Any], seed: int) -> None:
    for v in draws(tune.choice(categories), seed):
        assert v in categories


def test_quantized_values_are_exact_decimals() -> None:
    allowed = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
    values = set(draws(tune.quniform(0, 1, 0.1), 1, n=500))
    assert values == allowed  # every multiple, and never 0.30000000000000004


def test_quantization_keeps_values_inside_bounds() -> None:
    # Plain rounding of values near 0.05 would give 0.0, below the bound.
    assert min(draws(tune.quniform(0.05, 0.32, 0.1), 3, n=300)) == 0.1
    assert set(draws(tune.qrandint(1, 10, 3), 3, n=300)) == {3, 6, 9}


def test_single_value_inclusive_ranges_are_allowed() -> None:
    assert set(draws(tune.qrandint(5, 5), 0)) == {5}
    assert set(draws(tune.quniform(1, 1, 0.5), 0)) == {1.0}


def test_domain_properties_for_model_based_searchers() -> None:
    lr = tune.loguniform(1e-4, 1e-1, base=2)
    assert isinstance(lr, Float) and (lr.lower, lr.upper, lr.log, lr.base, lr.q) == (
        1e-4, 0.1, True, 2.0, None)  # fmt: skip
    layers = tune.randint(1, 4)
    assert isinstance(layers, Integer) and not layers.include_upper and layers.high == 3
    batch = tune.qrandint(16, 100, 16)
    assert batch.include_upper and (batch.min_value, batch.max_value, batch.q) == (16, 96, 16)
    assert isinstance(tune.randn(), Normal) and not isinstance(tune.randn(), Float)
    assert isinstance(tune.choice([1, 2]), Categorical) and tune.choice((1, 2)).categories == [1, 2]
    assert tune.grid_search((1, 2)) == {"grid_search": [1, 2]}


def test_sampling_never_touches_global_random() -> None:
    random.seed(1234)
    before = random.getstate()
    space = {"a": tune.uniform(0, 1), "b": tune.choice([1, 2]), "c": tune.randn()}
    resolve(space, random.Random(0))
    assert random.getstate() == before


def test_same_seed_same_config() -> None:
    space = {"a": tune.uniform(0, 1), "m": {"b": tune.lograndint(1, 100)}, "c": [tune.randn()]}
    assert resolve(space, random.Random(7)) == resolve(space, random.Random(7))
    assert resolve(space, random.Random(7)) != resolve(space, random.Random(8))


# ---------------------------------------------------------------- validation

INVALID: list[tuple[Callable[[], Any], str]] = [
    (lambda: tune.uniform(2, 1), "uniform lower=2 must be < upper=1"),
    (lambda: tune.uniform(1, 1), "uniform lower=1 must be < upper=1"),
    (lambda: tune.uniform(math.nan, 1), "uniform lower=nan must be finite"),
    (lambda: tune.uniform(0, math.inf), "uniform upper=inf must be finite"),
    (lambda: tune.uniform("0", 1), "uniform lower='0' must be a number"),  # type: ignore[arg-type]
    (lambda: tune.loguniform(0.0, 1), "loguniform lower=0.0 must be > 0 (log scale)"),
    (lambda: tune.loguniform(-1, 1), "loguniform lower=-1 must be > 0 (log scale)"),
    (lambda: tune.loguniform(1, 10, base=1), "loguniform base=1 must be > 0 and != 1"),
    (lambda: tune.quniform(0, 1, 0), "quniform q=0 must be > 0"),
    (lambda: tune.quniform(0, 1, -0.5), "quniform q=-0.5 must be > 0"),
    (lambda: tune.quniform(2, 1, 0.1), "quniform lower=2 must be <= upper=1"),
    (lambda: tune.quniform(0.1, 0.2, 1), "holds no multiple of q=1"),
    (lambda: tune.qloguniform(0, 1, 0.1), "qloguniform lower=0 must be > 0 (log scale)"),
    (lambda: tune.randint(3, 3), "randint lower=3 must be < upper=3 (upper is exclusive)"),
    (lambda: tune.randint(1.5, 3), "randint lower=1.5 must be an integer"),  # type: ignore[arg-type]
    (lambda: tune.randint(0, math.nan), "randint upper=nan must be finite"),  # type: ignore[arg-type]
    (lambda: tune.qrandint(5, 4), "qrandint lower=5 must be <= upper=4 (upper is inclusive)"),
    (lambda: tune.qrandint(0, 10, 0), "qrandint q=0 must be > 0"),
    (lambda: tune.qrandint(1, 2, 5), "holds no multiple of q=5"),
    (lambda: tune.lograndint(0, 10), "lograndint lower=0 must be > 0 (log scale)"),
    (lambda: tune.qlograndint(-1, 10, 2), "qlograndint lower=-1 must be > 0 (log scale)"),
    (lambda: tune.randn(0, 0), "randn sd=0 must be > 0"),
    (lambda: tune.randn(0, -1), "randn sd=-1 must be > 0"),
    (lambda: tune.randn(math.inf, 1), "randn mean=inf must be finite"),
    (lambda: tune.qrandn(0, 1, 0), "qrandn q=0 must be > 0"),
    (lambda: tune.choice([]), "choice categories=[] must not be empty"),
    (lambda: tune.choice("abc"), "must be a list, not str"),
    (lambda: tune.sample_from(5), "sample_from func=5 must be callable"),  # type: ignore[arg-type]
    (lambda: tune.sample_from(lambda a, b: a), "must take one argument (spec) or none"),
    (lambda: tune.grid_search([]), "grid_search values=[] must not be empty"),
    (lambda: tune.grid_search("ab"), "grid_search values='ab' must be a list"),
]


@pytest.mark.parametrize(("build", "message"), INVALID)
def test_invalid_domain_rejected_at_construction(build: Callable[[], Any], message: str) -> None:
    with pytest.raises(SearchSpaceError) as info:
        build()
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_validate_space_names_the_key_path() -> None:
    lr = tune.loguniform(1e-4, 1e-1)
    lr.lower = 0.0  # broken after construction: only the walk can catch it
    with pytest.raises(SearchSpaceError) as info:
        validate_space({"model": {"lr": lr}, "ok": 1})
    assert str(info.value) == (
        'param_space["model"]["lr"]: loguniform lower=0.0 must be > 0 (log scale)'
    )


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"a": [1, {"b": {"grid_search": []}}]}, 'param_space["a"][1]["b"]: grid_search values=[]'),
        ({"a": {"grid_search": 3}}, 'param_space["a"]: grid_search values=3 must be a list'),
        ({"a": {"grid_search": [1], "x": 2}}, 'param_space["a"]: a grid_search dict must have'),
        (
            {"m": tune.choice([{"g": tune.grid_search([1, 2])}])},
            'param_space["m"].categories[0]["g"]: grid_search inside a choice category',
        ),
        (
            {"g": tune.grid_search([{"h": tune.grid_search([1])}])},
            'param_space["g"]["grid_search"][0]["h"]: grid_search inside a grid_search value',
        ),
    ],
)
def test_validate_space_rejects_bad_grids(space: dict[str, Any], message: str) -> None:
    with pytest.raises(SearchSpaceError, match=None) as info:
        validate_space(space)
    assert str(info.value).startswith(message)


def test_validate_space_walks_into_choice_categories() -> None:
    bad = tune.randint(1, 5)
    bad.upper = 1
    with pytest.raises(SearchSpaceError) as info:
        validate_space({"opt": tune.choice([{"x": 1}, {"depth": bad}])}, root="config")
    assert str(info.value).startswith('config["opt"].categories[1]["depth"]: randint lower=1')


def test_valid_space_passes() -> None:
    validate_space(
        {
            "lr": tune.loguniform(1e-4, 1e-1),
            "opt": tune.choice([{"name": "sgd", "m": tune.uniform(0, 1)}, "adam"]),
            "g": tune.grid_search([1, {"x": tune.randint(0, 2)}]),
            "l": [tune.randn(), (1, 2)],
            "f": tune.sample_from(lambda spec: spec.config.lr),
        }
    )


# ---------------------------------------------------------------- JSON form


def every_domain_space() -> dict[str, Any]:
    return {
        "u": tune.uniform(-1, 1),
        "qu": tune.quniform(0, 1, 0.1),
        "lu": tune.loguniform(1e-4, 1e-1, base=2),
        "qlu": tune.qloguniform(1e-3, 1, 1e-3),
        "n": tune.randn(1.0, 2.0),
        "qn": tune.qrandn(0, 1, 0.5),
        "ri": tune.randint(0, 10),
        "qri": tune.qrandint(0, 100, 5),
        "lri": tune.lograndint(1, 1000),
        "qlri": tune.qlograndint(1, 1000, 7, base=2),
        "c": tune.choice([1, "two", {"deep": tune.uniform(0, 1)}, None]),
        "g": tune.grid_search(["a", {"x": tune.randint(0, 3)}]),
        "const": {"list": [1, 2.5, "x"], "none": None, "__domain__": "user data"},
        "f": tune.sample_from(lambda spec: spec.config.u * 2),
    }


def test_json_round_trip_keeps_every_domain() -> None:
    space = every_domain_space()
    data = json.loads(json.dumps(space_to_json(space)))
    back = space_from_json(data, original=space)
    assert space_to_json(back) == data
    assert back["f"] is space["f"]  # the function comes from the original space
    assert back["const"] == space["const"]
    for point in grid_points(space):
        assert resolve(back, random.Random(3), point) == resolve(space, random.Random(3), point)


def test_json_form_is_readable() -> None:
    data = space_to_json({"lr": tune.loguniform(1e-4, 0.1), "k": 3})
    assert data == {
        "lr": {"__domain__": "loguniform", "lower": 1e-4, "upper": 0.1, "q": None, "base": 10.0},
        "k": 3,
    }


def sample_from_module_level(spec: Any) -> Any:
    return spec.config.a + 1


def test_sample_from_from_json_is_a_placeholder_that_explains() -> None:
    space = {"a": 1, "b": tune.sample_from(sample_from_module_level)}
    data = json.loads(json.dumps(space_to_json(space)))
    assert data["b"]["name"] == "sample_from_module_level"
    assert "return spec.config.a + 1" in data["b"]["source"]
    back = space_from_json(data)
    assert isinstance(back["b"], Function) and back["b"].func is None
    with pytest.raises(SearchSpaceError, match=r'param_space\["b"\].*original=space'):
        resolve(back, random.Random(0))
    assert resolve(space_from_json(data, original=space), random.Random(0)) == {"a": 1, "b": 2}


def test_malformed_json_domain_names_the_path() -> None:
    with pytest.raises(SearchSpaceError, match=r'param_space\["m"\]\["x"\]: malformed uniform'):
        space_from_json({"m": {"x": {"__domain__": "uniform", "lower": 0}}})
    with pytest.raises(SearchSpaceError, match="unknown domain type 'zipf'"):
        space_from_json({"x": {"__domain__": "zipf"}})
    with pytest.raises(SearchSpaceError, match=r'\["x"\]: randint lower=3 must be < upper=1'):
        space_from_json({"x": {"__domain__": "randint", "lower": 3, "upper": 1, "q": 1}})


# ---------------------------------------------------------------- sample_from


@pytest.mark.parametrize("order", list(itertools.permutations(["a", "b", "c", "d"])))
def test_sample_from_dependencies_in_any_dict_order(order: tuple[str, ...]) -> None:
    entries: dict[str, Any] = {
        "a": tune.sample_from(lambda spec: spec.config.b * 2),
        "b": tune.sample_from(lambda spec: spec.config["c"]["x"] + 1),
        "c": {"x": tune.sample_from(lambda spec: spec.config.d)},
        "d": tune.randint(10, 20),
    }
    config = resolve({k: entries[k] for k in order}, random.Random(0))
    assert 10 <= config["d"] < 20
    assert config["c"]["x"] == config["d"]
    assert config["a"] == (config["d"] + 1) * 2
    assert list(config) == list(order)


def test_sample_from_cycle_is_a_clear_error() -> None:
    space = {
        "a": tune.sample_from(lambda spec: spec.config.b),
        "b": tune.sample_from(lambda spec: spec.config.c),
        "c": tune.sample_from(lambda spec: spec.config.a),
    }
    with pytest.raises(SearchSpaceError, match="depend on each other") as info:
        resolve(space, random.Random(0))
    assert 'config["a"] -> config["b"] -> config["c"] -> config["a"]' in str(info.value)
    with pytest.raises(SearchSpaceError, match="depend on each other"):
        resolve({"self": tune.sample_from(lambda spec: spec.config.self)}, random.Random(0))


def test_sample_from_missing_key_is_a_clear_error() -> None:
    space = {"m": {"lr": 0.1}, "wd": tune.sample_from(lambda spec: spec.config.m.lrr / 10)}
    with pytest.raises(SearchSpaceError) as info:
        resolve(space, random.Random(0))
    assert str(info.value) == (
        'param_space["wd"]: sample_from function test_sample_from_missing_key_is_a_clear_error.'
        '<locals>.<lambda> refers to config["m"]["lrr"], which is not in the config'
    )


def test_missing_key_inside_a_dependency_is_not_swallowed_by_get() -> None:
    space = {
        "a": tune.sample_from(lambda spec: spec.config.get("b", 0)),
        "b": tune.sample_from(lambda spec: spec.config.nope),
    }
    with pytest.raises(SearchSpaceError, match=r'config\["nope"\]'):
        resolve(space, random.Random(0))


def test_sample_from_spec_access_styles() -> None:
    space = {
        "m": {"lr": 0.5},
        "layers": [1, tune.sample_from(lambda spec: 2)],
        "attr": tune.sample_from(lambda spec: spec.config.m.lr),
        "item": tune.sample_from(lambda spec: spec["config"]["m"]["lr"]),
        "get": tune.sample_from(lambda spec: spec.config.get("absent", 7)),
        "has": tune.sample_from(lambda spec: ("m" in spec.config, hasattr(spec.config, "zz"))),
        "noarg": tune.sample_from(lambda: 42),
        "list": tune.sample_from(lambda spec: sum(spec.config.layers)),
        "whole": tune.sample_from(lambda spec: spec.config.m),
        "rng": tune.sample_from(lambda spec: spec.rng.random()),
    }
    config = resolve(space, random.Random(0))
    assert config["attr"] == config["item"] == 0.5
    assert (config["get"], config["has"], config["noarg"], config["list"]) == (
        7,
        (True, False),
        42,
        3,
    )
    assert config["whole"] == {"lr": 0.5} and type(config["whole"]) is dict
    assert config["layers"] == [1, 2]
    assert resolve(space, random.Random(0))["rng"] == config["rng"]


def test_sample_from_error_names_the_path() -> None:
    with pytest.raises(SearchSpaceError, match=r'param_space\["x"\].*ZeroDivisionError'):
        resolve({"x": tune.sample_from(lambda spec: 1 / 0)}, random.Random(0))


def test_sample_from_sees_the_chosen_sub_space() -> None:
    space = {
        "opt": tune.choice([{"name": "sgd", "lr": tune.uniform(0.1, 0.2)}]),
        "double": tune.sample_from(lambda spec: spec.config.opt.lr * 2),
    }
    config = resolve(space, random.Random(0))
    assert config["double"] == config["opt"]["lr"] * 2


# ---------------------------------------------------------------- resolve, grids, helpers


def test_nested_choice_resolves_the_chosen_sub_space() -> None:
    space = {
        "opt": tune.choice(
            [
                {"name": "sgd", "momentum": tune.uniform(0.5, 0.9)},
                {"name": "adam", "betas": (tune.quniform(0.8, 0.9, 0.01), 0.999)},
                "plain",
            ]
        )
    }
    seen = set()
    for seed in range(60):
        opt = resolve(space, random.Random(seed))["opt"]
        if opt == "plain":
            seen.add("plain")
        elif opt["name"] == "sgd":
            assert set(opt) == {"name", "momentum"} and 0.5 <= opt["momentum"] <= 0.9
            seen.add("sgd")
        else:
            assert set(opt) == {"name", "betas"} and type(opt["betas"]) is tuple
            assert 0.8 <= opt["betas"][0] <= 0.9 and opt["betas"][1] == 0.999
            seen.add("adam")
    assert seen == {"sgd", "adam", "plain"}


def test_resolve_builds_fresh_containers() -> None:
    space: dict[str, Any] = {"const": {"list": [1, 2]}, "x": tune.uniform(0, 1)}
    config = resolve(space, random.Random(0))
    config["const"]["list"].append(3)
    assert space["const"]["list"] == [1, 2]


def test_grid_points_follow_rays_order() -> None:
    space = {"b": tune.grid_search([1, 2]), "a": {"z": tune.grid_search(["x", "y", "w"])}}
    points = grid_points(space)
    assert len(points) == grid_size(space) == 6
    # Paths sorted, the first one varying fastest, as in Ray's variant generator.
    assert [(p[("a", "z")], p[("b",)]) for p in points] == [
        ("x", 1), ("y", 1), ("w", 1), ("x", 2), ("y", 2), ("w", 2)]  # fmt: skip
    assert [grid_point(space, i) for i in range(6)] == points
    assert grid_points({"x": 1}) == [{}] and grid_size({"x": tune.uniform(0, 1)}) == 1


def test_resolve_applies_grid_point_and_samples_inside_grid_values() -> None:
    space = {"g": tune.grid_search([1, {"x": tune.randint(5, 7)}]), "list": [tune.grid_search([0])]}
    first, second = grid_points(space)
    assert resolve(space, random.Random(0), first) == {"g": 1, "list": [0]}
    assert resolve(space, random.Random(0), second)["g"]["x"] in (5, 6)
    with pytest.raises(SearchSpaceError, match=r'param_space\["g"\]: no grid point value'):
        resolve(space, random.Random(0))
    with pytest.raises(SearchSpaceError, match="not a grid_search"):
        resolve(space, random.Random(0), {**first, ("zz",): 1})


def test_flatten_like_rays_flatten_dict() -> None:
    config = {"a": {"b": 1, "c": {"d": [1, {"e": 2}]}}, "f": 3, "empty": {}}
    assert flatten(config) == {"a/b": 1, "a/c/d": [1, {"e": 2}], "f": 3, "empty": {}}
    assert flatten({"a": {"b": 1}}, delimiter=".") == {"a.b": 1}


def test_has_domains() -> None:
    assert not has_domains({"a": 1, "b": [1, (2, {"c": "x"})]})
    assert has_domains({"a": [1, (2, {"c": tune.uniform(0, 1)})]})
    assert has_domains({"a": {"grid_search": [1]}})
    assert has_domains(tune.choice([1]))


def test_repr_reads_like_the_call() -> None:
    assert repr(tune.qrandint(0, 10, 2)) == "qrandint(lower=0, upper=10, q=2)"
    assert repr(tune.uniform(0, 1)) == "uniform(lower=0.0, upper=1.0)"
    assert repr(tune.sample_from(sample_from_module_level)) == (
        "sample_from(sample_from_module_level)"
    )
