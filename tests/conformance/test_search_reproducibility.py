"""Ray Tune's FAQ, "How can I make my Tune experiments reproducible?", and a define-by-run
OptunaSearch refusing evaluated points as Ray's tests expect (Ray form, ported at
collection)."""

import numpy as np
import optuna
import pytest
from ray import train, tune
from ray.tune.search import BasicVariantGenerator
from ray.tune.search.optuna import OptunaSearch


def report_nothing_much(config):
    train.report({"r": 0})


def _seeded_run(tmp_path, name, search_alg=None):
    np.random.seed(1234)  # the FAQ's recipe: seed numpy's global generator before the run
    tune_config = tune.TuneConfig(num_samples=4)
    if search_alg is not None:
        tune_config = tune.TuneConfig(num_samples=4, search_alg=search_alg())
    grid = tune.Tuner(
        report_nothing_much,
        param_space={"seed": tune.randint(0, 1000), "lr": tune.loguniform(1e-4, 1e-1)},
        tune_config=tune_config,
        run_config=train.RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
    ).fit()
    return sorted((r.config["seed"], r.config["lr"]) for r in grid)


def test_np_random_seed_repeats_the_default_search(tmp_path):
    assert _seeded_run(tmp_path, "a") == _seeded_run(tmp_path, "b")


def test_np_random_seed_repeats_a_basic_variant_generator(tmp_path):
    first = _seeded_run(tmp_path, "c", BasicVariantGenerator)
    assert first == _seeded_run(tmp_path, "d", BasicVariantGenerator)


def test_a_numpy_generator_seeds_the_basic_variant_generator():
    space = {"x": tune.uniform(0, 1)}

    def draws(seed):
        gen = BasicVariantGenerator(random_state=np.random.default_rng(seed))
        gen.set_search_properties(None, None, space)
        return gen.suggest("t0")["x"]

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def define_by_run(trial):
    trial.suggest_float("a", 0, 1)


def test_evaluated_points_need_a_space_with_distributions():
    searcher = OptunaSearch(space=define_by_run, metric="loss", mode="min")
    with pytest.raises(TypeError):  # Ray's test_searchers.py expects TypeError
        searcher.add_evaluated_point({"a": 0.5}, 1.0)


def test_optuna_distributions_still_accept_evaluated_points():
    searcher = OptunaSearch(
        space={"a": optuna.distributions.FloatDistribution(0, 1)}, metric="loss", mode="min"
    )
    searcher.add_evaluated_point({"a": 0.5}, 1.0)
    assert searcher.suggest("t1") is not None
