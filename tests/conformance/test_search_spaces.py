"""Ray Tune's search spaces (user guide: "Search Space API"), as Ray's docs use them.

The samplers are called on their own, as the API reference shows them
(``tune.uniform(0, 1).sample()``); one small Tuner run checks grid_search x num_samples,
nested spaces and sample_from inside an experiment.
"""

import math

import numpy as np
import pytest
from ray import train, tune
from ray.train import RunConfig
from ray.tune.search.sample import Categorical, Domain, Float, Integer

N = 200


def multiple_of(value, q):
    return math.isclose(value / q, round(value / q), abs_tol=1e-6)


# -- the samplers on their own ---------------------------------------------------------------


def test_uniform_draws_floats_between_the_bounds():
    values = tune.uniform(-5, -1).sample(size=N, random_state=0)
    assert len(values) == N
    assert all(isinstance(v, float) and -5 <= v <= -1 for v in values)


def test_sample_without_size_is_one_value():
    value = tune.uniform(0, 1).sample()
    assert isinstance(value, float) and 0 <= value <= 1


def test_quniform_rounds_to_multiples_of_q_inside_the_bounds():
    values = tune.quniform(3.2, 5.4, 0.2).sample(size=N, random_state=1)
    assert all(3.2 - 1e-9 <= v <= 5.4 + 1e-9 and multiple_of(v, 0.2) for v in values)


def test_loguniform_spans_orders_of_magnitude():
    values = tune.loguniform(1e-4, 1e-2).sample(size=N, random_state=2)
    assert all(1e-4 <= v <= 1e-2 for v in values)
    assert min(values) < 1e-3 < max(values)  # both decades are drawn


def test_qloguniform_rounds_to_multiples_of_q():
    values = tune.qloguniform(1e-4, 1e-1, 5e-5).sample(size=N, random_state=3)
    assert all(1e-4 - 1e-12 <= v <= 1e-1 + 1e-12 and multiple_of(v, 5e-5) for v in values)


def test_randn_is_normal_with_its_mean_and_sd():
    values = tune.randn(10, 2).sample(size=2000, random_state=4)
    assert abs(np.mean(values) - 10) < 0.3
    assert abs(np.std(values) - 2) < 0.3


def test_qrandn_rounds_to_multiples_of_q():
    values = tune.qrandn(10, 2, 0.2).sample(size=N, random_state=5)
    assert all(multiple_of(v, 0.2) for v in values)


def test_randint_upper_bound_is_exclusive():
    values = tune.randint(-9, 15).sample(size=2000, random_state=6)
    assert set(values) == set(range(-9, 15))  # 15 never drawn, every other int is


def test_randint_values_are_integers():
    values = tune.randint(0, 10).sample(size=N, random_state=7)
    assert all(int(v) == v for v in values)


def test_qrandint_upper_bound_is_inclusive():
    values = tune.qrandint(-21, 12, 3).sample(size=2000, random_state=8)
    assert set(values) <= set(range(-21, 13, 3))
    assert 12 in values and -21 in values


def test_lograndint_upper_bound_is_exclusive():
    values = tune.lograndint(1, 10).sample(size=2000, random_state=9)
    assert set(values) <= set(range(1, 10)) and 1 in values


def test_qlograndint_is_inclusive_and_quantized():
    values = tune.qlograndint(2, 20, 2).sample(size=2000, random_state=10)
    assert set(values) <= set(range(2, 21, 2))
    assert 20 in values


def test_choice_draws_every_category_and_keeps_their_types():
    values = tune.choice([2, "three", 4.0]).sample(size=N, random_state=11)
    assert set(map(repr, values)) == {"2", "'three'", "4.0"}  # not coerced to one dtype


def test_choice_of_one_category():
    assert tune.choice(["only"]).sample() == "only"


def test_an_int_random_state_repeats_the_draws():
    first = tune.uniform(0, 1).sample(size=5, random_state=42)
    assert first == tune.uniform(0, 1).sample(size=5, random_state=42)
    assert first != tune.uniform(0, 1).sample(size=5, random_state=43)


def test_a_numpy_generator_as_random_state():
    one = tune.randint(0, 1000).sample(size=5, random_state=np.random.default_rng(0))
    two = tune.randint(0, 1000).sample(size=5, random_state=np.random.default_rng(0))
    assert one == two


def test_sample_from_reads_spec_config():
    domain = tune.sample_from(lambda spec: spec.config.uniform * 0.01)
    assert domain.sample(config={"uniform": 300}) == 3.0


def test_sample_from_with_the_config_itself():
    domain = tune.sample_from(lambda config: config["a"] + 1)
    assert domain.sample(config={"a": 1}) == 2


def test_sample_from_without_arguments():
    domain = tune.sample_from(lambda: 7)
    assert domain.sample() == 7
    assert domain.sample(size=3) == [7, 7, 7]


def test_sample_from_with_one_config_per_draw():
    domain = tune.sample_from(lambda spec: spec.config.a * 10)
    assert domain.sample(config=[{"a": 1}, {"a": 2}], size=2) == [10, 20]


def test_grid_search_is_a_plain_dict():
    assert tune.grid_search([1, 2, 3]) == {"grid_search": [1, 2, 3]}


def test_domains_are_the_sample_module_classes():
    assert isinstance(tune.uniform(0, 1), Float) and isinstance(tune.uniform(0, 1), Domain)
    assert isinstance(tune.loguniform(1e-3, 1), Float)
    assert isinstance(tune.randint(0, 5), Integer)
    assert isinstance(tune.qrandint(0, 5, 1), Integer)
    assert isinstance(tune.choice([1, 2]), Categorical)


def test_domains_keep_their_arguments():
    assert (tune.uniform(2, 3).lower, tune.uniform(2, 3).upper) == (2, 3)
    assert tune.choice(["a", "b"]).categories == ["a", "b"]
    assert tune.randint(1, 9).lower == 1 and tune.randint(1, 9).upper == 9


def test_loguniform_needs_a_positive_lower_bound():
    with pytest.raises(ValueError):
        tune.loguniform(0, 1)


def test_size_zero_is_refused():
    # tunefleet: a clear ValueError naming size (Ray fails with an IndexError)
    with pytest.raises(ValueError, match="size=0"):
        tune.uniform(0, 1).sample(size=0)


# -- a space inside an experiment -------------------------------------------------------------


def record(config):
    train.report({"score": 1.0, "seen": dict(config)})


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    space = {
        "opt": tune.grid_search(["sgd", "adam"]),
        "lr": tune.loguniform(1e-4, 1e-1),
        "model": {"layers": tune.randint(1, 4), "width": tune.choice([16, 32])},
        "wd": tune.sample_from(lambda spec: spec.config.lr / 10),
        "fixed": 3,
    }
    tuner = tune.Tuner(
        record,
        param_space=space,
        tune_config=tune.TuneConfig(num_samples=3),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("spaces")), verbose=0),
    )
    return tuner.fit()


def test_grid_times_num_samples_trials(grid_run):
    assert len(grid_run) == 6
    opts = sorted(r.config["opt"] for r in grid_run)
    assert opts == ["adam"] * 3 + ["sgd"] * 3


def test_nested_spaces_are_resolved(grid_run):
    for result in grid_run:
        model = result.config["model"]
        assert model["layers"] in (1, 2, 3) and model["width"] in (16, 32)
        assert result.config["fixed"] == 3


def test_sample_from_sees_the_sampled_config(grid_run):
    for result in grid_run:
        assert math.isclose(result.config["wd"], result.config["lr"] / 10)


def test_the_trainable_gets_the_resolved_config(grid_run):
    for result in grid_run:
        assert result.metrics["seen"] == result.config
