"""Ray Tune's Class Trainable API (`tune.Trainable`), written as Ray Tune users write it:
`setup`, `step`, `save_checkpoint` / `load_checkpoint`, `reset_config` with
`reuse_actors`, `cleanup`, the trial's attributes, `done` in a step's result,
`tune.with_resources` and `default_resource_request`, and a Trainable used by hand.
"""

import json
import os

import pytest
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig
from ray.tune import PlacementGroupFactory


class Counter(tune.Trainable):
    """Counts up from config["start"]; done at config["until"]; state as a dict."""

    def setup(self, config):
        self.value = config["start"]
        self.setup_iteration = self.iteration
        config["start"] = "changed"  # a copy: self.config keeps the original
        with open(os.path.join(self.logdir, "setup.txt"), "w") as f:
            f.write(self.trial_id)

    def step(self):
        self.value += 1
        return {
            "value": self.value,
            "iteration_in_step": self.iteration,
            "training_iteration_in_step": self.training_iteration,
            "trial_id_in_step": self.trial_id,
            "trial_name_in_step": self.trial_name,
            "config_start": self.config["start"],
            "setup_iteration": self.setup_iteration,
            "done": self.value >= self.config["until"],
        }

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]

    def cleanup(self):
        with open(os.path.join(self.logdir, "cleanup.txt"), "w") as f:
            f.write("cleaned")


class FileState(tune.Trainable):
    """Writes its state to files and returns None; fails once at iteration 3."""

    def setup(self, config):
        self.value = 0
        self.loaded_from = None

    def step(self):
        self.value += 1
        if self.value == 3 and not os.path.exists(os.path.join(self.logdir, "failed")):
            open(os.path.join(self.logdir, "failed"), "w").close()
            raise RuntimeError("fails once")
        return {"value": self.value, "loaded_from": self.loaded_from}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump({"value": self.value}, f)

    def load_checkpoint(self, checkpoint_dir):
        self.loaded_from = "directory" if isinstance(checkpoint_dir, str) else "other"
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            self.value = json.load(f)["value"]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("class_trainables"))


@pytest.fixture(scope="module")
def counted(storage):
    results = tune.Tuner(
        Counter,
        param_space={"start": tune.grid_search([0, 10]), "until": 13},
        tune_config=tune.TuneConfig(metric="value", mode="max"),
        run_config=RunConfig(
            name="counted",
            storage_path=storage,
            stop={"training_iteration": 4},
            checkpoint_config=CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True),
            verbose=0,
        ),
    ).fit()
    return {r.config["start"]: r for r in results}


@pytest.fixture(scope="module")
def file_state(storage):
    results = tune.Tuner(
        FileState,
        run_config=RunConfig(
            name="file_state",
            storage_path=storage,
            stop={"training_iteration": 5},
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
            failure_config=FailureConfig(max_failures=1),
            verbose=0,
        ),
    ).fit()
    return results[0]


# -- step and its results -------------------------------------------------------------------------
def test_step_results_are_reported(counted):
    assert counted[0].metrics["value"] == 4
    assert list(counted[0].metrics_dataframe["value"]) == [1, 2, 3, 4]


def test_the_stop_condition_ends_the_trial(counted):
    assert counted[0].metrics["training_iteration"] == 4
    assert counted[0].error is None


def test_done_in_a_step_result_ends_the_trial(counted):
    result = counted[10]
    assert result.metrics["value"] == 13 and result.metrics["training_iteration"] == 3
    assert result.metrics["done"] is True


def test_train_fills_in_the_result_keys(counted):
    metrics = counted[0].metrics
    for key in ("training_iteration", "time_this_iter_s", "time_total_s", "timestamp"):
        assert key in metrics
    for key in ("trial_id", "pid", "time_since_restore", "iterations_since_restore", "done"):
        assert key in metrics


# -- what the instance knows ----------------------------------------------------------------------
def test_iteration_counts_the_steps_done_before_this_one(counted):
    df = counted[0].metrics_dataframe
    assert list(df["iteration_in_step"]) == [0, 1, 2, 3]
    assert list(df["training_iteration_in_step"]) == [0, 1, 2, 3]
    assert counted[0].metrics["setup_iteration"] == 0


def test_trial_id_and_name(counted):
    metrics = counted[0].metrics
    assert metrics["trial_id_in_step"] == metrics["trial_id"]
    assert metrics["trial_name_in_step"]


def test_setup_gets_a_copy_of_the_config(counted):
    assert counted[0].metrics["config_start"] == 0
    assert counted[0].config["start"] == 0


def test_logdir_is_the_trial_directory(counted):
    with open(os.path.join(counted[0].path, "setup.txt")) as f:
        assert f.read() == counted[0].metrics["trial_id"]


def test_cleanup_is_called_when_the_trial_ends(counted):
    assert all(os.path.exists(os.path.join(r.path, "cleanup.txt")) for r in counted.values())


# -- checkpoints ----------------------------------------------------------------------------------
def test_checkpoint_frequency_and_at_end(counted):
    assert counted[0].checkpoint is not None
    iterations = [it for _, it in _checkpoint_iterations(counted[0])]
    assert iterations == [2, 4]


def test_a_returned_dict_is_saved_with_the_checkpoint(counted):
    trainable = Counter({"start": 0, "until": 100})
    trainable.restore(counted[0].checkpoint)
    assert trainable.value == 4
    trainable.stop()


def test_at_end_after_done_too(counted):
    assert [it for _, it in _checkpoint_iterations(counted[10])] == [2, 3]


def test_a_failed_trial_restores_from_its_checkpoint_directory(file_state):
    assert file_state.error is None
    df = file_state.metrics_dataframe
    assert file_state.metrics["value"] == 5
    assert file_state.metrics["loaded_from"] == "directory"
    assert list(df["value"])[-3:] == [3, 4, 5]


def _checkpoint_iterations(result):
    return [(c, m["training_iteration"]) for c, m in result.best_checkpoints]


# -- reuse_actors and reset_config ----------------------------------------------------------------
class Resettable(tune.Trainable):
    def setup(self, config):
        self.setups = getattr(self, "setups", 0) + 1
        self.resets = 0
        self.factor = config["factor"]
        self.id_in_reset = None

    def step(self):
        return {
            "product": self.factor * 10,
            "resets": self.resets,
            "pid_seen": os.getpid(),
            "config_factor": self.config["factor"],
            "iteration_in_step": self.iteration,
            "id_seen_in_reset": self.id_in_reset,
            "done": True,
        }

    def reset_config(self, new_config):
        self.factor = new_config["factor"]
        self.resets += 1
        self.id_in_reset = self.trial_id  # Ray's reset gives the new identity first
        return True


@pytest.fixture(scope="module")
def reused(storage):
    return tune.Tuner(
        Resettable,
        param_space={"factor": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=RunConfig(name="reused", storage_path=storage, verbose=0),
    ).fit()


def test_reset_config_reconfigures_a_reused_instance(reused):
    by_factor = {r.config["factor"]: r.metrics for r in reused}
    assert [by_factor[f]["product"] for f in (1, 2, 3)] == [10, 20, 30]
    assert sorted(m["resets"] for m in by_factor.values()) == [0, 1, 2]


def test_a_reset_instance_sees_the_new_config_and_iteration_zero(reused):
    for result in reused:
        assert result.metrics["config_factor"] == result.config["factor"]
        assert result.metrics["iteration_in_step"] == 0


def test_reset_config_sees_the_new_trials_identity(reused):
    seen = [r.metrics["id_seen_in_reset"] for r in reused]
    assert sum(1 for s in seen if s is not None) == 2  # two of three trials reused it
    for result in reused:
        assert result.metrics["id_seen_in_reset"] in (None, result.metrics["trial_id"])


def test_without_reuse_actors_each_trial_gets_its_own_instance(storage):
    results = tune.Tuner(
        Resettable,
        param_space={"factor": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=RunConfig(name="not_reused", storage_path=storage, verbose=0),
    ).fit()
    assert [r.metrics["resets"] for r in results] == [0, 0]


def test_tune_run_does_not_reuse_a_class_trainable_by_default(storage):
    analysis = tune.run(
        Resettable,
        config={"factor": tune.grid_search([1, 2])},
        max_concurrent_trials=1,
        storage_path=storage,
        name="run_not_reused",
        verbose=0,
    )
    assert [t.last_result["resets"] for t in analysis.trials] == [0, 0]


# -- resources ------------------------------------------------------------------------------------
class ReportsResources(tune.Trainable):
    def step(self):
        return {"cpus": self.trial_resources.required_resources.get("CPU"), "done": True}


class AsksForResources(ReportsResources):
    @classmethod
    def default_resource_request(cls, config):
        return PlacementGroupFactory([{"CPU": config["cpus"]}])


def test_with_resources_on_a_class(storage):
    results = tune.Tuner(
        tune.with_resources(ReportsResources, {"cpu": 2}),
        run_config=RunConfig(name="with_resources", storage_path=storage, verbose=0),
    ).fit()
    assert results[0].metrics["cpus"] == 2


def test_default_resource_request(storage):
    results = tune.Tuner(
        AsksForResources,
        param_space={"cpus": 2},
        run_config=RunConfig(name="default_request", storage_path=storage, verbose=0),
    ).fit()
    assert results[0].metrics["cpus"] == 2


def test_the_base_class_asks_for_nothing():
    assert tune.Trainable.default_resource_request({}) is None


# -- used by hand, as in Ray Tune's debugging tips ------------------------------------------------
def test_train_save_restore_stop_by_hand(tmp_path):
    trainable = Counter({"start": 0, "until": 100})
    first = trainable.train()
    assert first["value"] == 1 and first["training_iteration"] == 1
    assert first["done"] is False and "time_this_iter_s" in first
    assert trainable.iteration == 1 and trainable.training_iteration == 1
    assert trainable.trial_id == "default"
    path = trainable.save(str(tmp_path / "ckpt"))
    trainable.train()
    trainable.restore(path)
    assert trainable.value == 1
    trainable.stop()
    assert os.path.exists(os.path.join(trainable.logdir, "cleanup.txt"))


def test_step_must_return_a_dict():
    class Bad(tune.Trainable):
        def step(self):
            return 1.0

    with pytest.raises(TypeError, match="step"):
        Bad().train()


def test_a_class_that_is_not_a_trainable_is_refused():
    class NotATrainable:
        pass

    with pytest.raises(TypeError, match="Trainable"):
        tune.Tuner(NotATrainable).fit()
