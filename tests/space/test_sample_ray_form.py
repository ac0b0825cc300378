"""Ray's form of `Domain.sample`: size, random_state, config/spec; errors named."""

from __future__ import annotations

import random

import pytest

from tunefleet import space as tune
from tunefleet.space import SearchSpaceError


def test_tunefleet_form_and_ray_form_draw_alike() -> None:
    assert tune.uniform(0, 1).sample(random.Random(3)) == tune.uniform(0, 1).sample(
        random_state=random.Random(3)
    )


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "2"])
def test_bad_size_is_named(size: object) -> None:
    with pytest.raises(SearchSpaceError, match="size="):
        tune.randint(0, 3).sample(size=size)  # type: ignore[arg-type]


def test_bad_random_state_is_named() -> None:
    with pytest.raises(TypeError, match=r"random_state='seed' \(str\)"):
        tune.uniform(0, 1).sample(random_state="seed")


def test_config_list_shorter_than_size() -> None:
    with pytest.raises(SearchSpaceError, match="list of 1 configs"):
        tune.sample_from(lambda spec: 1).sample(config=[{}], size=2)


def test_config_and_spec_together_are_refused() -> None:
    with pytest.raises(SearchSpaceError, match="not both"):
        tune.sample_from(lambda spec: 1).sample(config={}, spec={"config": {}})


def test_spec_gives_spec_config_nested() -> None:
    domain = tune.sample_from(lambda spec: spec.config.model.width * 2)
    assert domain.sample(spec={"config": {"model": {"width": 4}}}) == 8


def test_is_function_and_is_grid() -> None:
    assert tune.sample_from(lambda: 1).is_function()
    assert not tune.uniform(0, 1).is_function() and not tune.choice([1]).is_grid()


def test_numpy_global_seed_steers_unseeded_draws() -> None:
    np = pytest.importorskip("numpy")
    np.random.seed(5)
    first = tune.uniform(0, 1).sample(size=3)
    np.random.seed(5)
    assert tune.uniform(0, 1).sample(size=3) == first
