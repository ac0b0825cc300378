"""Ray Tune's searcher example scripts' APIs (Ray form, ported at collection).

hyperopt_example.py, hyperopt_conditional_search_space_example.py,
optuna_define_by_run_example.py and optuna_multiobjective_example.py.
"""

from typing import Any

import pytest
from hyperopt import hp
from ray import train, tune
from ray.tune.schedulers import AsyncHyperBandScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.hyperopt import HyperOptSearch
from ray.tune.search.optuna import OptunaSearch


def evaluation_fn(step, width, height):
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


def _run_config(factory, name, **kwargs):
    return train.RunConfig(name=name, storage_path=str(factory.mktemp(name)), verbose=0, **kwargs)


# -- hyperopt_example.py: points_to_evaluate, ConcurrencyLimiter ---------------------------


def activation_objective(config):
    for step in range(config["steps"]):
        score = evaluation_fn(step, config["width"], config["height"])
        score *= 0.1 if config["activation"] == "relu" else 1.0
        train.report({"iterations": step, "mean_loss": score})


@pytest.fixture(scope="module")
def hyperopt_results(tmp_path_factory):
    """hyperopt_example.py."""
    initial_params = [
        {"width": 1, "height": 2, "activation": "relu"},
        {"width": 4, "height": 2, "activation": "tanh"},
    ]
    algo = HyperOptSearch(points_to_evaluate=initial_params)
    algo = ConcurrencyLimiter(algo, max_concurrent=4)
    tuner = tune.Tuner(
        activation_objective,
        tune_config=tune.TuneConfig(
            metric="mean_loss",
            mode="min",
            search_alg=algo,
            scheduler=AsyncHyperBandScheduler(),
            num_samples=3,
        ),
        run_config=_run_config(tmp_path_factory, "hyperopt_exp", stop={"training_iteration": 2}),
        param_space={
            "steps": 100,
            "width": tune.uniform(0, 20),
            "height": tune.uniform(-100, 100),
            "activation": tune.choice(["relu", "tanh"]),
        },
    )
    return tuner.fit()


def test_hyperopt_example_evaluates_the_given_points(hyperopt_results):
    seen = [
        (r.config["width"], r.config["height"], r.config["activation"]) for r in hyperopt_results
    ]
    assert (1, 2, "relu") in seen and (4, 2, "tanh") in seen


def test_hyperopt_example_samples_within_the_space(hyperopt_results):
    assert len(hyperopt_results) == 3
    for result in hyperopt_results:
        assert 0 <= result.config["width"] <= 20
        assert result.config["steps"] == 100


# -- hyperopt_conditional_search_space_example.py: a HyperOpt space in the constructor ----


def conditional_objective(config):
    activation = config["activation"]
    for step in range(config["steps"]):
        score = evaluation_fn(step, config["width"], config["height"]) * activation["mult"]
        train.report({"iterations": step, "mean_loss": score})


@pytest.fixture(scope="module")
def conditional_results(tmp_path_factory):
    """hyperopt_conditional_search_space_example.py."""
    space = {
        "activation": hp.choice(
            "activation",
            [
                {"activation": "relu", "mult": hp.uniform("mult", 1, 2)},
                {"activation": "tanh", "mult": 1.0},
            ],
        ),
        "width": hp.uniform("width", 0, 20),
        "height": hp.uniform("height", -100, 100),
        "steps": 100,
    }
    algo = ConcurrencyLimiter(
        HyperOptSearch(space, metric="mean_loss", mode="min"), max_concurrent=4
    )
    tuner = tune.Tuner(
        conditional_objective,
        tune_config=tune.TuneConfig(metric="mean_loss", mode="min", search_alg=algo, num_samples=3),
        run_config=_run_config(tmp_path_factory, "conditional", stop={"training_iteration": 2}),
    )
    return tuner.fit()


def test_hyperopt_conditional_space_gives_nested_configs(conditional_results):
    for result in conditional_results:
        activation = result.config["activation"]
        assert activation["activation"] in ("relu", "tanh")
        if activation["activation"] == "relu":
            assert 1 <= activation["mult"] <= 2
        assert result.config["steps"] == 100


# -- optuna_define_by_run_example.py: a define-by-run space, tune.run with metric twice ---


def define_by_run_func(trial) -> dict[str, Any] | None:
    activation = trial.suggest_categorical("activation", ["relu", "tanh"])
    trial.suggest_float("width", 0, 20)
    trial.suggest_float("height", -100, 100)
    if activation == "relu":
        trial.suggest_float("mult", 1, 2)
    return {"steps": 100}


@pytest.fixture(scope="module")
def define_by_run_analysis(tmp_path_factory):
    """optuna_define_by_run_example.py."""
    algo = OptunaSearch(space=define_by_run_func, metric="mean_loss", mode="min")
    algo = ConcurrencyLimiter(algo, max_concurrent=4)
    return tune.run(
        activation_objective,
        metric="mean_loss",
        mode="min",
        search_alg=algo,
        scheduler=AsyncHyperBandScheduler(),
        num_samples=3,
        stop={"training_iteration": 2},
        storage_path=str(tmp_path_factory.mktemp("optuna_dbr")),
        verbose=0,
    )


def test_optuna_define_by_run_constants_reach_the_config(define_by_run_analysis):
    config = define_by_run_analysis.best_config
    assert config["steps"] == 100
    assert config["activation"] in ("relu", "tanh")
    assert ("mult" in config) == (config["activation"] == "relu")


# -- optuna_multiobjective_example.py: metric and mode lists in the searcher --------------


def multi_objective(config):
    for step in range(config["steps"]):
        score = evaluation_fn(step, config["width"], config["height"])
        train.report({"iterations": step, "loss": score, "gain": config["width"] * step})


@pytest.fixture(scope="module")
def multiobjective_results(tmp_path_factory):
    """optuna_multiobjective_example.py."""
    searcher = OptunaSearch(metric=["loss", "gain"], mode=["min", "max"])
    tuner = tune.Tuner(
        multi_objective,
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=3),
        run_config=_run_config(tmp_path_factory, "optuna_mo", stop={"training_iteration": 2}),
        param_space={
            "steps": 100,
            "width": tune.uniform(0, 20),
            "height": tune.uniform(-100, 100),
        },
    )
    return tuner.fit()


def test_optuna_multiobjective_best_per_metric(multiobjective_results):
    by_loss = multiobjective_results.get_best_result("loss", "min")
    by_gain = multiobjective_results.get_best_result("gain", "max")
    assert by_loss.metrics["loss"] == min(r.metrics["loss"] for r in multiobjective_results)
    assert by_gain.metrics["gain"] == max(r.metrics["gain"] for r in multiobjective_results)
