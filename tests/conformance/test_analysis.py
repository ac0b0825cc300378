"""Ray Tune's "Analyzing Tune Experiment Results" guide and the ResultGrid / Result /
ExperimentAnalysis / Trial API reference, written as Ray Tune users write them.

One experiment (a grid of four learning rates: two finish with three checkpoints each,
one raises after its first report, one raises before reporting) is shared by most
tests; a small `tune.run` one (no metric) serves ExperimentAnalysis.
"""

import json
import os
import tempfile

import pytest
from ray import train, tune
from ray.train import Checkpoint, CheckpointConfig, RunConfig
from ray.tune import Callback, ExperimentAnalysis, PlacementGroupFactory, ResultGrid
from ray.tune.experiment import Trial

GOOD = (0.01, 0.1)  # three reports each, a checkpoint with each
DIVERGES = 0.5  # one report (loss 5.0), then ValueError
BROKEN = 0.9  # RuntimeError before any report


def train_fn(config):
    lr = config["lr"]
    if lr == BROKEN:
        raise RuntimeError("could not build the model")
    for step in range(1, 4):
        loss = 10 * lr if lr == DIVERGES else lr * (4 - step)
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            train.report({"loss": loss, "acc": 1 - loss}, checkpoint=Checkpoint.from_directory(tmp))
        if lr == DIVERGES:
            raise ValueError("loss diverged")


def checkpoint_step(checkpoint):
    with checkpoint.as_directory() as path, open(os.path.join(path, "state.json")) as f:
        return json.load(f)["step"]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("analysis"))


@pytest.fixture(scope="module")
def result_grid(storage):
    tuner = tune.Tuner(
        train_fn,
        param_space={"lr": tune.grid_search([*GOOD, DIVERGES, BROKEN]), "momentum": 0.9},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(
            name="lr_grid",
            storage_path=storage,
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            verbose=0,
        ),
    )
    return tuner.fit()


@pytest.fixture(scope="module")
def by_lr(result_grid):
    return {result.config["lr"]: result for result in result_grid}


@pytest.fixture(scope="module")
def best_result(result_grid):
    return result_grid.get_best_result()


@pytest.fixture(scope="module")
def analysis(result_grid):
    return ExperimentAnalysis(
        result_grid.experiment_path, default_metric="loss", default_mode="min"
    )


@pytest.fixture(scope="module")
def trials(analysis):
    return {trial.config["lr"]: trial for trial in analysis.trials}


# -- Loading results and experiment-level analysis ---------------------------------------------
def test_the_grid_has_one_result_per_trial(result_grid):
    assert len(result_grid) == 4
    assert sorted(result_grid[i].config["lr"] for i in range(len(result_grid))) == sorted(
        [*GOOD, DIVERGES, BROKEN]
    )


def test_results_are_iterable(result_grid):
    assert all(isinstance(result, tune.Result) for result in result_grid)


def test_num_errors_and_num_terminated(result_grid):
    assert result_grid.num_errors == 2
    assert result_grid.num_terminated == 2


def test_errors_hold_the_exceptions_raised_in_the_trials(result_grid):
    assert len(result_grid.errors) == 2
    assert all(isinstance(error, Exception) for error in result_grid.errors)
    text = " ".join(str(error) for error in result_grid.errors)
    assert "loss diverged" in text and "could not build the model" in text


def test_an_error_is_an_instance_of_the_raised_type(by_lr):
    assert isinstance(by_lr[DIVERGES].error, ValueError)
    assert isinstance(by_lr[BROKEN].error, RuntimeError)
    assert "ValueError" in str(by_lr[DIVERGES].error)


def test_a_result_without_error_has_none(by_lr):
    assert by_lr[GOOD[0]].error is None


def test_experiment_path_is_storage_path_and_name(result_grid, storage):
    assert os.path.realpath(result_grid.experiment_path) == os.path.realpath(
        os.path.join(storage, "lr_grid")
    )


def test_get_dataframe_has_a_row_per_trial_with_config_columns(result_grid):
    df = result_grid.get_dataframe()
    assert len(df) == 4
    assert {"loss", "acc", "training_iteration", "config/lr", "config/momentum"} <= set(df.columns)


def test_get_dataframe_last_reported_results(result_grid):
    df = result_grid.get_dataframe()
    last = dict(zip(df["config/lr"], df["loss"], strict=True))
    assert last[GOOD[0]] == pytest.approx(0.01) and last[GOOD[1]] == pytest.approx(0.1)


def test_get_dataframe_filtered_by_metric(result_grid):
    df = result_grid.get_dataframe(filter_metric="loss", filter_mode="max")
    worst = dict(zip(df["config/lr"], df["loss"], strict=True))
    assert worst[GOOD[0]] == pytest.approx(0.03) and worst[GOOD[1]] == pytest.approx(0.3)


# -- The best result -----------------------------------------------------------------------------
def test_get_best_result_uses_the_tune_config_metric(best_result):
    assert best_result.config == {"lr": GOOD[0], "momentum": 0.9}


def test_get_best_result_with_metric_and_mode(result_grid):
    assert result_grid.get_best_result(metric="loss", mode="max").config["lr"] == DIVERGES
    assert result_grid.get_best_result(metric="acc", mode="max").config["lr"] == GOOD[0]


def test_get_best_result_scopes(result_grid):
    assert result_grid.get_best_result("loss", "min", scope="avg").config["lr"] == GOOD[0]
    assert result_grid.get_best_result("loss", "max", scope="all").config["lr"] == DIVERGES
    assert result_grid.get_best_result("loss", "min", scope="last-5-avg").config["lr"] == GOOD[0]


def test_get_best_result_of_a_metric_nobody_reported_raises(result_grid):
    with pytest.raises(RuntimeError):
        result_grid.get_best_result(metric="f1", mode="max")


def test_best_result_metrics_are_the_last_reported(best_result):
    assert best_result.metrics["loss"] == pytest.approx(0.01)
    assert best_result.metrics["training_iteration"] == 3
    assert best_result.metrics["config"] == best_result.config


def test_best_result_checkpoint_is_the_latest(best_result):
    assert isinstance(best_result.checkpoint, Checkpoint)
    assert checkpoint_step(best_result.checkpoint) == 3


def test_best_checkpoints_are_checkpoint_and_metrics_pairs(best_result):
    assert len(best_result.best_checkpoints) == 3
    for checkpoint, metrics in best_result.best_checkpoints:
        assert isinstance(checkpoint, Checkpoint)
        assert checkpoint_step(checkpoint) == metrics["training_iteration"]
    losses = sorted(metrics["loss"] for _, metrics in best_result.best_checkpoints)
    assert losses == pytest.approx([0.01, 0.02, 0.03])


def test_result_get_best_checkpoint(best_result):
    assert checkpoint_step(best_result.get_best_checkpoint(metric="loss", mode="min")) == 3
    assert checkpoint_step(best_result.get_best_checkpoint(metric="loss", mode="max")) == 1
    assert checkpoint_step(best_result.get_best_checkpoint("acc", "max")) == 3


def test_result_get_best_checkpoint_errors(best_result, by_lr):
    with pytest.raises(ValueError):
        best_result.get_best_checkpoint(metric="loss", mode="minimum")
    with pytest.raises(RuntimeError):
        best_result.get_best_checkpoint(metric="f1", mode="max")
    with pytest.raises(RuntimeError):
        by_lr[BROKEN].get_best_checkpoint(metric="loss", mode="min")


def test_best_result_path_is_the_trial_directory(best_result, result_grid):
    assert os.path.isdir(best_result.path)
    assert os.path.realpath(best_result.path).startswith(
        os.path.realpath(result_grid.experiment_path)
    )


def test_metrics_dataframe_has_every_report(best_result):
    df = best_result.metrics_dataframe
    assert len(df) == 3
    assert list(df["training_iteration"]) == [1, 2, 3]
    assert list(df["loss"]) == pytest.approx([0.03, 0.02, 0.01])


def test_metrics_dataframe_has_config_columns(best_result):
    df = best_result.metrics_dataframe
    assert list(df["config/lr"]) == [GOOD[0]] * 3
    assert list(df["config/momentum"]) == [0.9] * 3


def test_trial_dataframes_and_results_carry_the_config(analysis, trials):
    trial_id = trials[GOOD[1]].trial_id
    assert list(analysis.trial_dataframes[trial_id]["config/lr"]) == [GOOD[1]] * 3
    assert analysis.results[trial_id]["config"] == {"lr": GOOD[1], "momentum": 0.9}
    assert analysis.results_df.loc[trial_id, "config/momentum"] == 0.9


def test_a_failed_trial_keeps_what_it_reported(by_lr):
    result = by_lr[DIVERGES]
    assert result.metrics["loss"] == pytest.approx(5.0)
    assert checkpoint_step(result.checkpoint) == 1


def test_a_trial_that_never_reported(by_lr):
    result = by_lr[BROKEN]
    assert result.metrics == {}
    assert result.checkpoint is None
    assert result.metrics_dataframe.empty


def test_result_from_path(best_result):
    again = tune.Result.from_path(best_result.path)
    assert again.config == best_result.config
    assert again.metrics["loss"] == best_result.metrics["loss"]
    assert checkpoint_step(again.checkpoint) == 3


def test_result_grid_from_an_experiment_analysis(analysis):
    grid = ResultGrid(analysis)
    assert len(grid) == 4
    assert grid.get_best_result().config["lr"] == GOOD[0]


def test_tuner_restore_get_results(result_grid):
    restored = tune.Tuner.restore(result_grid.experiment_path, trainable=train_fn)
    grid = restored.get_results()
    assert len(grid) == 4 and grid.num_errors == 2
    assert grid.get_best_result().config["lr"] == GOOD[0]


def test_get_results_before_fit_raises():
    tuner = tune.Tuner(train_fn, param_space={"lr": GOOD[0]})
    with pytest.raises(RuntimeError):
        tuner.get_results()


# -- ExperimentAnalysis ------------------------------------------------------------------------
def test_analysis_loads_a_finished_experiment(result_grid):
    loaded = tune.ExperimentAnalysis(result_grid.experiment_path)
    assert len(loaded.trials) == 4
    assert loaded.get_best_config(metric="loss", mode="min")["lr"] == GOOD[0]


def test_analysis_experiment_path(analysis, result_grid):
    assert analysis.experiment_path == result_grid.experiment_path


def test_default_metric_and_mode(analysis):
    assert analysis.default_metric == "loss" and analysis.default_mode == "min"


def test_get_all_configs_by_trial_id(analysis):
    configs = analysis.get_all_configs()
    assert set(configs) == {trial.trial_id for trial in analysis.trials}
    assert sorted(c["lr"] for c in configs.values()) == sorted([*GOOD, DIVERGES, BROKEN])


def test_get_all_configs_with_prefix(analysis):
    for config in analysis.get_all_configs(prefix=True).values():
        assert set(config) == {"config/lr", "config/momentum"}


def test_trial_dataframes_by_trial_id(analysis, trials):
    frames = analysis.trial_dataframes
    assert set(frames) == {trial.trial_id for trial in analysis.trials}
    assert len(frames[trials[GOOD[1]].trial_id]) == 3
    assert len(frames[trials[DIVERGES].trial_id]) == 1


def test_results_are_the_last_results_by_trial_id(analysis, trials):
    results = analysis.results
    assert results[trials[GOOD[1]].trial_id]["loss"] == pytest.approx(0.1)
    assert results[trials[BROKEN].trial_id] == {}


def test_results_df_is_indexed_by_trial_id(analysis, trials):
    df = analysis.results_df
    assert df.index.name == "trial_id"
    assert df.loc[trials[GOOD[0]].trial_id, "loss"] == pytest.approx(0.01)


def test_dataframe_with_metric_and_mode(analysis):
    df = analysis.dataframe(metric="loss", mode="min")
    best = dict(zip(df["config/lr"], df["loss"], strict=True))
    assert best[GOOD[1]] == pytest.approx(0.1)


def test_get_best_trial_and_config(analysis):
    trial = analysis.get_best_trial(metric="acc", mode="max")
    assert trial.config["lr"] == GOOD[0]
    assert analysis.get_best_config(metric="loss", mode="max")["lr"] == DIVERGES


def test_no_trial_reported_the_metric_gives_none(analysis):
    assert analysis.get_best_trial(metric="f1", mode="max") is None
    assert analysis.get_best_config(metric="f1", mode="max") is None


def test_best_properties_use_the_defaults(analysis):
    assert analysis.best_trial.config["lr"] == GOOD[0]
    assert analysis.best_config == {"lr": GOOD[0], "momentum": 0.9}
    assert analysis.best_result["loss"] == pytest.approx(0.01)


def test_best_checkpoint(analysis):
    assert checkpoint_step(analysis.best_checkpoint) == 3


def test_best_dataframe_and_best_result_df(analysis):
    assert list(analysis.best_dataframe["loss"]) == pytest.approx([0.03, 0.02, 0.01])
    df = analysis.best_result_df
    assert list(df.index) == [analysis.best_trial.trial_id]


def test_get_best_checkpoint_by_metric(analysis, trials):
    trial = trials[GOOD[1]]
    assert checkpoint_step(analysis.get_best_checkpoint(trial, metric="loss", mode="min")) == 3
    assert checkpoint_step(analysis.get_best_checkpoint(trial, metric="loss", mode="max")) == 1


def test_get_last_checkpoint(analysis, trials):
    assert checkpoint_step(analysis.get_last_checkpoint(trials[GOOD[1]])) == 3
    assert checkpoint_step(analysis.get_last_checkpoint(trials[DIVERGES])) == 1


def test_get_best_checkpoint_of_a_trial_without_checkpoints(analysis, trials):
    assert analysis.get_best_checkpoint(trials[BROKEN], metric="loss", mode="min") is None


# -- Trial, as callbacks and loggers see it ----------------------------------------------------
def test_trial_status_constants(trials):
    assert trials[GOOD[0]].status == Trial.TERMINATED == "TERMINATED"
    assert trials[DIVERGES].status == Trial.ERROR == "ERROR"
    assert {Trial.PENDING, Trial.RUNNING, Trial.PAUSED} == {"PENDING", "RUNNING", "PAUSED"}


def test_str_of_a_trial_is_its_name(trials):
    trial = trials[GOOD[0]]
    assert str(trial) == f"train_fn_{trial.trial_id}"
    assert trial.trainable_name == "train_fn"
    assert trial.custom_trial_name is None


def test_trial_last_result_and_checkpoint(trials):
    trial = trials[GOOD[0]]
    assert trial.last_result["loss"] == pytest.approx(0.01)
    assert checkpoint_step(trial.checkpoint) == 3
    assert trials[BROKEN].checkpoint is None


def test_trial_paths(trials):
    trial = trials[GOOD[0]]
    assert os.path.isdir(trial.local_path)
    assert trial.path == trial.local_path


def test_trial_num_failures(trials):
    assert trials[GOOD[0]].num_failures == 0
    assert trials[DIVERGES].num_failures == 1


def test_trial_placement_group_factory(trials):
    pgf = trials[GOOD[0]].placement_group_factory
    assert isinstance(pgf, PlacementGroupFactory)
    assert pgf.required_resources.get("CPU") == 1


def test_trial_experiment_tag_and_evaluated_params(trials):
    trial = trials[GOOD[1]]
    assert trial.evaluated_params["lr"] == GOOD[1]
    assert "lr=0.1" in trial.experiment_tag


# -- tune.run's ExperimentAnalysis -------------------------------------------------------------
def objective(config):
    for step in range(1, 3):
        train.report({"score": config["x"] * step})


@pytest.fixture(scope="module")
def run_analysis(storage):
    return tune.run(
        objective,
        config={"x": tune.grid_search([1, 2])},
        storage_path=storage,
        name="run_no_metric",
        verbose=0,
    )


def test_tune_run_returns_an_experiment_analysis(run_analysis):
    assert isinstance(run_analysis, ExperimentAnalysis)
    assert len(run_analysis.trials) == 2


def test_get_best_trial_needs_a_metric(run_analysis):
    with pytest.raises(ValueError):
        run_analysis.get_best_trial()
    with pytest.raises(ValueError):
        run_analysis.get_best_trial(metric="score")


def test_best_properties_need_a_default_metric(run_analysis):
    with pytest.raises(ValueError):
        _ = run_analysis.best_config
    with pytest.raises(ValueError):
        _ = run_analysis.best_trial


def test_explicit_metric_works_without_defaults(run_analysis):
    assert run_analysis.get_best_config(metric="score", mode="max") == {"x": 2}
    best = run_analysis.get_best_trial(metric="score", mode="max", scope="all")
    assert best.last_result["score"] == 4


def test_one_trial_is_the_best_whatever_it_reported(storage):
    analysis = tune.run(objective, config={"x": 3}, storage_path=storage, name="single", verbose=0)
    assert analysis.get_best_trial(metric="f1", mode="max") is analysis.trials[0]
    grid = ResultGrid(analysis)
    assert grid.get_best_result(metric="f1", mode="max").metrics["score"] == 6


# -- what callbacks see: last_result before a report, should_checkpoint -------------------------
class Recorder(Callback):
    def __init__(self):
        self.at_start = []
        self.results = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.at_start.append(trial.last_result)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results.append(dict(result))


def two_reports(config):
    train.report({"score": 1})
    with tempfile.TemporaryDirectory() as tmp:
        train.report({"score": 2}, checkpoint=Checkpoint.from_directory(tmp))


@pytest.fixture(scope="module")
def recorded(storage):
    recorder = Recorder()
    grid = tune.Tuner(
        two_reports,
        run_config=RunConfig(
            name="recorded", storage_path=storage, callbacks=[recorder], verbose=0
        ),
    ).fit()
    return recorder, grid[0]


def test_last_result_is_empty_before_the_first_report(recorded):
    recorder, _ = recorded
    assert recorder.at_start == [{}]


def test_a_result_with_a_checkpoint_says_should_checkpoint(recorded):
    recorder, result = recorded
    first, second = recorder.results
    assert "should_checkpoint" not in first
    assert second["should_checkpoint"] is True
    assert result.metrics["should_checkpoint"] is True
    ((_, saved),) = result.best_checkpoints
    assert saved["should_checkpoint"] is True
