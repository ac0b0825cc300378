"""The APIs Ray Tune's own example scripts lean on (python/ray/tune/examples, Ray form).

The XGBoost/LightGBM examples are in test_ray_examples_gbm.py, the searcher examples
in test_ray_examples_search.py.

Each experiment below is our own small program written the way one of Ray Tune's
example scripts uses the API (named in the fixture's docstring): its constructor
arguments, reporting forms, result keys and what it prints. Iteration counts are tiny.
"""

import json
import os
import random
import tempfile

import numpy as np
import pytest
from ray import air, train, tune
from ray.air import session
from ray.train import Checkpoint
from ray.tune import Stopper, Trainable
from ray.tune.logger import LoggerCallback
from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    HyperBandScheduler,
    PopulationBasedTraining,
)
from ray.tune.schedulers.pb2 import PB2
from ray.tune.utils.mock_trainable import MyTrainableClass


def evaluation_fn(step, width, height):
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


def _run_config(factory, name, **kwargs):
    return train.RunConfig(name=name, storage_path=str(factory.mktemp(name)), verbose=0, **kwargs)


# -- async_hyperband_example.py: tune.report(dict), tune.with_resources, tune.RunConfig ---


def easy_objective(config):
    width, height = config["width"], config["height"]
    for step in range(config["steps"]):
        tune.report({"iterations": step, "mean_loss": evaluation_fn(step, width, height)})


@pytest.fixture(scope="module")
def asha_results(tmp_path_factory):
    """async_hyperband_example.py (Ray 2.4x form)."""
    scheduler = AsyncHyperBandScheduler(grace_period=5, max_t=100)
    tuner = tune.Tuner(
        tune.with_resources(easy_objective, {"cpu": 1, "gpu": 0}),
        run_config=tune.RunConfig(
            name="asynchyperband_test",
            storage_path=str(tmp_path_factory.mktemp("asha")),
            stop={"training_iteration": 2},
            verbose=1,
        ),
        tune_config=tune.TuneConfig(
            metric="mean_loss", mode="min", scheduler=scheduler, num_samples=3
        ),
        param_space={
            "steps": 100,
            "width": tune.uniform(10, 100),
            "height": tune.uniform(0, 100),
        },
    )
    return tuner.fit()


def test_asha_example_runs_every_sample(asha_results):
    assert len(asha_results) == 3
    assert asha_results.num_errors == 0


def test_asha_example_stop_dict_bounds_iterations(asha_results):
    assert all(r.metrics["training_iteration"] == 2 for r in asha_results)


def test_asha_example_best_config_has_the_space(asha_results):
    config = asha_results.get_best_result().config
    assert config["steps"] == 100
    assert 10 <= config["width"] <= 100 and 0 <= config["height"] <= 100


def test_asha_example_reports_its_keys(asha_results):
    metrics = asha_results.get_best_result().metrics
    assert metrics["iterations"] == 1
    assert metrics["mean_loss"] == pytest.approx(
        evaluation_fn(1, metrics["config"]["width"], metrics["config"]["height"])
    )


# -- pbt_example.py: a class trainable whose save_checkpoint returns a dict, reset_config,
# reuse_actors, air.RunConfig / air.CheckpointConfig, stop on "done" or an iteration --


class PBTBenchmarkExample(tune.Trainable):
    def setup(self, config):
        self.lr = config["lr"]
        self.accuracy = 0.0

    def step(self):
        self.accuracy += self.lr * 100 * random.random()
        return {"mean_accuracy": self.accuracy, "cur_lr": self.lr, "done": self.accuracy > 1e9}

    def save_checkpoint(self, checkpoint_dir):
        return {"accuracy": self.accuracy, "lr": self.lr}

    def load_checkpoint(self, checkpoint):
        self.accuracy = checkpoint["accuracy"]

    def reset_config(self, new_config):
        self.lr = new_config["lr"]
        self.config = new_config
        return True


@pytest.fixture(scope="module")
def pbt_class_results(tmp_path_factory):
    """pbt_example.py."""
    perturbation_interval = 2
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=perturbation_interval,
        hyperparam_mutations={
            "lr": lambda: random.uniform(0.0001, 0.02),
            "some_other_factor": [1, 2],
        },
    )
    tuner = tune.Tuner(
        PBTBenchmarkExample,
        run_config=air.RunConfig(
            name="pbt_class_api_example",
            storage_path=str(tmp_path_factory.mktemp("pbt_class")),
            stop={"done": True, "training_iteration": 4},
            verbose=0,
            checkpoint_config=air.CheckpointConfig(
                checkpoint_frequency=perturbation_interval,
                checkpoint_score_attribute="mean_accuracy",
                num_to_keep=2,
            ),
        ),
        tune_config=tune.TuneConfig(
            scheduler=pbt, metric="mean_accuracy", mode="max", reuse_actors=True, num_samples=4
        ),
        param_space={"lr": 0.0001, "some_other_factor": 1},
    )
    return tuner.fit()


def test_pbt_class_example_all_trials_terminate(pbt_class_results):
    assert len(pbt_class_results) == 4
    assert pbt_class_results.num_errors == 0
    assert pbt_class_results.num_terminated == 4


def test_pbt_class_example_best_config_keeps_mutated_keys(pbt_class_results):
    config = pbt_class_results.get_best_result().config
    assert set(config) == {"lr", "some_other_factor"}
    assert config["some_other_factor"] in (1, 2)


def test_pbt_class_example_dict_checkpoint_is_kept(pbt_class_results):
    best = pbt_class_results.get_best_result()
    assert best.checkpoint is not None
    assert len(best.best_checkpoints) <= 2


# -- pbt_function.py (Ray 2.0-2.6 form): ray.air.session with a directory checkpoint -----


def pbt_function(config):
    lr = config["lr"]
    accuracy = 0.0
    step = 1
    checkpoint = session.get_checkpoint()
    if checkpoint:
        with (
            checkpoint.as_directory() as checkpoint_dir,
            open(os.path.join(checkpoint_dir, "state.json")) as f,
        ):
            state = json.load(f)
        accuracy, step = state["acc"], state["step"] + 1
    while True:
        accuracy += lr * random.random()
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump({"acc": accuracy, "step": step}, f)
            session.report(
                {"mean_accuracy": accuracy, "cur_lr": lr, "done": accuracy > 1e9},
                checkpoint=Checkpoint.from_directory(tmp),
            )
        step += 1


@pytest.fixture(scope="module")
def pb2_results(tmp_path_factory):
    """pb2_example.py (which runs pbt_function.py's trainable under PB2)."""
    pb2 = PB2(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_bounds={"lr": [0.0001, 0.02]},
    )
    tuner = tune.Tuner(
        pbt_function,
        run_config=air.RunConfig(
            name="pb2_test",
            storage_path=str(tmp_path_factory.mktemp("pb2")),
            verbose=False,
            stop={"done": True, "training_iteration": 4},
            failure_config=air.FailureConfig(fail_fast=True),
            checkpoint_config=air.CheckpointConfig(
                checkpoint_score_attribute="mean_accuracy", num_to_keep=2
            ),
        ),
        tune_config=tune.TuneConfig(
            scheduler=pb2, metric="mean_accuracy", mode="max", num_samples=4
        ),
        param_space={"lr": tune.uniform(0.0001, 0.02), "some_other_factor": 1},
    )
    return tuner.fit()


def test_pb2_example_runs(pb2_results):
    assert pb2_results.num_errors == 0
    assert len(pb2_results) == 4


def test_pb2_example_lr_stays_in_bounds(pb2_results):
    for result in pb2_results:
        assert 0.0001 <= result.config["lr"] <= 0.02
        # the stop wins over PB2 at the last result (F2): the config is what ran last
        assert result.metrics["cur_lr"] == result.config["lr"]


# -- custom_func_checkpointing.py: train.get_checkpoint / Checkpoint.from_directory -------


def train_func(config):
    start = 0
    width, height = config["width"], config["height"]
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with (
            checkpoint.as_directory() as checkpoint_dir,
            open(os.path.join(checkpoint_dir, "checkpoint.json")) as f,
        ):
            start = json.load(f)["step"] + 1
    for step in range(start, 3):
        intermediate_score = evaluation_fn(step, width, height)
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            with open(os.path.join(temp_checkpoint_dir, "checkpoint.json"), "w") as f:
                json.dump({"step": step}, f)
            train.report(
                {"iterations": step, "mean_loss": intermediate_score},
                checkpoint=Checkpoint.from_directory(temp_checkpoint_dir),
            )


@pytest.fixture(scope="module")
def checkpointing_results(tmp_path_factory):
    """custom_func_checkpointing.py."""
    tuner = tune.Tuner(
        train_func,
        run_config=_run_config(tmp_path_factory, "hyperband_test"),
        tune_config=tune.TuneConfig(metric="mean_loss", mode="min", num_samples=2),
        param_space={
            "steps": 10,
            "width": tune.randint(10, 100),
            "height": tune.loguniform(10, 100),
        },
    )
    return tuner.fit()


def test_custom_func_checkpointing_best_checkpoint_reads_back(checkpointing_results):
    best_checkpoint = checkpointing_results.get_best_result().checkpoint
    with (
        best_checkpoint.as_directory() as checkpoint_dir,
        open(os.path.join(checkpoint_dir, "checkpoint.json")) as f,
    ):
        assert json.load(f) == {"step": 2}


def test_custom_func_checkpointing_space_types(checkpointing_results):
    config = checkpointing_results.get_best_result().config
    assert isinstance(config["width"], int) and 10 <= config["width"] < 100
    assert 10 <= config["height"] <= 100


# -- logging_example.py: tune.run with a LoggerCallback and trial_name_creator ----------


class TestLoggerCallback(LoggerCallback):
    __test__ = False  # pytest: not a test class

    def __init__(self):
        self.seen = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.append((str(trial), result["mean_loss"]))


def trial_str_creator(trial):
    return f"{trial.trainable_name}_{trial.trial_id}_123"


def kwargs_objective(config):
    for step in range(config["steps"]):
        tune.report(
            iterations=step, mean_loss=evaluation_fn(step, config["width"], config["height"])
        )


@pytest.fixture(scope="module")
def logging_run(tmp_path_factory):
    """logging_example.py (tune.report's keyword form, as in Ray 2.0-2.6)."""
    callback = TestLoggerCallback()
    analysis = tune.run(
        kwargs_objective,
        name="hyperband_test",
        storage_path=str(tmp_path_factory.mktemp("logging")),
        metric="mean_loss",
        mode="min",
        num_samples=2,
        trial_name_creator=trial_str_creator,
        callbacks=[callback],
        stop={"training_iteration": 2},
        verbose=0,
        config={
            "steps": 100,
            "width": tune.randint(10, 100),
            "height": tune.loguniform(10, 100),
        },
    )
    return analysis, callback


def test_logging_example_callback_sees_every_result(logging_run):
    _, callback = logging_run
    assert len(callback.seen) == 4


def test_logging_example_trial_str_is_the_creators_name(logging_run):
    _, callback = logging_run
    assert all(
        name.startswith("kwargs_objective_") and name.endswith("_123") for name, _ in callback.seen
    )


def test_logging_example_best_config(logging_run):
    analysis, _ = logging_run
    assert set(analysis.best_config) == {"steps", "width", "height"}
    assert analysis.best_result["mean_loss"] == min(
        t.last_result["mean_loss"] for t in analysis.trials
    )


# -- hyperband_example.py / async_hyperband_example.py (Ray 2.0 form): MyTrainableClass ---


@pytest.fixture(scope="module")
def hyperband_results(tmp_path_factory):
    """hyperband_example.py."""
    hyperband = HyperBandScheduler(max_t=20)
    tuner = tune.Tuner(
        MyTrainableClass,
        run_config=_run_config(tmp_path_factory, "hyperband_test", stop={"training_iteration": 3}),
        tune_config=tune.TuneConfig(
            num_samples=3, metric="episode_reward_mean", mode="max", scheduler=hyperband
        ),
        param_space={"width": tune.randint(10, 90), "height": tune.randint(0, 100)},
    )
    return tuner.fit()


def test_hyperband_example_mock_trainable_keys(hyperband_results):
    best = hyperband_results.get_best_result()
    assert set(best.config) == {"width", "height"}
    assert best.metrics["timesteps_total"] == 3
    assert best.metrics["episode_reward_mean"] == pytest.approx(
        best.config["height"] * np.tanh(3 / best.config["width"])
    )


def test_sample_from_lambdas_in_the_space(tmp_path_factory):
    """async_hyperband_example.py (Ray 2.0 form): tune.sample_from with a spec argument."""
    tuner = tune.Tuner(
        tune.with_resources(MyTrainableClass, resources={"cpu": 1, "gpu": 0}),
        run_config=_run_config(tmp_path_factory, "ahb_mock", stop={"training_iteration": 1}),
        tune_config=tune.TuneConfig(
            metric="episode_reward_mean",
            mode="max",
            scheduler=AsyncHyperBandScheduler(grace_period=5, max_t=100),
            num_samples=2,
        ),
        param_space={
            "width": tune.sample_from(lambda spec: 10 + int(90 * random.random())),
            "height": tune.sample_from(lambda spec: int(100 * random.random())),
        },
    )
    for result in tuner.fit():
        assert 10 <= result.config["width"] < 100
        assert 0 <= result.config["height"] < 100


# -- the stopping guide's custom Stopper (doc_code/stopping.py) ------------------------


class CustomStopper(Stopper):
    def __init__(self):
        self.should_stop = False

    def __call__(self, trial_id, result):
        if not self.should_stop and result["mean_loss"] > 1e9:
            self.should_stop = True
        return self.should_stop or result["training_iteration"] >= 2

    def stop_all(self):
        return self.should_stop


def test_custom_stopper_class(tmp_path_factory):
    tuner = tune.Tuner(
        easy_objective,
        run_config=_run_config(tmp_path_factory, "stopper", stop=CustomStopper()),
        tune_config=tune.TuneConfig(num_samples=2),
        param_space={"steps": 100, "width": 10, "height": 1},
    )
    assert [r.metrics["training_iteration"] for r in tuner.fit()] == [2, 2]


# -- key names the examples print or read -----------------------------------------------


def test_trainable_is_the_class_the_examples_subclass():
    assert issubclass(PBTBenchmarkExample, Trainable)
    assert issubclass(MyTrainableClass, Trainable)
