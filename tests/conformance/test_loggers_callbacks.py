"""Ray Tune's callbacks and loggers (user guide: "How to Define Tune Callbacks", "Tune
Loggers", "Using MLflow with Tune"), written as Ray's docs show them.

One small experiment runs with a recording `Callback` and a `LoggerCallback` and is
shared by most tests; a second has a trial that fails once and then for good; a third
uses `setup_mlflow` inside the trainable.
"""

import json
import os
from pathlib import Path

import pytest
from ray import train, tune
from ray.air.integrations.mlflow import MLflowLoggerCallback, setup_mlflow
from ray.train import Checkpoint, FailureConfig, RunConfig
from ray.tune import Callback
from ray.tune.logger import (
    CSVLoggerCallback,
    JsonLoggerCallback,
    LoggerCallback,
    TBXLoggerCallback,
    pretty_print,
)
from ray.tune.stopper import MaximumIterationStopper

ITERATIONS = 3


class RecordingCallback(Callback):
    """Records every hook call as (hook name, details)."""

    def __init__(self):
        self.calls = []

    def names(self, hook):
        return [details for name, details in self.calls if name == hook]

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.calls.append(("setup", (stop, num_samples, total_num_samples)))

    def on_step_begin(self, iteration, trials, **info):
        self.calls.append(("on_step_begin", iteration))

    def on_step_end(self, iteration, trials, **info):
        self.calls.append(("on_step_end", iteration))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.calls.append(("on_trial_start", trial.trial_id))

    def on_trial_restore(self, iteration, trials, trial, **info):
        self.calls.append(("on_trial_restore", trial.trial_id))

    def on_trial_save(self, iteration, trials, trial, **info):
        self.calls.append(("on_trial_save", trial.trial_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append(("on_trial_result", (trial.trial_id, result["score"])))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.calls.append(("on_trial_complete", trial.trial_id))

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.calls.append(("on_trial_recover", trial.trial_id))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.calls.append(("on_trial_error", trial.trial_id))

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.calls.append(("on_checkpoint", (trial.trial_id, checkpoint)))

    def on_experiment_end(self, trials, **info):
        self.calls.append(("on_experiment_end", len(trials)))


class RecordingLogger(LoggerCallback):
    def __init__(self):
        self.events = []

    def log_trial_start(self, trial):
        self.events.append(("start", trial.trial_id))

    def log_trial_result(self, iteration, trial, result):
        self.events.append(("result", trial.trial_id, iteration, result["score"]))

    def log_trial_save(self, trial):
        self.events.append(("save", trial.trial_id))

    def log_trial_end(self, trial, failed=False):
        self.events.append(("end", trial.trial_id, failed))


def scored(config):
    for i in range(ITERATIONS):
        checkpoint = None
        if i == ITERATIONS - 1:
            directory = os.path.join(train.get_context().get_trial_dir(), "ckpt")
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "state.json"), "w") as f:
                json.dump({"i": i}, f)
            checkpoint = Checkpoint.from_directory(directory)
        train.report({"score": config["x"] * (i + 1)}, checkpoint=checkpoint)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    recorder, logger = RecordingCallback(), RecordingLogger()
    tuner = tune.Tuner(
        scored,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=RunConfig(
            name="callbacks",
            storage_path=str(tmp_path_factory.mktemp("callbacks")),
            stop=MaximumIterationStopper(max_iter=10),
            callbacks=[recorder, logger, JsonLoggerCallback(), CSVLoggerCallback()],
            verbose=0,
        ),
    )
    results = tuner.fit()
    return results, recorder, logger


def trial_ids(results):
    return sorted(os.path.basename(r.path).split("_")[0] for r in results)


def test_setup_is_called_once_first(experiment):
    _, recorder, _ = experiment
    assert recorder.calls[0][0] == "setup"
    ((stop, num_samples, total),) = recorder.names("setup")
    assert isinstance(stop, MaximumIterationStopper)
    assert num_samples == 1 and total == 2


def test_each_trial_starts_once_and_completes_once(experiment):
    _, recorder, _ = experiment
    started, completed = recorder.names("on_trial_start"), recorder.names("on_trial_complete")
    assert len(started) == len(set(started)) == 2
    assert sorted(completed) == sorted(started)
    assert recorder.names("on_trial_error") == [] and recorder.names("on_trial_recover") == []


def test_every_result_reaches_on_trial_result(experiment):
    _, recorder, _ = experiment
    scores = sorted(score for _, score in recorder.names("on_trial_result"))
    assert scores == sorted([1, 2, 3, 2, 4, 6])


def test_results_arrive_between_start_and_complete(experiment):
    _, recorder, _ = experiment
    order = [name for name, _ in recorder.calls]
    assert order.index("on_trial_start") < order.index("on_trial_result")
    last_result = max(i for i, name in enumerate(order) if name == "on_trial_result")
    assert last_result < max(i for i, name in enumerate(order) if name == "on_trial_complete")


def test_on_checkpoint_gets_a_checkpoint(experiment):
    _, recorder, _ = experiment
    checkpoints = recorder.names("on_checkpoint")
    assert len(checkpoints) == 2
    for _, checkpoint in checkpoints:
        with checkpoint.as_directory() as directory:
            state = json.loads(Path(directory, "state.json").read_text())
        assert state == {"i": ITERATIONS - 1}


def test_on_trial_save_comes_with_each_checkpoint(experiment):
    _, recorder, _ = experiment
    saved = sorted(recorder.names("on_trial_save"))
    assert saved == sorted(trial_id for trial_id, _ in recorder.names("on_checkpoint"))


def test_steps_are_numbered_upwards(experiment):
    _, recorder, _ = experiment
    begins = recorder.names("on_step_begin")
    assert begins and begins == sorted(begins)
    assert recorder.names("on_step_end")


def test_experiment_end_is_last(experiment):
    _, recorder, _ = experiment
    assert recorder.calls[-1] == ("on_experiment_end", 2)


def test_logger_callback_sees_start_results_and_end(experiment):
    _, _, logger = experiment
    kinds = [event[0] for event in logger.events]
    assert kinds.count("start") == 2 and kinds.count("result") == 6
    ends = [event for event in logger.events if event[0] == "end"]
    assert len(ends) == 2 and all(failed is False for _, _, failed in ends)


def test_logger_callback_gets_the_iteration_and_result(experiment):
    _, _, logger = experiment
    for _, _, iteration, score in (e for e in logger.events if e[0] == "result"):
        assert isinstance(iteration, int) and score in (1, 2, 3, 4, 6)


def test_logger_callback_is_told_of_saves(experiment):
    _, _, logger = experiment
    assert len([e for e in logger.events if e[0] == "save"]) == 2


def test_json_logger_writes_params_and_results(experiment):
    results, _, _ = experiment
    for result in results:
        with open(os.path.join(result.path, "params.json")) as f:
            assert json.load(f) == result.config
        with open(os.path.join(result.path, "result.json")) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        assert [line["score"] for line in lines] == [result.config["x"] * i for i in (1, 2, 3)]


def test_csv_logger_writes_progress(experiment):
    results, _, _ = experiment
    for result in results:
        with open(os.path.join(result.path, "progress.csv")) as f:
            rows = f.read().splitlines()
        assert "score" in rows[0].split(",") and len(rows) == 1 + ITERATIONS


def test_the_loggers_are_logger_callbacks():
    for logger in (JsonLoggerCallback, CSVLoggerCallback, TBXLoggerCallback, MLflowLoggerCallback):
        assert issubclass(logger, LoggerCallback) and issubclass(logger, Callback)


def test_pretty_print_leaves_out_the_config():
    text = pretty_print({"loss": 0.5, "config": {"lr": 0.1}, "nothing": None})
    assert "loss: 0.5" in text and "lr" not in text and "nothing" not in text


# -- a trial that fails: on_trial_recover, then on_trial_error -------------------------------


def always_fails(config):
    train.report({"score": 0})
    raise RuntimeError("boom")


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    recorder, logger = RecordingCallback(), RecordingLogger()
    tuner = tune.Tuner(
        always_fails,
        run_config=RunConfig(
            storage_path=str(tmp_path_factory.mktemp("failing")),
            failure_config=FailureConfig(max_failures=1),
            callbacks=[recorder, logger],
            verbose=0,
        ),
    )
    results = tuner.fit()
    return results, recorder, logger


def test_a_retried_failure_calls_on_trial_recover(failing):
    results, recorder, _ = failing
    assert len(recorder.names("on_trial_recover")) == 1
    assert len(recorder.names("on_trial_error")) == 1
    assert recorder.names("on_trial_complete") == []
    assert results.errors


def test_the_retry_restores_the_trial(failing):
    _, recorder, _ = failing
    (started,) = recorder.names("on_trial_start")
    assert recorder.names("on_trial_restore") == [started]


def test_logger_callback_ends_a_failed_trial_as_failed(failing):
    _, _, logger = failing
    ends = [event for event in logger.events if event[0] == "end"]
    assert len(ends) == 1 and ends[0][2] is True


# -- setup_mlflow inside the trainable --------------------------------------------------------


def with_mlflow(config):
    mlflow = setup_mlflow(
        config,
        tracking_uri=config["tracking_uri"],
        experiment_name="conformance",
        tags={"kind": "test"},
    )
    for step in range(2):
        mlflow.log_metric("loss", config["lr"] * (step + 1), step=step)
        train.report({"loss": config["lr"] * (step + 1)})
    mlflow.end_run()


@pytest.fixture(scope="module")
def mlflow_run(tmp_path_factory):
    mlflow = pytest.importorskip("mlflow")
    where = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{where}/mlflow.db"
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    client.create_experiment("conformance")  # the database is made once, here
    tuner = tune.Tuner(
        with_mlflow,
        param_space={"lr": tune.grid_search([0.1, 0.2]), "tracking_uri": uri},
        run_config=RunConfig(storage_path=str(where / "runs"), verbose=0),
    )
    results = tuner.fit()
    experiment = client.get_experiment_by_name("conformance")
    return results, client.search_runs([experiment.experiment_id]), uri


def test_setup_mlflow_runs_in_each_trial(mlflow_run):
    results, runs, _ = mlflow_run
    assert not results.errors
    assert len(runs) == 2


def test_setup_mlflow_logs_the_config_as_params(mlflow_run):
    _, runs, uri = mlflow_run
    assert sorted(float(run.data.params["lr"]) for run in runs) == [0.1, 0.2]
    assert all(run.data.params["tracking_uri"] == uri for run in runs)


def test_setup_mlflow_returns_the_mlflow_module_for_metrics_and_tags(mlflow_run):
    _, runs, _ = mlflow_run
    for run in runs:
        lr = float(run.data.params["lr"])
        assert run.data.metrics["loss"] == pytest.approx(2 * lr)
        assert run.data.tags["kind"] == "test"


def test_setup_mlflow_without_an_experiment_is_refused(mlflow_run):
    _, _, uri = mlflow_run
    with pytest.raises(ValueError):
        setup_mlflow({}, tracking_uri=uri, experiment_name="absent")
