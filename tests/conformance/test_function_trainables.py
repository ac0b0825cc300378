"""Ray Tune's Function Trainable API (the "Training in Tune" page and `tune.Trainable`
reference for functions), written as Ray Tune users write it: `train.report`, what the
function returns, `train.get_checkpoint`, `train.get_context`, `tune.with_parameters`,
`tune.with_resources`, and NaN metrics.

One experiment holds one trial per way a function can end (a grid over `how`); a few
small ones check checkpoints, parameters and resources.
"""

import json
import math
import os
import platform
import re
import tempfile

import pytest
from ray import train, tune
from ray.train import Checkpoint, FailureConfig, RunConfig
from ray.tune.result import DEFAULT_METRIC


def ending(config):
    """Ends as `config["how"]` says; reports `steps` results first where it reports."""
    how = config["how"]
    if how == "returns_dict":
        final_score = 0
        for x in range(3):
            final_score = x * 2
        return {"score": final_score}  # This sends the score to Tune.
    if how == "returns_number":
        return 7.5
    if how == "returns_zero":
        return 0.0
    if how == "reports_then_returns":
        for x in range(3):
            train.report({"score": x})
        return {"score": 100, "final": True}
    if how == "reports_then_returns_none":
        for x in range(3):
            train.report({"score": x})
        return None
    if how == "returns_list":
        return [1, 2, 3]
    if how == "reports_nan":
        for x in range(3):
            train.report({"score": float("nan") if x == 1 else float(x)})
        return None
    if how == "reports_inf_last":
        train.report({"score": 1.0})
        train.report({"score": float("inf")})
        return None
    if how == "nested":
        train.report({"val": {"loss": 0.5, "acc": 0.9}, "score": 1.0})
        return None
    raise AssertionError(how)


HOWS = [
    "returns_dict",
    "returns_number",
    "returns_zero",
    "reports_then_returns",
    "reports_then_returns_none",
    "returns_list",
    "reports_nan",
    "reports_inf_last",
    "nested",
]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("function_trainables"))


@pytest.fixture(scope="module")
def endings(storage):
    tuner = tune.Tuner(
        ending,
        param_space={"how": tune.grid_search(HOWS)},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=RunConfig(name="endings", storage_path=storage, verbose=0),
    )
    # Some endings report no "score" (a bare number is "_metric"): Ray's strict metric
    # check would stop the run at that result, so this run turns it off, as Ray users do.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
        results = tuner.fit()
    return results, {r.config["how"]: r for r in results}


# -- what the function returns ----------------------------------------------------------------
def test_a_returned_dict_is_the_final_result(endings):
    _, by_how = endings
    result = by_how["returns_dict"]
    assert result.error is None
    assert result.metrics["score"] == 4
    assert result.metrics["training_iteration"] == 1


def test_a_returned_number_is_reported_as_default_metric(endings):
    _, by_how = endings
    result = by_how["returns_number"]
    assert DEFAULT_METRIC == "_metric"
    assert result.metrics[DEFAULT_METRIC] == 7.5
    assert result.error is None


def test_a_returned_zero_is_reported(endings):
    # Deliberate difference: Ray Tune drops a falsy return value; tunefleet reports 0.
    _, by_how = endings
    assert by_how["returns_zero"].metrics[DEFAULT_METRIC] == 0.0


def test_reports_then_a_returned_dict_is_one_more_result(endings):
    _, by_how = endings
    result = by_how["reports_then_returns"]
    assert result.metrics["score"] == 100 and result.metrics["final"] is True
    assert result.metrics["training_iteration"] == 4
    assert list(result.metrics_dataframe["score"]) == [0, 1, 2, 100]


def test_returning_none_after_reports_keeps_the_last_report(endings):
    _, by_how = endings
    result = by_how["reports_then_returns_none"]
    assert result.error is None
    assert result.metrics["score"] == 2 and result.metrics["training_iteration"] == 3


def test_returning_another_type_is_an_error_naming_it(endings):
    _, by_how = endings
    error = by_how["returns_list"].error
    assert error is not None
    assert isinstance(error, Exception)
    assert "returned a list" in str(error)


def test_only_the_bad_return_failed(endings):
    results, _ = endings
    assert len(results) == len(HOWS)
    assert results.num_errors == 1


def test_every_result_is_done(endings):
    _, by_how = endings
    assert by_how["returns_dict"].metrics["done"] is True
    assert by_how["reports_then_returns"].metrics["done"] is True


def test_a_function_that_never_reports_ends_terminated(storage):
    def forgets(config):
        config["x"] * 2

    results = tune.Tuner(
        forgets,
        param_space={"x": 1},
        run_config=RunConfig(name="forgets", storage_path=storage, verbose=0),
    ).fit()
    assert results.num_errors == 0
    assert results[0].error is None
    assert results[0].metrics == {}  # Result.metrics of a trial with no result


def test_tune_run_does_not_raise_for_a_function_that_never_reports(storage):
    def forgets(config):
        pass

    analysis = tune.run(forgets, storage_path=storage, name="forgets_run", verbose=0)
    (trial,) = analysis.trials
    assert trial.status == "TERMINATED"


# -- NaN and inf ----------------------------------------------------------------------------
def test_a_nan_metric_is_recorded_and_the_trial_goes_on(endings):
    _, by_how = endings
    result = by_how["reports_nan"]
    assert result.error is None
    scores = list(result.metrics_dataframe["score"])
    assert scores[0] == 0.0 and math.isnan(scores[1]) and scores[2] == 2.0


def test_an_infinite_last_metric_is_recorded(endings):
    _, by_how = endings
    result = by_how["reports_inf_last"]
    assert result.error is None and math.isinf(result.metrics["score"])


def test_nan_or_inf_is_never_the_best_result(endings):
    results, _ = endings
    best = results.get_best_result()
    assert math.isfinite(best.metrics["score"])
    assert best.config["how"] == "reports_then_returns"


def test_nan_policy_error_still_fails_the_trial(storage):
    # tunefleet's option (not in Ray Tune): FailureConfig(nan_policy="error").
    results = tune.Tuner(
        ending,
        param_space={"how": "reports_nan"},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=RunConfig(
            name="nan_error",
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(nan_policy="error"),
        ),
    ).fit()
    assert results[0].error is not None and "nan" in str(results[0].error)


# -- reported values --------------------------------------------------------------------------
def test_nested_metrics_are_kept(endings):
    _, by_how = endings
    result = by_how["nested"]
    assert result.metrics["val"] == {"loss": 0.5, "acc": 0.9}


def test_auto_filled_keys(endings):
    _, by_how = endings
    metrics = by_how["reports_then_returns_none"].metrics
    for key in (
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "time_since_restore",
        "iterations_since_restore",
        "timestamp",
        "trial_id",
        "pid",
        "done",
    ):
        assert key in metrics
    assert metrics["trial_id"] == by_how["reports_then_returns_none"].metrics["trial_id"]


# -- context, checkpoints, parameters, resources --------------------------------------------------
def with_context(config):
    context = train.get_context()
    train.report(
        {
            "trial_id": context.get_trial_id(),
            "name": context.get_trial_name(),
            "dir": context.get_trial_dir(),
            "experiment": context.get_experiment_name(),
            "cpus": context.get_trial_resources().required_resources.get("CPU"),
        }
    )


@pytest.fixture(scope="module")
def context_run(storage):
    trainable = tune.with_resources(with_context, {"cpu": 1})
    return tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search([1, 2])},
        run_config=RunConfig(name="context", storage_path=storage, verbose=0),
    ).fit()


def test_get_context_names_the_trial(context_run):
    for result in context_run:
        assert result.metrics["name"]
        assert result.metrics["experiment"] == "context"
        assert os.path.normpath(result.metrics["dir"]) == os.path.normpath(result.path)


def test_trial_ids_are_distinct(context_run):
    assert len({r.metrics["trial_id"] for r in context_run}) == 2


def test_with_resources_reaches_the_trial(context_run):
    assert all(r.metrics["cpus"] == 1 for r in context_run)


def _read_step(directory):
    with open(os.path.join(directory, "state.json")) as f:
        return json.load(f)["step"]


def checkpointed(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            start = _read_step(checkpoint_dir) + 1
    for step in range(start, 4):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            train.report({"step": step, "start": start}, checkpoint=Checkpoint.from_directory(tmp))
        if step == 1 and start == 0:
            raise RuntimeError("fails once, after its second checkpoint")


@pytest.fixture(scope="module")
def restored(storage):
    return tune.Tuner(
        checkpointed,
        run_config=RunConfig(
            name="restored",
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=1),
        ),
    ).fit()


def test_a_failed_trial_restarts_from_its_checkpoint(restored):
    result = restored[0]
    assert result.error is None
    assert result.metrics["start"] == 2 and result.metrics["step"] == 3


def test_the_last_checkpoint_is_the_results(restored):
    with restored[0].checkpoint.as_directory() as path:
        assert _read_step(path) == 3


def uses_data(config, data):
    train.report({"total": sum(data) * config["scale"]})


def test_with_parameters_passes_objects(storage):
    data = list(range(10))
    results = tune.Tuner(
        tune.with_parameters(uses_data, data=data),
        param_space={"scale": tune.grid_search([1, 2])},
        run_config=RunConfig(name="with_parameters", storage_path=storage, verbose=0),
    ).fit()
    assert sorted(r.metrics["total"] for r in results) == [45, 90]


def yields(config):
    for x in range(3):
        yield {"score": x * config["k"]}


def test_a_generator_function_reports_what_it_yields(storage):
    results = tune.Tuner(
        yields,
        param_space={"k": 3},
        run_config=RunConfig(name="generator", storage_path=storage, verbose=0),
    ).fit()
    assert results[0].metrics["score"] == 6
    assert results[0].metrics["training_iteration"] == 3


def test_report_outside_a_trial_raises():
    # Deliberate difference: Ray Tune ignores it; tunefleet says where to call it.
    with pytest.raises(RuntimeError):
        train.report({"score": 1})


# -- what Tune adds to every result (Ray's Trainable.train, functions and classes alike) -----
def counts_steps(config):
    for i in range(200):
        train.report({"itr": i, "timesteps_this_iter": 1, "episodes_this_iter": 2})


def test_timesteps_total_sums_timesteps_this_iter_and_can_stop(storage):
    analysis = tune.run(
        counts_steps,
        stop={"timesteps_total": 100},
        storage_path=storage,
        name="timesteps",
        verbose=0,
    )
    (trial,) = analysis.trials
    assert trial.last_result["timesteps_total"] == 100
    assert trial.last_result["training_iteration"] == 100
    assert trial.last_result["itr"] == 99
    assert trial.last_result["episodes_total"] == 200


def test_a_reported_timesteps_total_is_kept(storage):
    def own_total(config):
        for i in range(3):
            train.report({"timesteps_this_iter": 1, "timesteps_total": 10 * (i + 1)})

    analysis = tune.run(own_total, storage_path=storage, name="own_total", verbose=0)
    assert analysis.trials[0].last_result["timesteps_total"] == 30


def test_no_totals_without_increments(endings):
    _, by_how = endings
    metrics = by_how["reports_then_returns"].metrics
    assert "timesteps_total" not in metrics and "episodes_total" not in metrics


class OneStep(tune.Trainable):
    def step(self):
        return {"score": 1, "done": True}


AUTO_FILLED = {
    "date",
    "done",
    "hostname",
    "iterations_since_restore",
    "node_ip",
    "pid",
    "time_since_restore",
    "time_this_iter_s",
    "time_total_s",
    "timestamp",
    "training_iteration",
    "trial_id",
}


def test_function_and_class_results_carry_the_same_auto_filled_keys(storage, endings):
    _, by_how = endings
    function_metrics = by_how["reports_then_returns"].metrics
    class_metrics = (
        tune.Tuner(OneStep, run_config=RunConfig(name="one_step", storage_path=storage, verbose=0))
        .fit()[0]
        .metrics
    )
    for metrics in (function_metrics, class_metrics):
        assert set(metrics) >= AUTO_FILLED
        assert metrics["hostname"] == platform.node()
        assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", metrics["date"])
        assert isinstance(metrics["node_ip"], str) and metrics["node_ip"]
