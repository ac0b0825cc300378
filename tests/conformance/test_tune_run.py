"""Ray Tune's legacy entry point, `tune.run`, with its documented keyword arguments and
the `ExperimentAnalysis` it returns (Ray form, ported at collection)."""

import datetime
import json
import os
from pathlib import Path

import pytest
from ray import train, tune
from ray.train import CheckpointConfig, SyncConfig
from ray.tune import Callback, ExperimentAnalysis, TuneError


def objective(config):
    for step in range(1, 4):
        train.report({"score": config["a"] * step, "step": step})


class Counter(tune.Trainable):
    def setup(self, config):
        self.count = 0

    def step(self):
        self.count += 1
        return {"value": self.count * self.config["rate"]}

    def save_checkpoint(self, checkpoint_dir):
        Path(checkpoint_dir, "count.json").write_text(json.dumps(self.count))

    def load_checkpoint(self, checkpoint_dir):
        self.count = json.loads(Path(checkpoint_dir, "count.json").read_text())


class Names(Callback):
    def __init__(self):
        self.started = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started.append(trial.trial_id)


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def analysis(storage):
    return tune.run(
        objective,
        config={"a": tune.grid_search([1, 2, 3])},
        metric="score",
        mode="max",
        name="grid",
        storage_path=storage,
        verbose=0,
        trial_name_creator=lambda trial: f"t_{trial.config['a']}",
        trial_dirname_creator=lambda trial: f"dir_{trial.config['a']}",
        max_concurrent_trials=2,
    )


def test_returns_experiment_analysis(analysis):
    assert isinstance(analysis, ExperimentAnalysis)


def test_one_trial_per_grid_point(analysis):
    assert sorted(t.config["a"] for t in analysis.trials) == [1, 2, 3]


def test_best_config_uses_metric_and_mode(analysis):
    assert analysis.best_config == {"a": 3}


def test_best_result_is_the_last_result_of_the_best_trial(analysis):
    assert analysis.best_result["score"] == 9
    assert analysis.best_result["training_iteration"] == 3


def test_best_trial(analysis):
    assert analysis.best_trial.config == {"a": 3}


def test_get_best_config_with_other_mode(analysis):
    assert analysis.get_best_config(metric="score", mode="min") == {"a": 1}


def test_results_df_has_a_row_per_trial(analysis):
    assert len(analysis.results_df) == 3


def test_trial_name_creator(analysis):
    assert sorted(str(t) for t in analysis.trials) == ["t_1", "t_2", "t_3"]


def test_trial_dirname_creator(analysis):
    # Deliberate difference: the trial id is appended, so two trials never share a folder.
    for trial in analysis.trials:
        assert os.path.basename(trial.path) == f"dir_{trial.config['a']}_{trial.trial_id}"


def test_experiment_is_stored_under_storage_path_and_name(analysis, storage):
    assert os.path.dirname(analysis.experiment_path) == storage
    assert os.path.basename(analysis.experiment_path).startswith("grid")


@pytest.fixture(scope="module")
def checkpointed(storage):
    return tune.run(
        Counter,
        config={"rate": tune.grid_search([1, 2])},
        stop={"training_iteration": 5},
        checkpoint_freq=2,
        checkpoint_at_end=True,
        keep_checkpoints_num=2,
        checkpoint_score_attr="value",
        metric="value",
        mode="max",
        storage_path=storage,
        verbose=0,
        reuse_actors=False,
    )


def test_stop_dict(checkpointed):
    assert [t.last_result["training_iteration"] for t in checkpointed.trials] == [5, 5]


def test_checkpoint_freq_at_end_and_keep_checkpoints_num(checkpointed):
    for trial in checkpointed.trials:
        iterations = [
            p for p, _ in checkpointed.get_trial_checkpoints_paths(trial, "training_iteration")
        ]
        assert len(iterations) == 2  # of 2, 4 and 5: the two with the highest value


def test_best_checkpoint(checkpointed):
    with checkpointed.best_checkpoint.as_directory() as d:
        assert json.loads(Path(d, "count.json").read_text()) == 5


def test_get_best_checkpoint_of_a_trial(checkpointed):
    trial = checkpointed.get_best_trial("value", "max")
    checkpoint = checkpointed.get_best_checkpoint(trial, "value", "max")
    with checkpoint.as_directory() as d:
        assert json.loads(Path(d, "count.json").read_text()) == 5


def test_checkpoint_score_attr_min_prefix(storage):
    result = tune.run(
        Counter,
        config={"rate": 1},
        stop={"training_iteration": 4},
        checkpoint_freq=1,
        keep_checkpoints_num=1,
        checkpoint_score_attr="min-value",
        storage_path=storage,
        verbose=0,
    )
    (trial,) = result.trials
    values = [v for _, v in result.get_trial_checkpoints_paths(trial, "value")]
    assert 1 in values  # the lowest value is kept (and the latest, to resume from)


def test_checkpoint_config_argument(storage):
    result = tune.run(
        Counter,
        config={"rate": 1},
        stop={"training_iteration": 3},
        checkpoint_config=CheckpointConfig(checkpoint_frequency=1, num_to_keep=1),
        storage_path=storage,
        verbose=0,
    )
    (trial,) = result.trials
    assert [v for _, v in result.get_trial_checkpoints_paths(trial, "training_iteration")] == [3]


def test_callbacks_num_samples_and_resources(storage):
    names = Names()
    result = tune.run(
        objective,
        config={"a": tune.uniform(0, 1)},
        num_samples=3,
        resources_per_trial={"cpu": 1},
        callbacks=[names],
        storage_path=storage,
        verbose=0,
        time_budget_s=datetime.timedelta(minutes=5),
        sync_config=SyncConfig(),
        log_to_file=True,
    )
    assert len(result.trials) == 3
    assert sorted(names.started) == sorted(t.trial_id for t in result.trials)
    assert all(0 <= t.config["a"] <= 1 for t in result.trials)


def failing(config):
    train.report({"x": 1})
    raise ValueError("boom")


def test_raise_on_failed_trial(storage):
    with pytest.raises(TuneError):
        tune.run(failing, storage_path=storage, verbose=0)


def test_raise_on_failed_trial_false_returns_analysis(storage):
    result = tune.run(failing, storage_path=storage, verbose=0, raise_on_failed_trial=False)
    assert result.trials[0].status == "ERROR"


def test_max_failures_retries(storage, tmp_path):
    marker = tmp_path / "failed"

    def flaky(config):
        if not marker.exists():
            marker.touch()
            raise RuntimeError("first attempt fails")
        train.report({"ok": 1})

    result = tune.run(flaky, max_failures=1, storage_path=storage, verbose=0)
    assert result.trials[0].status == "TERMINATED"
    assert result.trials[0].last_result["ok"] == 1


def test_resume_auto_starts_then_continues(storage):
    first = tune.run(
        objective, config={"a": 1}, name="auto", storage_path=storage, resume="AUTO", verbose=0
    )
    again = tune.run(
        objective, config={"a": 1}, name="auto", storage_path=storage, resume="AUTO", verbose=0
    )
    assert first.experiment_path == again.experiment_path
    assert len(again.trials) == 1


def test_local_dir_is_storage_path(tmp_path):
    result = tune.run(objective, config={"a": 1}, local_dir=str(tmp_path), verbose=0)
    assert os.path.dirname(result.experiment_path) == str(tmp_path)


# -- what tunefleet refuses, with what to write instead (docs/from_ray_tune.md) ----------------


@pytest.mark.parametrize(
    "argument", ["restore", "export_formats", "resume_config", "chdir_to_trial_dir"]
)
def test_unsupported_arguments_are_refused_with_advice(argument):
    with pytest.raises(ValueError, match=argument):
        tune.run(objective, config={"a": 1}, verbose=0, **{argument: "x"})


def test_unknown_argument_suggests_the_close_one():
    with pytest.raises(TypeError, match="num_samples"):
        tune.run(objective, num_sample=2)


def test_searcher_given_by_name_is_refused():
    with pytest.raises(ValueError, match="search_alg"):
        tune.run(objective, search_alg="hyperopt", verbose=0)


def test_function_trainable_refuses_checkpoint_freq():
    with pytest.raises(ValueError, match="checkpoint_frequency"):
        tune.run(objective, checkpoint_freq=2, verbose=0)


def test_checkpoint_config_and_legacy_argument_disagreeing():
    with pytest.raises(ValueError, match="num_to_keep"):
        tune.run(
            Counter,
            checkpoint_config=CheckpointConfig(num_to_keep=3),
            keep_checkpoints_num=1,
            verbose=0,
        )


def test_with_parameters_without_keywords_is_the_same_trainable(storage):
    result = tune.run(
        tune.with_parameters(objective), config={"a": 2}, storage_path=storage, verbose=0
    )
    assert result.trials[0].last_result["score"] == 6
