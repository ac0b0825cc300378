"""Ray Tune's experiments API: `tune.register_trainable` and trainables given by name,
`tune.Experiment` and `tune.run_experiments`, as Ray's test_run_experiment.py and API
reference use them (Ray form, ported at collection)."""

import datetime
import os

import pytest
from ray import train, tune
from ray.train import CheckpointConfig
from ray.tune import Callback, Trainable, TuneError, register_trainable, run_experiments
from ray.tune.experiment import Experiment, Trial
from ray.tune.registry import register_trainable as registry_register_trainable
from ray.tune.result import TIMESTEPS_TOTAL


def count_to_99(config):
    for i in range(100):
        train.report({"timesteps_total": i})


class OneStep(Trainable):
    def step(self):
        return {"timesteps_this_iter": 1, "done": True}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "checkpoint"), "w") as f:
            f.write("OK")


def scaled(config):
    for step in range(1, 10):
        train.report({"score": config["a"] * step})


def broken(config):
    raise RuntimeError("this trainable fails")


class StartCounter(Callback):
    def __init__(self):
        self.started = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started.append(trial.trial_id)


@pytest.fixture(scope="module", autouse=True)
def home(tmp_path_factory):
    """Experiments without a storage path go under ~ (~/ray_results in Ray): a fresh one."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("home")
        patch.setenv("HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def dict_trials():
    register_trainable("f1", count_to_99)
    return run_experiments({"foo": {"run": "f1"}, "bar": {"run": "f1"}}, verbose=0)


def test_dict_of_specs_runs_every_experiment(dict_trials):
    assert len(dict_trials) == 2
    for trial in dict_trials:
        assert trial.status == Trial.TERMINATED
        assert trial.last_result[TIMESTEPS_TOTAL] == 99


def test_trials_come_back_in_experiment_order_and_take_the_registered_name(dict_trials):
    assert [os.path.basename(os.path.dirname(os.path.dirname(t.path))) for t in dict_trials] == [
        "foo",
        "bar",
    ]
    for trial in dict_trials:
        assert trial.trainable_name == "f1"
        assert str(trial) == f"f1_{trial.trial_id}"


def test_experiment_object(tmp_path):
    register_trainable("f1", count_to_99)
    exp1 = Experiment(**{"name": "foo", "run": "f1", "storage_path": str(tmp_path)})
    [trial] = run_experiments(exp1, verbose=0)
    assert trial.status == Trial.TERMINATED
    assert trial.last_result[TIMESTEPS_TOTAL] == 99
    assert trial.path.startswith(os.path.join(str(tmp_path), "foo"))


def test_experiment_list(tmp_path):
    register_trainable("f1", count_to_99)
    exp1 = Experiment(**{"name": "foo", "run": "f1", "storage_path": str(tmp_path)})
    exp2 = Experiment(**{"name": "bar", "run": "f1", "storage_path": str(tmp_path)})
    trials = run_experiments([exp1, exp2], verbose=0)
    assert len(trials) == 2
    for trial in trials:
        assert trial.status == Trial.TERMINATED
        assert trial.last_result[TIMESTEPS_TOTAL] == 99


def test_function_and_class_given_directly_are_registered():
    trials = run_experiments(
        {"foo": {"run": count_to_99}, "bar": {"run": OneStep, "resources_per_trial": {"cpu": 1}}},
        verbose=0,
    )
    assert [t.status for t in trials] == [Trial.TERMINATED, Trial.TERMINATED]
    assert [t.trainable_name for t in trials] == ["count_to_99", "OneStep"]
    assert trials[1].placement_group_factory.required_resources["CPU"] == 1


def test_checkpoint_at_end():
    trials = run_experiments(
        {"foo": {"run": OneStep, "checkpoint_config": CheckpointConfig(checkpoint_at_end=True)}},
        verbose=0,
    )
    for trial in trials:
        assert trial.status == Trial.TERMINATED
        assert trial.checkpoint is not None
        assert os.path.exists(os.path.join(trial.checkpoint.path, "checkpoint"))


def test_spec_takes_the_older_checkpoint_keys():
    # Deliberate difference: Ray 2.x refuses tune.run's older checkpoint arguments in a
    # spec; tunefleet folds them into checkpoint_config as tune.run does.
    [trial] = run_experiments({"foo": {"run": OneStep, "checkpoint_at_end": True}}, verbose=0)
    assert trial.checkpoint is not None


def test_custom_trial_string():
    [trial] = run_experiments(
        {
            "foo": {
                "run": OneStep,
                "stop": {"training_iteration": 1},
                "trial_name_creator": lambda t: f"{t.trainable_name}_{t.trial_id}_321",
            }
        },
        verbose=0,
    )
    assert str(trial) == f"{trial.trainable_name}_{trial.trial_id}_321"


def test_spec_config_stop_num_samples_and_callbacks(tmp_path):
    counter = StartCounter()
    trials = run_experiments(
        {
            "grid": {
                "run": scaled,
                "config": {"a": tune.grid_search([1, 2])},
                "stop": {"training_iteration": 2},
                "num_samples": 1,
                "storage_path": str(tmp_path),
            },
            "single": {"run": scaled, "config": {"a": 5}, "storage_path": str(tmp_path)},
        },
        callbacks=[counter],
        verbose=0,
    )
    assert [t.config["a"] for t in trials] == [1, 2, 5]
    assert [t.last_result["training_iteration"] for t in trials] == [2, 2, 9]
    assert trials[1].last_result["score"] == 4
    assert counter.started == [t.trial_id for t in trials]


def test_registered_name_in_tuner_and_tune_run(tmp_path):
    registry_register_trainable("my_trainable", scaled)
    tuner = tune.Tuner(
        "my_trainable",
        param_space={"a": 3},
        run_config=train.RunConfig(storage_path=str(tmp_path), name="by_name", verbose=0),
    )
    [result] = tuner.fit()
    assert result.metrics["score"] == 27
    analysis = tune.run(
        "my_trainable", config={"a": 2}, storage_path=str(tmp_path), name="run_by_name", verbose=0
    )
    [trial] = analysis.trials
    assert trial.trainable_name == "my_trainable"
    assert trial.last_result["score"] == 18


def test_registering_a_name_again_replaces_it(tmp_path):
    register_trainable("again", broken)
    register_trainable("again", scaled)
    [trial] = run_experiments(
        {"again": {"run": "again", "config": {"a": 1}, "storage_path": str(tmp_path)}}, verbose=0
    )
    assert trial.status == Trial.TERMINATED


def test_failed_trial_raises_after_all_experiments_ran(tmp_path):
    counter = StartCounter()
    with pytest.raises(TuneError):
        run_experiments(
            {
                "bad": {"run": broken, "storage_path": str(tmp_path)},
                "good": {"run": scaled, "config": {"a": 1}, "storage_path": str(tmp_path)},
            },
            callbacks=[counter],
            verbose=0,
        )
    assert len(counter.started) == 2
    trials = run_experiments(
        {"bad": {"run": broken, "storage_path": str(tmp_path)}},
        raise_on_failed_trial=False,
        verbose=0,
    )
    assert [t.status for t in trials] == [Trial.ERROR]


def test_from_json():
    exp = Experiment.from_json(
        "exp",
        {
            "run": scaled,
            "stop": {"training_iteration": 3},
            "config": {"a": 1},
            "num_samples": 2,
            "time_budget_s": datetime.timedelta(seconds=30),
        },
    )
    assert exp.name == "exp"
    assert exp.spec["run"] == "scaled"
    assert exp.spec["config"] == {"a": 1}
    assert exp.public_spec == {
        "stop": {"training_iteration": 3},
        "num_samples": 2,
        "time_budget_s": 30.0,
    }
    with pytest.raises(TuneError, match="run"):
        Experiment.from_json("exp", {"config": {}})
    with pytest.raises(TuneError, match=r"'stopp'.*'stop'"):
        Experiment.from_json("exp", {"run": scaled, "stopp": {}})


def test_experiment_name_defaults_to_the_trainable():
    assert Experiment(None, scaled).name == "scaled"
    register_trainable("named", scaled)
    assert Experiment("", "named").name == "named"
    assert Experiment.get_trainable_name(OneStep) == "OneStep"
    assert Experiment.register_if_needed("named") == "named"


def test_unknown_name_is_an_error_listing_registered_names():
    register_trainable("f1", count_to_99)
    with pytest.raises(TuneError, match=r"'not_registered'.*'f1'"):
        run_experiments({"foo": {"run": "not_registered"}})
    with pytest.raises(TuneError, match="'not_registered'"):
        tune.Tuner("not_registered")
    with pytest.raises(TuneError, match="'not_registered'"):
        tune.run("not_registered")


def test_register_trainable_refuses_bad_input():
    with pytest.raises(TypeError, match="42"):
        register_trainable(42, scaled)
    with pytest.raises(TypeError, match="''"):
        register_trainable("", scaled)
    with pytest.raises(TypeError, match="not int"):
        register_trainable("x", 42)

    class NotATrainable:
        pass

    with pytest.raises(TypeError, match=r"NotATrainable.*tune.Trainable"):
        register_trainable("x", NotATrainable)


def test_bad_experiments_are_refused():
    with pytest.raises(TuneError, match="42"):
        run_experiments(42)
    with pytest.raises(TuneError, match=r"experiments\[0\]"):
        run_experiments([{"run": scaled}])
    with pytest.raises(TypeError, match="concurrnt"):
        run_experiments({"foo": {"run": scaled}}, concurrnt=True)
    with pytest.raises(ValueError, match="checkpoint_at_end"):
        # as in Ray: a function trainable saves the checkpoints it reports
        Experiment("foo", scaled, checkpoint_config=CheckpointConfig(checkpoint_at_end=True))
    with pytest.raises(TypeError, match="run_experiments"):
        tune.run(Experiment("foo", scaled))


def test_export_formats_and_restore_are_refused_with_what_to_write():
    # Deliberate difference, as in tune.run: export_formats / restore are refused.
    with pytest.raises(ValueError, match="checkpoint"):
        Experiment("foo", OneStep, export_formats=["model"])
    with pytest.raises(ValueError, match="restore"):
        Experiment("foo", OneStep, restore="/some/checkpoint")
