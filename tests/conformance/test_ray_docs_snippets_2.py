"""Snippets of Ray Tune's user guide, second part (the first is test_ray_docs_snippets.py):
doc_code/faq.py, tune.py, fault_tolerance.py and the tutorials tune-search-spaces,
tune-fault-tolerance, tune-output and "Getting data in and out of Tune".

Each fixture runs one small experiment (a few iterations) that several tests read.
Behaviours of those pages that differ are audit findings (F18-n), not tests here.
"""

import json
import os
import tempfile

import numpy as np
import pandas as pd
import pytest
from ray import air, train, tune
from ray.air import session
from ray.train import Checkpoint
from ray.tune.logger import LoggerCallback


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("docs_snippets"))


def run_config(storage, name, **kwargs):
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, **kwargs)


def report_config(config):
    tune.report({"seen": 1})


# --- FAQ and search spaces (doc_code/faq.py, tune-search-spaces) --------------------


def kind_of_config(config):
    tune.report({"kinds": {k: type(v).__name__ for k, v in config.items()}})


@pytest.fixture(scope="module")
def spaces(storage):
    def pairs():
        for a in range(5, 7):
            for b in range(a):
                yield a, b

    spaces = {
        "conditional": (
            {
                "a": tune.randint(5, 10),
                "b": tune.sample_from(lambda spec: np.random.randint(0, spec.config.a)),
            },
            3,
        ),
        "pairs": ({"ab": tune.grid_search(list(pairs()))}, 1),
        "grid": (
            {
                "qux": tune.sample_from(lambda spec: 2 + 2),
                "bar": tune.grid_search([True, False]),
                "foo": tune.grid_search([1, 2, 3]),
                "baz": "asd",
            },
            1,
        ),
        "nested": (
            {
                "alpha": tune.uniform(100, 200),
                "beta": tune.sample_from(lambda spec: spec.config.alpha * np.random.normal()),
                "nn_layers": [tune.grid_search([16, 64]), tune.grid_search([16, 64])],
            },
            2,
        ),
    }
    return {
        name: tune.Tuner(
            kind_of_config,
            param_space=space,
            tune_config=tune.TuneConfig(num_samples=n),
            run_config=run_config(storage, f"space_{name}"),
        ).fit()
        for name, (space, n) in spaces.items()
    }


def test_conditional_space_reads_spec_config(spaces):
    grid = spaces["conditional"]
    assert len(grid) == 3
    for result in grid:
        assert 5 <= result.config["a"] < 10
        assert 0 <= result.config["b"] < result.config["a"]


def test_grid_of_tuples_gives_one_trial_per_tuple(spaces):
    grid = spaces["pairs"]
    assert len(grid) == 5 + 6
    assert all(r.metrics["kinds"]["ab"] == "tuple" for r in grid)


def test_grid_with_constants_and_sample_from(spaces):
    grid = spaces["grid"]
    assert len(grid) == 6
    seen = sorted((r.config["bar"], r.config["foo"]) for r in grid)
    assert seen == [(b, f) for b in (False, True) for f in (1, 2, 3)]
    assert all(r.config["qux"] == 4 and r.config["baz"] == "asd" for r in grid)


def test_num_samples_repeats_a_grid_inside_a_list(spaces):
    grid = spaces["nested"]
    assert len(grid) == 2 * 2 * 2
    layers = sorted(tuple(r.config["nn_layers"]) for r in grid)
    assert layers == sorted([(a, b) for a in (16, 64) for b in (16, 64)] * 2)
    assert all(100 <= r.config["alpha"] <= 200 for r in grid)
    assert all(r.metrics["kinds"]["beta"] == "float" for r in grid)


def train_on_data(config, num_epochs=5, data=None):
    seen = 0
    for _ in range(num_epochs):
        for _sample in data:
            seen += 1
    tune.report({"seen": seen})


def test_with_parameters_passes_a_large_array(storage):
    data = np.random.random(size=1000)
    grid = tune.Tuner(
        tune.with_parameters(train_on_data, num_epochs=5, data=data),
        run_config=run_config(storage, "huge_data"),
    ).fit()
    assert not grid.errors
    assert grid[0].metrics["seen"] == 5000


def train_model(config):
    return {"score": config["model_id"], "other_data": 1}


def test_tune_as_a_task_runner(storage):
    trainable = tune.with_resources(train_model, {"cpu": 1})
    trial_space = {"model_id": tune.grid_search([f"model_{i}" for i in range(3)])}
    results = tune.Tuner(
        trainable, param_space=trial_space, run_config=run_config(storage, "tasks")
    ).fit()
    assert [results[i].metrics["score"] for i in range(3)] == ["model_0", "model_1", "model_2"]
    assert "model_0" in str(results[0])


def test_with_resources_placement_group_factory_pack(storage):
    trainable = tune.with_resources(
        report_config,
        resources=tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}], strategy="PACK"),
    )
    grid = tune.Tuner(trainable, run_config=run_config(storage, "pgf")).fit()
    assert not grid.errors
    assert grid[0].metrics["seen"] == 1


# --- tune-fault-tolerance (doc_code/fault_tolerance.py) -----------------------------


def resumable(config):
    checkpoint = train.get_checkpoint()
    start = 1
    if checkpoint:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            start = json.load(f)["epoch"] + 1
    for epoch in range(start, config["num_epochs"]):
        flag = os.path.join(config["flag_dir"], "failed")
        if epoch == 3 and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("fail once at epoch 3")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            train.report({"epoch": epoch, "start": start}, checkpoint=Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def fault_tolerance(storage, tmp_path_factory):
    path = os.path.join(storage, "tune_fault_tolerance_guide")
    out = {"before": tune.Tuner.can_restore(path)}
    param_space = {"num_epochs": 6, "flag_dir": str(tmp_path_factory.mktemp("ft_flag"))}
    out["first"] = tune.Tuner(
        resumable,
        param_space=param_space,
        run_config=air.RunConfig(
            storage_path=storage, name="tune_fault_tolerance_guide", verbose=0
        ),
    ).fit()
    out["after"] = tune.Tuner.can_restore(path)
    tuner = tune.Tuner.restore(path, trainable=resumable, resume_errored=True)
    out["pre_fit"] = tuner.get_results()
    out["restored"] = tuner.fit()
    out["options"] = tune.Tuner.restore(
        path,
        trainable=resumable,
        resume_errored=True,
        restart_errored=False,
        resume_unfinished=True,
    )
    retry_space = {"num_epochs": 6, "flag_dir": str(tmp_path_factory.mktemp("ft_retry"))}
    out["retried"] = tune.Tuner(
        resumable,
        param_space=retry_space,
        run_config=air.RunConfig(
            storage_path=storage,
            name="trial_fault_tolerance",
            failure_config=air.FailureConfig(max_failures=3),
            verbose=0,
        ),
    ).fit()
    return out


def test_can_restore_only_an_existing_experiment(fault_tolerance):
    assert fault_tolerance["before"] is False
    assert fault_tolerance["after"] is True


def test_the_first_run_errors_after_two_epochs(fault_tolerance):
    grid = fault_tolerance["first"]
    assert grid.num_errors == 1
    assert grid[0].metrics["epoch"] == 2


def test_restore_resume_errored_continues_from_the_checkpoint(fault_tolerance):
    assert len(fault_tolerance["pre_fit"]) == 1
    grid = fault_tolerance["restored"]
    assert not grid.errors
    assert grid[0].metrics["epoch"] == 5
    assert grid[0].metrics["start"] == 3


def test_restore_takes_every_resume_option(fault_tolerance):
    assert isinstance(fault_tolerance["options"], tune.Tuner)


def test_max_failures_retries_from_the_checkpoint(fault_tolerance):
    grid = fault_tolerance["retried"]
    assert not grid.errors
    assert grid[0].metrics["epoch"] == 5
    assert grid[0].metrics["start"] == 3


# --- tune-output and getting data in and out -----------------------------------------


class ResultsInMemory(LoggerCallback):
    def __init__(self):
        self.results = {}
        self.completed = []

    def log_trial_result(self, iteration, trial, result):
        self.results.setdefault(trial.trial_id, []).append(json.dumps(result, default=str))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.completed.append(trial.trial_id)


def training_function(config, data):
    model = {"a": config["hyperparameter_a"], "b": config["hyperparameter_b"]}
    for epoch in range(config["epochs"]):
        metric = (0.1 + model["a"] * epoch / 100) ** (-1) + model["b"] * 0.1 * data["A"].sum()
        session.report(
            metrics={
                "metric": metric,
                "trial_dir": train.get_context().get_trial_dir(),
            }
        )


@pytest.fixture(scope="module")
def data_in_and_out(storage):
    callback = ResultsInMemory()
    data = pd.DataFrame({"A": [1, 2, 3], "B": [4, 5, 6]})
    grid = tune.Tuner(
        tune.with_parameters(training_function, data=data),
        param_space={
            "hyperparameter_a": tune.uniform(0, 20),
            "hyperparameter_b": tune.uniform(-100, 100),
            "epochs": 3,
        },
        tune_config=tune.TuneConfig(num_samples=2, metric="metric", mode="max"),
        run_config=air.RunConfig(
            storage_path=storage, name="test_experiment", callbacks=[callback], verbose=0
        ),
    ).fit()
    return grid, callback


def test_results_are_under_storage_path_and_name(data_in_and_out, storage):
    grid, _ = data_in_and_out
    assert grid.experiment_path == os.path.join(storage, "test_experiment")
    for result in grid:
        assert result.path.startswith(grid.experiment_path)
        assert result.metrics["trial_dir"] == result.path


def test_with_parameters_dataframe_and_session_report(data_in_and_out):
    grid, _ = data_in_and_out
    assert not grid.errors
    best = grid.get_best_result()
    a, b = best.config["hyperparameter_a"], best.config["hyperparameter_b"]
    assert best.metrics["metric"] == pytest.approx((0.1 + a * 2 / 100) ** (-1) + b * 0.6)


def test_get_dataframe_has_config_columns(data_in_and_out):
    grid, _ = data_in_and_out
    df = grid.get_dataframe()
    assert len(df) == 2
    for column in ("metric", "training_iteration", "config/epochs", "config/hyperparameter_a"):
        assert column in df.columns
    assert set(df["config/epochs"]) == {3}


def test_custom_logger_callback_sees_every_result(data_in_and_out):
    grid, callback = data_in_and_out
    assert sorted(callback.completed) == sorted(r.metrics["trial_id"] for r in grid)
    for logged in callback.results.values():
        assert len(logged) == 3
        assert json.loads(logged[-1])["training_iteration"] == 3


# --- API reference docstrings: with_parameters, Callback, ResultGrid errors ------------


class DataTrainable(tune.Trainable):
    def setup(self, config, data=None):
        self.data = data
        self.iter = 0

    def step(self):
        self.iter += 1
        return {"metric": self.iter * len(self.data)}


def test_with_parameters_on_a_class_trainable(storage):
    grid = tune.Tuner(
        tune.with_parameters(DataTrainable, data=[1, 2, 3]),
        run_config=run_config(storage, "wp_class", stop={"training_iteration": 2}),
    ).fit()
    assert not grid.errors
    assert grid[0].metrics["metric"] == 6


class MyCallback(tune.Callback):
    def __init__(self):
        self.seen = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.append(result["metric"])


def count_to_three(config):
    for i in range(3):
        tune.report({"metric": i})


def test_callback_on_trial_result_and_explicit_best(storage):
    callback = MyCallback()
    grid = tune.Tuner(
        count_to_three, run_config=run_config(storage, "callback", callbacks=[callback])
    ).fit()
    assert callback.seen == [0, 1, 2]
    assert grid.get_best_result(metric="metric", mode="max").metrics["metric"] == 2


def always_fails(config):
    raise ValueError("bad")


def test_result_error_is_the_trainables_exception(storage):
    grid = tune.Tuner(
        always_fails,
        param_space={"x": tune.grid_search([1, 2])},
        run_config=run_config(storage, "errors"),
    ).fit()
    assert grid.num_errors == 2
    assert all(isinstance(grid[i].error, ValueError) for i in range(len(grid)))
    assert len(grid.errors) == 2
