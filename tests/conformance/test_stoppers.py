"""Ray Tune's stoppers (user guide: "How to Define Stopping Criteria for a Ray Tune
Experiment"), called on their own as the API reference shows them, and in a few tiny
Tuner runs: a dict, a function, a Stopper object and a custom Stopper subclass."""

import datetime
import math
import pickle
import time
from unittest import mock

import pytest
from ray import train, tune
from ray.train import RunConfig
from ray.tune.stopper import (
    CombinedStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    Stopper,
    TimeoutStopper,
    TrialPlateauStopper,
)
from ray.tune.utils.mock_trainable import MyTrainableClass


class FakeClock:
    """Stands in for both time.time (Ray's clock) and time.monotonic (tunefleet's)."""

    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now

    def tick(self, seconds):
        self.now += seconds


@pytest.fixture
def clock():
    fake = FakeClock()
    with mock.patch.object(time, "time", fake), mock.patch.object(time, "monotonic", fake):
        yield fake


# -- stoppers on their own -------------------------------------------------------------------


def test_maximum_iteration_stopper_stops_each_trial_at_max_iter():
    stopper = MaximumIterationStopper(max_iter=3)
    assert [stopper("a", {}) for _ in range(3)] == [False, False, True]
    assert stopper("b", {}) is False  # counted per trial
    assert stopper.stop_all() is False


def test_trial_plateau_stopper_stops_a_flat_metric_after_the_grace_period():
    stopper = TrialPlateauStopper(metric="loss", std=0.01, num_results=3, grace_period=3)
    decisions = [stopper("t", {"loss": 0.5}) for _ in range(3)]
    assert decisions == [False, False, True]


def test_trial_plateau_stopper_keeps_a_moving_metric():
    stopper = TrialPlateauStopper(metric="loss", num_results=3, grace_period=3)
    assert not any(stopper("t", {"loss": float(i)}) for i in range(10))


def test_trial_plateau_stopper_positional_arguments():
    stopper = TrialPlateauStopper("loss", 0.01, 2, 2)
    assert [stopper("t", {"loss": 1.0}) for _ in range(2)] == [False, True]


def test_trial_plateau_stopper_waits_for_the_threshold():
    stopper = TrialPlateauStopper(
        metric="loss", num_results=2, grace_period=2, metric_threshold=0.1, mode="min"
    )
    assert not any(stopper("t", {"loss": 0.5}) for _ in range(5))  # flat, but not good enough
    assert [stopper("u", {"loss": 0.05}) for _ in range(2)] == [False, True]


def test_trial_plateau_stopper_threshold_needs_mode():
    with pytest.raises(ValueError):
        TrialPlateauStopper(metric="loss", metric_threshold=0.1)


def test_experiment_plateau_stopper_stops_all_when_the_top_values_are_flat():
    stopper = ExperimentPlateauStopper(metric="loss", std=0.001, top=3, mode="min", patience=0)
    for trial in ("a", "b"):
        stopper(trial, {"loss": 1.0})
    assert stopper.stop_all() is False  # only 2 of the top 3 values seen
    stopper("c", {"loss": 1.0})
    assert stopper.stop_all() is True


def test_experiment_plateau_stopper_mode_must_be_min_or_max():
    with pytest.raises(ValueError):
        ExperimentPlateauStopper(metric="loss", mode="best")


def test_timeout_stopper_stops_all_after_the_timeout(clock):
    stopper = TimeoutStopper(timeout=60)
    assert not stopper.stop_all()
    clock.tick(40)
    assert not stopper.stop_all()
    clock.tick(22)
    assert stopper.stop_all()


def test_timeout_stopper_takes_a_timedelta(clock):
    stopper = TimeoutStopper(datetime.timedelta(minutes=1))
    assert not stopper.stop_all()
    clock.tick(59)
    assert not stopper.stop_all()
    clock.tick(2)
    assert stopper.stop_all()


def test_timeout_stopper_never_stops_a_single_trial(clock):
    stopper = TimeoutStopper(1)
    stopper.stop_all()
    clock.tick(10)
    assert stopper("t", {}) is False


def test_timeout_stopper_does_not_count_the_time_it_spent_pickled(clock):
    stopper = TimeoutStopper(timeout=60)
    assert not stopper.stop_all()
    clock.tick(40)
    assert not stopper.stop_all()
    saved = pickle.dumps(stopper)
    clock.tick(200)  # e.g. the experiment was down before Tuner.restore
    restored = pickle.loads(saved)
    assert not restored.stop_all()
    clock.tick(10)
    assert not restored.stop_all()
    clock.tick(12)
    assert restored.stop_all()


def test_timeout_stopper_refuses_other_types():
    with pytest.raises(ValueError):
        TimeoutStopper("60")


def test_combined_stopper_stops_when_any_stops(clock):
    stopper = CombinedStopper(MaximumIterationStopper(max_iter=2), TimeoutStopper(60))
    assert [stopper("t", {}) for _ in range(2)] == [False, True]
    assert not stopper.stop_all()
    clock.tick(61)
    assert stopper.stop_all()


def test_function_stopper_calls_the_function():
    stopper = FunctionStopper(lambda trial_id, result: result["acc"] > 0.9)
    assert stopper("t", {"acc": 0.5}) is False
    assert stopper("t", {"acc": 0.95}) is True
    assert stopper.stop_all() is False


def test_function_stopper_is_valid_function():
    assert FunctionStopper.is_valid_function(lambda trial_id, result: False)
    assert not FunctionStopper.is_valid_function(MaximumIterationStopper(1))


def test_a_custom_stopper_subclass():
    class CustomStopper(Stopper):
        def __init__(self):
            self.should_stop = False

        def __call__(self, trial_id, result):
            if not self.should_stop and result["mean_accuracy"] >= 0.8:
                self.should_stop = True
            return self.should_stop

        def stop_all(self):
            return self.should_stop

    stopper = CustomStopper()
    assert stopper("t", {"mean_accuracy": 0.5}) is False and not stopper.stop_all()
    assert stopper("t", {"mean_accuracy": 0.9}) is True and stopper.stop_all()


# -- stoppers in an experiment ----------------------------------------------------------------


def accuracy_curve(config):
    for i in range(1, 50):
        train.report({"mean_accuracy": min(1.0, i * config["rate"])})


def run(tmp_path, trainable, stop, samples=1, space=None):
    tuner = tune.Tuner(
        trainable,
        param_space=space or {"rate": tune.grid_search([0.1, 0.25])},
        tune_config=tune.TuneConfig(num_samples=samples),
        run_config=RunConfig(stop=stop, storage_path=str(tmp_path), verbose=0),
    )
    return tuner.fit()


def test_a_dict_stops_each_trial_at_its_criterion(tmp_path):
    results = run(tmp_path, accuracy_curve, {"training_iteration": 3})
    assert [r.metrics["training_iteration"] for r in results] == [3, 3]


def test_a_function_stop(tmp_path):
    results = run(tmp_path, accuracy_curve, lambda trial_id, result: result["mean_accuracy"] >= 0.5)
    iterations = sorted(r.metrics["training_iteration"] for r in results)
    assert iterations == [2, 5]  # 0.25 * 2 and 0.1 * 5 reach 0.5


def test_a_stopper_object_and_my_trainable_class(tmp_path):
    results = run(
        tmp_path,
        MyTrainableClass,
        MaximumIterationStopper(max_iter=4),
        space={"width": tune.grid_search([1, 10]), "height": 5},
    )
    for result in results:
        width = result.config["width"]
        assert result.metrics["training_iteration"] == 4
        assert result.metrics["timesteps_total"] == 4
        expected = 5 * math.tanh(4 / width)
        assert math.isclose(result.metrics["episode_reward_mean"], expected)


def test_stop_all_ends_the_experiment(tmp_path):
    class StopAfterFirst(Stopper):
        def __init__(self):
            self.done = False

        def __call__(self, trial_id, result):
            self.done = self.done or result["training_iteration"] >= 2
            return self.done

        def stop_all(self):
            return self.done

    results = run(tmp_path, accuracy_curve, StopAfterFirst())
    # the stopped trial ended at once; the other stopped at once, or never started
    assert all((r.metrics or {}).get("training_iteration", 0) <= 2 for r in results)
