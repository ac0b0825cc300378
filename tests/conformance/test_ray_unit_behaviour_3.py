"""Behaviours that Ray Tune's own unit tests (python/ray/tune/tests: test_function_api.py,
test_result_grid.py, test_experiment_analysis.py, test_searchers.py,
test_trial_scheduler_pbt.py) assert through the public API, each as a small Ray-form
program of our own (ported at collection)."""

import copy
import os
import pickle
import tempfile

import numpy as np
import pytest
from ray import train, tune
from ray.train import Checkpoint, CheckpointConfig, RunConfig
from ray.tune import ExperimentAnalysis
from ray.tune.result import DEFAULT_METRIC
from ray.tune.result_grid import ResultGrid
from ray.tune.schedulers import PopulationBasedTraining
from ray.tune.search.hyperopt import HyperOptSearch
from ray.tune.search.optuna import OptunaSearch
from ray.tune.trainable import with_parameters
from ray.tune.utils import flatten_dict


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("unit3"))


def report_with_checkpoint(metrics, checkpoint=True):
    if not checkpoint:
        train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "metrics.pkl"), "wb") as f:
            pickle.dump(metrics, f)
        train.report(metrics, checkpoint=Checkpoint.from_directory(folder))


def load_metrics(checkpoint):
    with checkpoint.as_directory() as folder, open(os.path.join(folder, "metrics.pkl"), "rb") as f:
        return pickle.load(f)


# -- function trainables (test_function_api.py) ------------------------------------------
def does_nothing(config):
    pass


@pytest.mark.parametrize(
    "checkpoint_config",
    [CheckpointConfig(checkpoint_frequency=1), CheckpointConfig(checkpoint_at_end=True)],
)
def test_checkpoint_frequency_or_at_end_on_a_function_is_a_value_error(storage, checkpoint_config):
    with pytest.raises(ValueError):
        tune.run(does_nothing, checkpoint_config=checkpoint_config, storage_path=storage)


class Data:
    def __init__(self):
        self.data = [0] * 500_000


def uses_data(config, data=None):
    data.data[101] = 2  # the trial's own copy
    train.report(dict(metric=len(data.data), hundred=data.data[100]))


@pytest.fixture(scope="module")
def with_data(storage):
    data = Data()
    data.data[100] = 1
    trials = tune.run(
        with_parameters(uses_data, data=data), num_samples=2, storage_path=storage, verbose=0
    ).trials
    return data, trials


def test_with_parameters_reaches_every_trial(with_data):
    _, trials = with_data
    assert [t.last_result["metric"] for t in trials] == [500_000, 500_000]
    assert [t.last_result["hundred"] for t in trials] == [1, 1]


def test_with_parameters_changes_in_a_trial_stay_there(with_data):
    data, _ = with_data
    assert data.data[101] == 0


def test_a_trial_is_named_after_the_wrapped_function(with_data):
    _, trials = with_data
    assert str(trials[0]).startswith("uses_data_")


def extra_four(config, extra=4):
    train.report(dict(metric=extra))


def extra_five(config, extra=5):
    train.report(dict(metric=extra))


def test_two_with_parameters_runs_in_one_script(storage):
    first = tune.with_parameters(extra_four, extra=8)
    second = tune.with_parameters(extra_five, extra=9)
    out1 = tune.run(first, metric="metric", mode="max", storage_path=storage, verbose=0)
    out2 = tune.run(second, metric="metric", mode="max", storage_path=storage, verbose=0)
    assert out1.best_result["metric"] == 8
    assert out2.best_result["metric"] == 9


def returns_number(config):
    return config["a"]


def returns_dict(config):
    return {"m": config["a"]}


def yields_numbers(config):
    for i in range(3):
        yield config["a"] + i


def yields_dicts(config):
    for i in range(3):
        yield {"m": config["a"] + i}


@pytest.mark.parametrize(
    "trainable, key, added",
    [
        (returns_number, DEFAULT_METRIC, 0),
        (returns_dict, "m", 0),
        (yields_numbers, DEFAULT_METRIC, 2),
        (yields_dicts, "m", 2),
    ],
)
def test_returned_and_yielded_values_are_results(storage, trainable, key, added):
    trial_1, trial_2 = tune.run(
        trainable, config={"a": tune.grid_search([4, 8])}, storage_path=storage, verbose=0
    ).trials
    assert trial_1.last_result[key] == 4 + added
    assert trial_2.last_result[key] == 8 + added


# -- ResultGrid (test_result_grid.py) ------------------------------------------------------
def peaks(config):
    peak = [0, config["id"], -config["id"], 0]
    for i in range(4):
        report_with_checkpoint({"iter": i, "score": config["id"], "peak": peak[i]})


@pytest.fixture(scope="module")
def grid(storage):
    return tune.Tuner(
        peaks,
        param_space={"id": tune.grid_search([1, 2])},
        run_config=RunConfig(
            storage_path=storage,
            name="result_grid_api",
            verbose=0,
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    ).fit()


def test_result_grid_length_and_experiment_path(grid, storage):
    assert len(grid) == 2
    assert grid.experiment_path == os.path.join(storage, "result_grid_api")


def test_get_best_result_needs_a_metric_and_a_mode(grid):
    with pytest.raises(ValueError):
        grid.get_best_result()
    with pytest.raises(ValueError):
        grid.get_best_result(metric="score")
    assert grid.get_best_result(metric="score", mode="max").config["id"] == 2


def test_get_dataframe_holds_last_or_best_results(grid):
    assert grid.get_dataframe()["iter"].to_list() == [3, 3]
    assert grid.get_dataframe(filter_metric="peak", filter_mode="max")["iter"].to_list() == [1, 1]
    assert grid.get_dataframe(filter_metric="peak", filter_mode="min")["iter"].to_list() == [2, 2]


def test_a_grid_without_errors(grid):
    assert not grid.errors
    assert grid.num_errors == 0
    assert grid.num_terminated == 2
    assert all(result.error is None for result in grid)


def test_each_result_keeps_its_last_and_best_checkpoints(grid):
    for result in grid:
        assert load_metrics(result.checkpoint)["iter"] == 3
        assert {metrics["iter"] for _, metrics in result.best_checkpoints} == {2, 3}
        assert {load_metrics(c)["iter"] for c, _ in result.best_checkpoints} == {2, 3}


def test_a_result_grid_from_tune_run_without_a_checkpoint(storage):
    analysis = tune.run(does_nothing, storage_path=storage, verbose=0)
    assert ResultGrid(analysis)[0].checkpoint is None


def test_result_grid_dataframe_of_nested_configs(storage):
    def reports_three(config):
        for factor in (1, 4, 3):
            train.report(dict(metric=config["nested"]["param"] * factor))

    analysis = tune.run(
        reports_three,
        config={"nested": {"param": tune.grid_search([1, 2])}},
        storage_path=storage,
        verbose=0,
    )
    grid = ResultGrid(analysis)
    assert len(grid) == 2
    assert sorted(grid.get_dataframe()["metric"]) == [3, 6]
    assert sorted(grid.get_dataframe(filter_metric="metric", filter_mode="max")["metric"]) == [4, 8]
    frame = grid.get_dataframe(filter_metric="metric", filter_mode="min")
    assert sorted(frame["metric"]) == [1, 2]
    assert sorted(frame["config/nested/param"]) == [1, 2]


def test_errors_and_terminated_are_counted(storage):
    def fails_once(config):
        if config["id"] == 1:
            raise RuntimeError()
        train.report({"score": config["id"]})

    grid = tune.Tuner(
        fails_once,
        param_space={"id": tune.grid_search([1, 2])},
        run_config=RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 1
    assert grid.num_terminated == 1
    assert isinstance(grid.errors[0], RuntimeError)


# -- ExperimentAnalysis (test_experiment_analysis.py) --------------------------------------
def rises_and_falls(config):
    n = config["id"]
    for i in range(1, 8):
        metrics = {
            "ascending": i * n,
            "descending": -i * n,
            "maybe_nan": 42 if i == 4 else np.nan,
            "iter": i,
        }
        report_with_checkpoint(metrics, checkpoint=i <= 5)  # the last two: no checkpoint


@pytest.fixture(scope="module")
def analysis(storage):
    return tune.run(
        rises_and_falls,
        config={"id": tune.grid_search([1, 2, 3])},
        metric="ascending",
        mode="max",
        storage_path=storage,
        name="experiment_analysis",
        verbose=0,
    )


def trial_with_id(analysis, n):
    return next(t for t in analysis.trials if t.config["id"] == n)


def test_trial_dataframes_by_trial_id(analysis):
    frames = analysis.fetch_trial_dataframes()
    assert set(frames) == {t.trial_id for t in analysis.trials}
    for frame in frames.values():
        assert np.all(frame["ascending"].to_numpy() == np.arange(1, 8) * frame["config/id"])
        assert np.all(frame["descending"].to_numpy() == np.arange(-1, -8, -1) * frame["config/id"])


def test_get_all_configs_by_trial_id(analysis):
    configs = analysis.get_all_configs()
    assert set(configs) == {t.trial_id for t in analysis.trials}
    for trial in analysis.trials:
        assert configs[trial.trial_id] == trial.config


def test_best_properties_follow_the_run_metric(analysis):
    best = trial_with_id(analysis, 3)
    assert analysis.best_trial == best
    assert analysis.best_config == best.config
    assert analysis.best_checkpoint == best.checkpoint
    frame = analysis.trial_dataframes[best.trial_id]
    for column in ("ascending", "maybe_nan", "trial_id"):
        assert analysis.best_dataframe[column].fillna(-1).equals(frame[column].fillna(-1))
    row = analysis.best_result_df.iloc[0].to_dict()
    assert row["ascending"] == flatten_dict(best.last_result, delimiter="/")["ascending"]
    assert len(analysis.results) == 3
    assert len(analysis.results_df) == 3


def test_get_best_config_and_trial_skip_nan(analysis):
    assert analysis.get_best_config()["id"] == 3
    assert analysis.get_best_config(metric="descending", mode="max")["id"] == 1
    assert not analysis.get_best_config(metric="maybe_nan", scope="last")
    assert analysis.get_best_trial().config == analysis.get_best_config()
    assert not analysis.get_best_trial(metric="maybe_nan")
    assert analysis.get_best_trial(metric="maybe_nan", filter_nan_and_inf=False)


def test_get_best_checkpoint_ranks_the_checkpointed_results(analysis):
    best = analysis.get_best_trial()
    assert load_metrics(analysis.get_best_checkpoint(best))["ascending"] == 15
    by_descending = analysis.get_best_checkpoint(best, metric="descending", mode="max")
    assert load_metrics(by_descending)["descending"] == -3
    assert load_metrics(analysis.get_best_checkpoint(best, metric="maybe_nan"))["maybe_nan"] == 42


def test_get_last_checkpoint(analysis):
    assert load_metrics(analysis.get_last_checkpoint())["iter"] == 5
    first = trial_with_id(analysis, 1)
    assert load_metrics(analysis.get_last_checkpoint(trial=first))["ascending"] == 5


def test_an_analysis_pickles(analysis, tmp_path):
    path = tmp_path / "analysis.pkl"
    with open(path, "wb") as f:
        pickle.dump(analysis, f)
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert loaded.get_best_trial(metric="ascending", mode="max").config["id"] == 3


def test_an_analysis_from_the_experiment_path(analysis):
    loaded = ExperimentAnalysis(analysis.experiment_path)
    assert loaded.get_best_trial(metric="ascending", mode="max").config["id"] == 3


def test_best_config_of_an_all_nan_experiment_is_none(storage):
    nan_analysis = tune.run(
        lambda config: np.nan,
        stop={"training_iteration": 1},
        num_samples=2,
        storage_path=storage,
        verbose=0,
    )
    assert nan_analysis.get_best_config("episode_reward_mean", mode="max") is None


def test_best_checkpoint_leaves_out_a_nan_metric(storage):
    def loss_nan_first(config):
        for i in range(config["steps"]):
            report_with_checkpoint({"loss": float("nan") if i == 0 else i})

    result = tune.run(loss_nan_first, config={"steps": 3}, storage_path=storage, verbose=0)
    best = result.get_best_trial("loss", mode="min")
    assert load_metrics(result.get_best_checkpoint(best, "loss", mode="min")) == {"loss": 1}


def test_best_logdir_and_result_frames(storage):
    def counts_from_base(config):
        for i in range(4):
            report_with_checkpoint({"res": config["base"] + i})

    result = tune.run(
        counts_from_base,
        config={"base": tune.grid_search([100, 200, 300])},
        metric="res",
        mode="max",
        storage_path=storage,
        verbose=0,
    )
    trials = result.trials
    assert result.best_trial == trials[2]
    assert result.best_logdir == trials[2].local_path
    assert result.best_checkpoint.path == trials[2].checkpoint.path
    assert all(result.best_dataframe["trial_id"] == trials[2].trial_id)
    assert result.results_df.loc[trials[2].trial_id, "res"] == 303
    assert result.best_result_df.loc[trials[2].trial_id, "res"] == 303


def test_dataframe_best_ever_or_last_result(storage):
    def losses(config):
        for loss in [9, 7, 5] if config["var"] == 1 else [10, 4, 10]:
            train.report(dict(loss=loss))

    result = tune.run(
        losses,
        config={"var": tune.grid_search([1, 2])},
        metric="loss",
        mode="min",
        storage_path=storage,
        verbose=0,
    )
    assert result.best_config["var"] == 1
    with pytest.raises(ValueError):
        result.dataframe(mode="max")
    frame = result.dataframe(metric="loss", mode="min")  # the lowest ever seen
    assert frame[frame.loss == frame.loss.min()]["config/var"].values[0] == 2
    for frame in (result.dataframe(metric="loss"), result.dataframe()):  # the last results
        assert frame[frame.loss == frame.loss.min()]["config/var"].values[0] == 1


# -- searchers (test_searchers.py) -------------------------------------------------------
def invalid_values(config):
    value = config["report"]
    if value > 4:
        return float("inf")
    if value > 3:
        return float("-inf")
    if value > 2:
        return np.nan
    return float(value) or 0.1


@pytest.mark.parametrize(
    "make", [lambda: HyperOptSearch(random_state_seed=1234), lambda: OptunaSearch(seed=1234)]
)
def test_searchers_pass_over_nan_and_infinite_results(storage, make):
    out = tune.run(
        invalid_values,
        search_alg=make(),
        config={"report": tune.uniform(0.0, 5.0)},
        metric="_metric",
        mode="max",
        num_samples=8,
        storage_path=storage,
        verbose=0,
    )
    assert out.best_trial.config["report"] <= 2.0


def test_optuna_results_after_completion_are_ignored():
    searcher = OptunaSearch(
        space=OptunaSearch.convert_search_space({"report": tune.uniform(0.0, 5.0)}),
        metric="metric",
        mode="max",
    )
    searcher.suggest("trial_1")
    searcher.on_trial_result("trial_1", {"training_iteration": 1, "metric": 1})
    searcher.on_trial_complete("trial_1", {"training_iteration": 2, "metric": 1})
    searcher.on_trial_result("trial_1", {"training_iteration": 3, "metric": 1})
    searcher.on_trial_complete("trial_1", {"training_iteration": 4, "metric": 1})


def reports_its_value(config):
    train.report({"metric": config["report"]})


def test_optuna_adds_evaluated_points_and_trials(storage):
    space = {"report": tune.uniform(0.0, 5.0)}
    searcher = OptunaSearch(
        space=space,
        metric="metric",
        mode="max",
        points_to_evaluate=[{"report": 1.0}],
        evaluated_rewards=[1.0],
    )
    searcher.suggest("0")
    searcher = OptunaSearch(space=space, metric="metric", mode="max")
    point = {"report": 1.0}
    searcher.add_evaluated_point(point, 1.0, intermediate_values=[0.8, 0.9])
    searcher.add_evaluated_point(point, 1.0, intermediate_values=[0.8, 0.9], error=True)
    searcher.add_evaluated_point(point, 1.0, intermediate_values=[0.8, 0.9], pruned=True)
    assert searcher.suggest("1")["report"] is not None
    done = tune.run(reports_its_value, config=space, num_samples=2, storage_path=storage, verbose=0)
    for evaluated in (done, done.trials, done.trials[0]):
        fresh = copy.deepcopy(OptunaSearch(space=space, metric="metric", mode="max"))
        fresh.add_evaluated_trials(evaluated, "metric")
        assert 0.0 <= fresh.suggest("1")["report"] <= 5.0


@pytest.mark.parametrize("searcher_class", [OptunaSearch, HyperOptSearch])
def test_searcher_save_and_restore_mid_run(tmp_path, searcher_class):
    path = str(tmp_path / "checkpoint.pkl")
    space = {"a": tune.uniform(0.0, 5.0)}
    searcher = searcher_class(space=space, metric="metric", mode="max")
    searcher.suggest("1")
    searcher.suggest("2")
    searcher.on_trial_complete("1", {"metric": 1, "config/a": 1.0, "time_total_s": 1})
    searcher.save(path)
    restored = searcher_class(space=space, metric="metric", mode="max")
    restored.restore(path)
    restored.on_trial_complete("2", {"metric": 1, "config/a": 1.0, "time_total_s": 1})
    assert 0.0 <= restored.suggest("3")["a"] <= 5.0
    restored.on_trial_complete("3", {"metric": 1, "config/a": 1.0, "time_total_s": 1})


# -- PopulationBasedTraining (test_trial_scheduler_pbt.py) ---------------------------------
def accuracy_from_checkpoint(config):
    iteration = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with (
            checkpoint.as_directory() as folder,
            open(os.path.join(folder, "state.pkl"), "rb") as f,
        ):
            _, iteration = pickle.load(f)
    a = config["a"]  # the new value after an exploit
    while True:
        iteration += 1
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.pkl"), "wb") as f:
                pickle.dump((a, iteration), f)
            train.report(
                {"mean_accuracy": iteration + a, "a": a},
                checkpoint=Checkpoint.from_directory(folder),
            )


@pytest.mark.parametrize("values, best", [([10, 20, 40], 43), ([30, 20, 10], 33)])
def test_synchronous_pbt_ends_every_trial_on_the_best(storage, values, best):
    scheduler = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="mean_accuracy",
        mode="max",
        perturbation_interval=1,
        hyperparam_mutations={"c": lambda: 1},
        synch=True,
    )
    result = tune.run(
        accuracy_from_checkpoint,
        config={"a": tune.grid_search(values), "c": 1},
        fail_fast=True,
        scheduler=scheduler,
        stop={"training_iteration": 3},
        storage_path=storage,
        verbose=0,
    )
    frame = result.dataframe(metric="mean_accuracy", mode="max")
    assert set(frame["mean_accuracy"]) == {best}
