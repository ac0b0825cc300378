"""BasicVariantGenerator: Ray's grid x num_samples rule, points, seeds, limits, state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tunefleet as tune
from tunefleet.search import FINISHED, BasicVariantGenerator
from tunefleet.space import SearchSpaceError


def drain(gen: BasicVariantGenerator, limit: int = 1000) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(limit):
        config = gen.suggest(f"t{i}")
        if config == FINISHED:
            return out
        assert isinstance(config, dict)
        out.append(config)
        gen.on_trial_complete(f"t{i}")
    raise AssertionError("never finished")


def make(space: dict[str, Any], num_samples: int = 1, **kwargs: Any) -> BasicVariantGenerator:
    gen = BasicVariantGenerator(**kwargs)
    gen.set_search_properties(None, None, space, num_samples=num_samples)
    return gen


def test_grid_is_repeated_num_samples_times() -> None:
    space = {"a": tune.grid_search([1, 2, 3]), "x": tune.uniform(0, 1)}
    gen = make(space, num_samples=2, seed=0)
    assert gen.total_samples == 6
    configs = drain(gen)
    assert [c["a"] for c in configs] == [1, 2, 3, 1, 2, 3]
    assert len({c["x"] for c in configs}) == 6  # fresh samples at every grid point


def test_constant_grid_search_keeps_random_values_across_the_grid() -> None:
    space = {"a": tune.grid_search([1, 2]), "x": tune.uniform(0, 1)}
    configs = drain(make(space, num_samples=2, seed=0, constant_grid_search=True))
    assert configs[0]["x"] == configs[1]["x"] != configs[2]["x"] == configs[3]["x"]


def test_points_to_evaluate_come_first_and_count_as_samples() -> None:
    space = {"lr": tune.loguniform(1e-4, 1e-1), "opt": tune.grid_search(["sgd", "adam"])}
    gen = make(space, num_samples=3, seed=1, points_to_evaluate=[{"lr": 0.01}, {"opt": "sgd"}])
    configs = drain(gen)
    # point 1 leaves the grid open (2 configs), point 2 fixes it (1), then 1 sample x 2
    assert len(configs) == gen.total_samples == 5
    assert configs[0] == {"lr": 0.01, "opt": "sgd"} and configs[1] == {"lr": 0.01, "opt": "adam"}
    assert configs[2]["opt"] == "sgd" and configs[2]["lr"] != 0.01


def test_point_with_an_unknown_key_names_it() -> None:
    with pytest.raises(SearchSpaceError, match=r"points_to_evaluate\[0\]: key 'lrr'"):
        make({"lr": tune.uniform(0, 1)}, points_to_evaluate=[{"lrr": 0.1}])


def test_same_seed_same_sequence_other_seed_other_sequence() -> None:
    space = {"x": tune.uniform(0, 1), "n": tune.randint(0, 1000)}
    assert drain(make(space, 20, seed=7)) == drain(make(space, 20, seed=7))
    assert drain(make(space, 20, seed=7)) != drain(make(space, 20, seed=8))


def test_max_concurrent_waits_for_a_free_slot() -> None:
    gen = make({"x": tune.uniform(0, 1)}, num_samples=5, max_concurrent=2)
    assert isinstance(gen.suggest("a"), dict) and isinstance(gen.suggest("b"), dict)
    assert gen.suggest("c") is None
    gen.on_trial_complete("a")
    assert isinstance(gen.suggest("c"), dict)


def test_endless_sampling() -> None:
    gen = make({"x": tune.uniform(0, 1)}, num_samples=-1)
    assert gen.total_samples is None
    assert all(isinstance(gen.suggest(str(i)), dict) for i in range(500))
    assert not gen.is_finished()


@given(cut=st.integers(min_value=0, max_value=11), seed=st.integers(0, 2**32))
def test_state_round_trip_continues_the_same_sequence(cut: int, seed: int) -> None:
    space = {"a": tune.grid_search([1, 2, 3]), "x": tune.uniform(0, 1)}
    full = drain(make(space, num_samples=4, seed=seed))
    first = make(space, num_samples=4, seed=seed)
    head = [first.suggest(f"t{i}") for i in range(cut)]
    for i in range(cut):
        first.on_trial_complete(f"t{i}")
    state = json.loads(json.dumps(first.get_state()))
    assert len(json.dumps(state)) < 300  # saved every step: it must stay small
    second = make(space, num_samples=4)  # another seed: the state must win
    second.set_state(state)
    tail = drain(second)
    assert head + tail == full


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"max_concurrent=-1"):
        BasicVariantGenerator(max_concurrent=-1)
    with pytest.raises(TypeError, match=r"points_to_evaluate\[0\]=3"):
        BasicVariantGenerator(points_to_evaluate=[3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"random_state=1 and seed=2 disagree"):
        BasicVariantGenerator(random_state=1, seed=2)
    with pytest.raises(ValueError, match=r"num_samples=0"):
        make({"x": 1}, num_samples=0)
    with pytest.raises(ValueError, match=r"state version"):
        make({"x": 1}).set_state({"version": 99})


def test_basic_variant_generator_passes_the_searcher_conformance_suite() -> None:
    from tests.search.searcher_conformance import check_conformance

    check_conformance(lambda: BasicVariantGenerator(seed=0))
