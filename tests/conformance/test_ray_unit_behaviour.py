"""Behaviours that Ray Tune's own unit tests (python/ray/tune/tests: test_tuner.py,
test_api.py, test_var.py, test_tuner_restore.py, test_tune_restore.py) assert through
the public API, each as a small Ray-form program of our own (ported at collection)."""

import os
import threading
from collections import Counter

import pytest
from ray import train, tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig
from ray.tune import Callback, Stopper, TuneError
from ray.tune.stopper import MaximumIterationStopper


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("unit"))


def reports_once(config):
    train.report({"score": 1})


def counts_to_ten(config):
    for i in range(10):
        train.report({"test": i})


# -- config resolution (test_var.py) -----------------------------------------------------
@pytest.fixture(scope="module")
def grid(storage):
    space = {
        "bar": tune.grid_search([True, False]),
        "foo": tune.grid_search([1, 2, 3]),
        "baz": "asd",
        "qux": tune.sample_from(lambda spec: 2 + 2),
        "y": tune.sample_from(lambda spec: spec.config.foo * 100),
        "z": tune.sample_from(lambda spec: spec.config.y + 1),
        "nest": {"a": {"b": tune.sample_from(lambda spec: 1)}},
        "w": tune.sample_from(lambda spec: spec.config.nest.a.b * 7),
    }
    return tune.Tuner(
        reports_once,
        param_space=space,
        run_config=RunConfig(name="grid", storage_path=storage, verbose=0),
    ).fit()


def test_two_grids_make_their_product(grid):
    assert len(grid) == 6
    assert grid.num_errors == 0


def test_the_first_grid_key_varies_fastest(grid):
    assert [(r.config["bar"], r.config["foo"]) for r in grid] == [
        (True, 1),
        (False, 1),
        (True, 2),
        (False, 2),
        (True, 3),
        (False, 3),
    ]


def test_constants_reach_every_config(grid):
    assert all(r.config["baz"] == "asd" for r in grid)


def test_sample_from_without_dependencies(grid):
    assert all(r.config["qux"] == 4 for r in grid)


def test_sample_from_reads_a_grid_value(grid):
    assert [r.config["y"] for r in grid] == [100, 100, 200, 200, 300, 300]


def test_sample_from_reads_another_sample_from(grid):
    assert all(r.config["z"] == r.config["y"] + 1 for r in grid)


def test_sample_from_in_a_nested_dict(grid):
    assert all(r.config["nest"] == {"a": {"b": 1}} for r in grid)


def test_sample_from_reads_a_nested_value_by_attribute(grid):
    assert all(r.config["w"] == 7 for r in grid)


def test_results_carry_the_experiment_tag(grid):
    tags = [r.metrics["experiment_tag"] for r in grid]
    assert [t.split("_", 1)[0] for t in tags] == ["0", "1", "2", "3", "4", "5"]
    assert "bar=True" in tags[0] and "foo=1" in tags[0]


def test_trial_ids_are_unique(grid):
    assert len({r.metrics["trial_id"] for r in grid}) == 6


def test_grid_dependent_on_sample_from(storage):
    space = {
        "x": tune.grid_search(
            [
                tune.sample_from(lambda spec: spec.config.y * 100),
                tune.sample_from(lambda spec: spec.config.y * 200),
            ]
        ),
        "y": tune.sample_from(lambda spec: 1),
    }
    results = tune.Tuner(
        reports_once, param_space=space, run_config=RunConfig(storage_path=storage, verbose=0)
    ).fit()
    assert [r.config for r in results] == [{"x": 100, "y": 1}, {"x": 200, "y": 1}]


def test_grid_times_num_samples(storage):
    results = tune.Tuner(
        reports_once,
        param_space={"a": tune.grid_search([1, 2]), "b": tune.choice([3])},
        tune_config=tune.TuneConfig(num_samples=3),
        run_config=RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert [r.config["a"] for r in results] == [1, 2, 1, 2, 1, 2]
    assert all(r.config["b"] == 3 for r in results)


def test_a_sample_from_that_depends_on_itself_is_refused(storage):
    # Ray: RecursiveDependencyError; tunefleet names the cycle (a ValueError)
    with pytest.raises(Exception, match="foo"):
        tune.Tuner(
            reports_once,
            param_space={"foo": tune.sample_from(lambda spec: spec.config.foo)},
            run_config=RunConfig(storage_path=storage, verbose=0),
        ).fit()


# -- stopping (test_api.py) ---------------------------------------------------------------
def nested_reports(config):
    for i in range(10):
        train.report({"test": {"test1": {"test2": i}}})


def test_nested_stop_criterion_with_slashes(storage):
    analysis = tune.run(
        nested_reports, stop={"test/test1/test2": 6}, storage_path=storage, verbose=0
    )
    last = analysis.trials[0].last_result
    assert last["training_iteration"] == 7
    assert last["test"]["test1"]["test2"] == 6


def test_a_stop_function_of_trial_id_and_result(storage):
    def stop(trial_id, result):
        return result["test"] > 6

    [trial] = tune.run(counts_to_ten, stop=stop, storage_path=storage, verbose=0).trials
    assert trial.last_result["training_iteration"] == 8


def test_a_bound_method_as_stop(storage):
    class StopClass:
        def stop(self, trial_id, result):
            return result["test"] > 6

    [trial] = tune.run(counts_to_ten, stop=StopClass().stop, storage_path=storage, verbose=0).trials
    assert trial.last_result["training_iteration"] == 8


def test_a_stopper_object(storage):
    [trial] = tune.run(
        counts_to_ten, stop=MaximumIterationStopper(max_iter=6), storage_path=storage, verbose=0
    ).trials
    assert trial.last_result["training_iteration"] == 6


def test_stop_all_ends_the_experiment(storage):
    class CustomStopper(Stopper):
        def __init__(self):
            self._count = 0

        def __call__(self, trial_id, result):
            self._count += 1
            return result["test"] > 6

        def stop_all(self):
            return self._count > 5

    trials = tune.run(
        counts_to_ten,
        num_samples=5,
        stop=CustomStopper(),
        max_concurrent_trials=1,
        storage_path=storage,
        verbose=0,
    ).trials
    assert all(t.status == "TERMINATED" for t in trials)
    ran = [t for t in trials if (t.last_result or {}).get("training_iteration")]
    assert len(ran) < 5  # Ray also lists the never-started ones, with no result


# -- errors and outcomes (test_api.py, test_tuner.py) --------------------------------------
def behaves(config):
    if config["how"] == "fail":
        raise RuntimeError("There is an error in trainer!")
    for _ in range(3):
        train.report({"mean_accuracy": float("inf") if config["how"] == "inf" else 0.5})


@pytest.fixture(scope="module")
def outcomes(storage):
    analysis = tune.run(
        behaves,
        config={"how": tune.grid_search(["fail", "ok", "inf"])},
        raise_on_failed_trial=False,
        storage_path=storage,
        verbose=0,
    )
    return {t.config["how"]: t for t in analysis.trials}


def test_a_raising_trainable_ends_in_error(outcomes):
    assert outcomes["fail"].status == "ERROR"


def test_other_trials_finish_beside_a_failed_one(outcomes):
    assert outcomes["ok"].status == "TERMINATED"
    assert outcomes["ok"].last_result["training_iteration"] == 3


def test_an_infinite_metric_is_reported_as_is(outcomes):
    assert outcomes["inf"].status == "TERMINATED"
    assert outcomes["inf"].last_result["mean_accuracy"] == float("inf")


def test_the_last_result_is_done(outcomes):
    assert outcomes["ok"].last_result["done"] is True


def test_tune_run_raises_tune_error_on_a_failed_trial(storage):
    def fails(config):
        raise Exception("uh oh")

    with pytest.raises(TuneError):
        tune.run(fails, storage_path=storage, verbose=0)


def test_tuner_fit_returns_failed_trials_as_results(storage):
    results = tune.Tuner(
        behaves,
        param_space={"how": tune.grid_search(["fail", "fail"])},
        run_config=RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(results) == 2
    assert all(r.error for r in results)


def test_fail_fast_stops_after_the_first_error(storage):
    results = tune.Tuner(
        behaves,
        param_space={"how": tune.grid_search(["fail", "fail"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=RunConfig(
            storage_path=storage, verbose=0, failure_config=FailureConfig(fail_fast=True)
        ),
    ).fit()
    assert len([r.error for r in results if r.error]) == 1


def test_fail_fast_raise_raises_the_trainables_error(storage):
    tuner = tune.Tuner(
        behaves,
        param_space={"how": tune.grid_search(["fail", "fail"])},
        run_config=RunConfig(
            storage_path=storage, verbose=0, failure_config=FailureConfig(fail_fast="raise")
        ),
    )
    with pytest.raises(RuntimeError):
        tuner.fit()


def test_a_non_serializable_trainable_is_a_type_error():
    lock = threading.Lock()
    with pytest.raises(TypeError):
        tune.Tuner(lambda config: print(lock))


def test_checkpoint_at_end_with_a_function_trainable_is_a_value_error(storage):
    with pytest.raises(ValueError):
        tune.Tuner(
            lambda config: 1,
            run_config=RunConfig(
                storage_path=storage, checkpoint_config=CheckpointConfig(checkpoint_at_end=True)
            ),
        ).fit()


def test_checkpoint_frequency_with_a_function_trainable_is_a_value_error(storage):
    with pytest.raises(ValueError):
        tune.Tuner(
            lambda config: 1,
            run_config=RunConfig(
                storage_path=storage, checkpoint_config=CheckpointConfig(checkpoint_frequency=1)
            ),
        ).fit()


def test_checkpoint_at_end_false_with_a_function_trainable_runs(storage):
    results = tune.Tuner(
        lambda config: 1,
        run_config=RunConfig(
            storage_path=storage,
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_at_end=False),
        ),
    ).fit()
    assert len(results) == 1


def test_an_unnamed_experiment_is_named_after_the_trainable(storage):
    # (from test_checkpoint_at_end_false above and the runs before it)
    assert any(d.startswith("lambda_") or d.startswith("behaves_") for d in os.listdir(storage))


def test_a_named_experiment_gets_no_date(storage):
    assert "grid" in os.listdir(storage)


# -- a driver error, then restore (test_tuner.py) ------------------------------------------
class FailureInjection(Callback):
    def on_step_end(self, iteration, trials, **info):
        if iteration == 3:
            raise RuntimeError("injected")


@pytest.fixture(scope="module")
def interrupted(storage):
    tuner = tune.Tuner(
        counts_to_ten,
        param_space={"a": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=RunConfig(
            name="driver_fail", storage_path=storage, verbose=0, callbacks=[FailureInjection()]
        ),
    )
    with pytest.raises(RuntimeError) as info:
        tuner.fit()
    return os.path.join(storage, "driver_fail"), info.value


def test_a_callback_error_ends_fit_with_that_error(interrupted):
    _, error = interrupted
    assert "injected" in str(error)


def test_the_interrupted_experiment_can_be_restored(interrupted):
    path, _ = interrupted
    assert tune.Tuner.can_restore(path)


def test_restore_finishes_every_trial(interrupted):
    path, _ = interrupted
    results = tune.Tuner.restore(path, counts_to_ten).fit()
    assert len(results) == 3
    assert results.num_errors == 0
    assert sorted(r.config["a"] for r in results) == [1, 2, 3]
    assert all(r.metrics["training_iteration"] == 10 for r in results)


def test_can_restore_is_false_for_a_folder_without_an_experiment(storage, tmp_path):
    assert not tune.Tuner.can_restore(str(tmp_path))


# -- rerunning errored trials (test_tuner_restore.py, test_api.py testRerun) --------------
def fails_once(config):
    marker = os.path.join(config["dir"], f"failed_{config['id']}")
    if config["fail"] and not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("first attempt")
    train.report({"hello": 123})


@pytest.fixture(scope="module")
def errored(storage, tmp_path_factory):
    markers = str(tmp_path_factory.mktemp("markers"))
    space = {
        "fail": tune.grid_search([True, False]),
        "id": tune.grid_search([0, 1]),
        "dir": markers,
    }
    results = tune.Tuner(
        fails_once,
        param_space=space,
        run_config=RunConfig(name="errored", storage_path=storage, verbose=0),
    ).fit()
    return os.path.join(storage, "errored"), results


def test_the_first_run_has_the_errors(errored):
    _, results = errored
    assert len(results) == 4
    assert results.num_errors == 2


def test_restored_results_without_fit(errored):
    path, _ = errored
    results = tune.Tuner.restore(path, fails_once).get_results()
    assert len(results) == 4
    assert results.num_errors == 2


def test_resume_errored_reruns_the_failed_trials(errored):
    path, _ = errored
    results = tune.Tuner.restore(path, fails_once, resume_errored=True).fit()
    assert results.num_errors == 0
    assert [r.metrics["hello"] for r in results] == [123, 123, 123, 123]


def test_tune_run_resume_errored_only(storage, tmp_path):
    kwargs = dict(
        config={"fail": True, "id": tune.grid_search([0, 1]), "dir": str(tmp_path)},
        name="rerun",
        storage_path=storage,
        verbose=0,
    )
    trials = tune.run(fails_once, raise_on_failed_trial=False, **kwargs).trials
    assert Counter(t.status for t in trials)["ERROR"] == 2
    new_trials = tune.run(fails_once, resume="ERRORED_ONLY", **kwargs).trials
    assert Counter(t.status for t in new_trials)["ERROR"] == 0
    assert all(t.last_result.get("hello") == 123 for t in new_trials)


def test_a_metric_without_a_mode_is_refused_saying_what_to_write(storage):
    # Deliberate difference: Ray accepts a metric without a mode (docs/from_ray_tune.md).
    with pytest.raises(ValueError, match="mode='min'"):
        tune.run(reports_once, metric="score", storage_path=storage, verbose=0)
    with pytest.raises(ValueError, match="give both or neither"):
        tune.Tuner(reports_once, tune_config=tune.TuneConfig(metric="score"))
