"""Ray Tune's "Key Concepts" and "Getting Started" pages, written as Ray Tune users write
them: a trainable (function and class), a search space, `tune.Tuner` with `TuneConfig`
and `RunConfig`, `train.report`, and what `fit()` returns.

Three experiments are shared by most tests: a random search over `a` and `b` (the
"objective" of the Key Concepts page), a grid of 4 x 3 points repeated twice
(`num_samples=2`), and the class form of the same trainable.
"""

import math

import numpy as np
import pytest
from ray import train, tune
from ray.train import RunConfig
from ray.tune import ResultGrid
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

STEPS = 5


def objective(x, a, b):
    return a * (x**0.5) + b


def trainable(config):
    for x in range(STEPS):
        score = objective(x, config["a"], config["b"])
        train.report({"score": score})


class ObjectiveTrainable(tune.Trainable):
    def setup(self, config):
        self.x = 0
        self.a = config["a"]
        self.b = config["b"]

    def step(self):
        score = objective(self.x, self.a, self.b)
        self.x += 1
        return {"score": score}


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("key_concepts"))


@pytest.fixture(scope="module")
def random_search(storage):
    search_space = {"a": tune.uniform(0, 1), "b": tune.uniform(0, 1)}
    tuner = tune.Tuner(
        trainable,
        param_space=search_space,
        tune_config=tune.TuneConfig(num_samples=4, metric="score", mode="max"),
        run_config=RunConfig(name="random", storage_path=storage, verbose=0),
    )
    return tuner.fit()


@pytest.fixture(scope="module")
def grid(storage):
    space = {
        "a": tune.grid_search([0.001, 0.01, 0.1, 1.0]),
        "b": tune.grid_search([1, 2, 3]),
    }
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(num_samples=2),
        run_config=RunConfig(name="grid", storage_path=storage, verbose=0),
    )
    return tuner.fit()


@pytest.fixture(scope="module")
def class_run(storage):
    tuner = tune.Tuner(
        ObjectiveTrainable,
        param_space={"a": tune.grid_search([1, 2]), "b": 4},
        run_config=RunConfig(
            name="class", storage_path=storage, stop={"training_iteration": 3}, verbose=0
        ),
    )
    return tuner.fit()


# -- the search space and num_samples ---------------------------------------------------------
def test_num_samples_makes_that_many_trials(random_search):
    assert len(random_search) == 4
    assert isinstance(random_search, ResultGrid)


def test_sampled_values_lie_in_their_domains(random_search):
    for result in random_search:
        assert 0 <= result.config["a"] <= 1 and 0 <= result.config["b"] <= 1


def test_grid_search_is_repeated_num_samples_times(grid):
    assert len(grid) == 4 * 3 * 2
    points = [(r.config["a"], r.config["b"]) for r in grid]
    assert all(points.count(p) == 2 for p in set(points))
    assert len(set(points)) == 12


def test_constants_in_the_param_space_reach_the_trainable(class_run):
    assert {r.config["b"] for r in class_run} == {4}
    assert sorted(r.config["a"] for r in class_run) == [1, 2]


def test_sample_from_and_numpy_as_in_getting_started(storage):
    space = {
        "lr": tune.sample_from(lambda spec: 10 ** (-10 * np.random.rand())),
        "momentum": tune.uniform(0.1, 0.9),
    }
    results = tune.Tuner(
        lambda config: train.report({"mean_accuracy": config["momentum"]}),
        param_space=space,
        tune_config=tune.TuneConfig(num_samples=3),
        run_config=RunConfig(name="getting_started", storage_path=storage, verbose=0),
    ).fit()
    assert len(results) == 3
    assert all(1e-10 <= r.config["lr"] <= 1 for r in results)
    assert all(r.metrics["mean_accuracy"] == r.config["momentum"] for r in results)


# -- results --------------------------------------------------------------------------------------
def test_every_trial_reports_every_step(random_search):
    for result in random_search:
        assert result.metrics["training_iteration"] == STEPS
        assert len(result.metrics_dataframe) == STEPS


def test_the_last_result_is_the_metrics(random_search):
    for result in random_search:
        expected = objective(STEPS - 1, result.config["a"], result.config["b"])
        assert result.metrics["score"] == pytest.approx(expected)


def test_metrics_dataframe_has_the_curve(random_search):
    result = random_search[0]
    df = result.metrics_dataframe
    expected = [objective(x, result.config["a"], result.config["b"]) for x in range(STEPS)]
    assert list(df["score"]) == pytest.approx(expected)
    assert list(df["training_iteration"]) == list(range(1, STEPS + 1))


def test_best_result_uses_the_tune_config_metric_and_mode(random_search):
    best = random_search.get_best_result()
    assert best.metrics["score"] == max(r.metrics["score"] for r in random_search)


def test_best_result_with_another_mode(random_search):
    worst = random_search.get_best_result(metric="score", mode="min")
    assert worst.metrics["score"] == min(r.metrics["score"] for r in random_search)


def test_best_result_without_tune_config_metric_needs_one(grid):
    with pytest.raises(ValueError):
        grid.get_best_result()
    best = grid.get_best_result(metric="score", mode="max")
    assert best.config["a"] == 1.0 and best.config["b"] == 3


def test_get_dataframe_one_row_per_trial(grid):
    df = grid.get_dataframe()
    assert len(df) == 24
    assert "score" in df.columns and "config/a" in df.columns and "trial_id" in df.columns


def test_results_have_no_errors(random_search, grid):
    assert random_search.errors == [] and grid.errors == []
    assert random_search.num_errors == 0 and random_search.num_terminated == 4


def test_result_fields(random_search):
    result = random_search[0]
    assert set(result.config) == {"a", "b"}
    assert result.error is None
    assert result.checkpoint is None  # the trainable saved none
    assert isinstance(result.path, str) and result.path
    for key in ("training_iteration", "time_total_s", "trial_id", "timestamp", "done"):
        assert key in result.metrics
    assert result.metrics["done"] is True


def test_experiment_path_holds_the_trials(random_search, storage):
    assert random_search.experiment_path.startswith(storage)
    assert all(r.path.startswith(random_search.experiment_path) for r in random_search)


def test_result_grid_is_indexable_and_iterable(grid):
    assert grid[0].config == next(iter(grid)).config
    assert len(list(grid)) == len(grid)


# -- the class API gives the same -----------------------------------------------------------------
def test_class_trainable_runs_until_the_stop_condition(class_run):
    assert len(class_run) == 2
    assert all(r.metrics["training_iteration"] == 3 for r in class_run)


def test_class_trainable_reports_step_results(class_run):
    best = class_run.get_best_result(metric="score", mode="max")
    assert best.config["a"] == 2
    assert best.metrics["score"] == pytest.approx(objective(2, 2, 4))


# -- stop criteria ---------------------------------------------------------------------------------
def test_stop_dict_on_a_metric(storage):
    results = tune.Tuner(
        trainable,
        param_space={"a": 1.0, "b": 0.0},
        run_config=RunConfig(name="stop_metric", storage_path=storage, stop={"score": 1.0}),
    ).fit()
    # objective(x) = sqrt(x): 0, 1 -> stops at the second report
    assert results[0].metrics["training_iteration"] == 2


def test_stop_function(storage):
    def stop_fn(trial_id, result):
        return result["score"] >= 1.0

    results = tune.Tuner(
        trainable,
        param_space={"a": 1.0, "b": 0.0},
        run_config=RunConfig(name="stop_fn", storage_path=storage, stop=stop_fn, verbose=0),
    ).fit()
    assert results[0].metrics["training_iteration"] == 2


# -- search algorithms and schedulers, as the Key Concepts page plugs them in -------------------
def test_search_algorithm_with_a_concurrency_limit(storage):
    algo = ConcurrencyLimiter(OptunaSearch(seed=1), max_concurrent=2)
    results = tune.Tuner(
        trainable,
        param_space={"a": tune.uniform(0, 1), "b": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="score", mode="min", search_alg=algo, num_samples=4),
        run_config=RunConfig(name="optuna", storage_path=storage, verbose=0),
    ).fit()
    assert len(results) == 4
    best = results.get_best_result()
    assert best.metrics["score"] == min(r.metrics["score"] for r in results)


def test_scheduler_with_metric_in_tune_config(storage):
    results = tune.Tuner(
        trainable,
        param_space={"a": tune.grid_search([0.1, 1.0]), "b": 0.0},
        tune_config=tune.TuneConfig(
            metric="score", mode="min", scheduler=ASHAScheduler(max_t=STEPS, grace_period=1)
        ),
        run_config=RunConfig(name="asha", storage_path=storage, verbose=0),
    ).fit()
    assert len(results) == 2 and results.num_errors == 0
    assert results.get_best_result().config["a"] == 0.1


def test_scheduler_with_its_own_metric(storage):
    scheduler = ASHAScheduler(metric="score", mode="max", max_t=STEPS, grace_period=1)
    results = tune.Tuner(
        trainable,
        param_space={"a": tune.grid_search([0.1, 1.0]), "b": 0.0},
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=RunConfig(name="asha_own", storage_path=storage, verbose=0),
    ).fit()
    best = results.get_best_result(metric="score", mode="max")
    assert best.config["a"] == 1.0
    assert math.isclose(best.metrics["score"], objective(STEPS - 1, 1.0, 0.0))


# -- TuneConfig and RunConfig checks ---------------------------------------------------------------
def test_mode_must_be_min_or_max():
    with pytest.raises(ValueError):
        tune.Tuner(trainable, tune_config=tune.TuneConfig(metric="score", mode="best")).fit()


def test_run_config_name_names_the_experiment(random_search):
    assert random_search.experiment_path.rstrip("/").endswith("random")
