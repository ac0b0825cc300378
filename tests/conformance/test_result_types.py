"""What the results of a run hold, as Ray Tune's: the trial's own config and last result.

`Tuner.fit()` and `tune.run()` return results holding each trial's config and last
result as objects (a tuple stays a tuple, a reported object stays that object),
`Trial.last_result` carries the config, `repr(Result)` leaves the automatic keys out,
one trial is the best without a metric, and "No best trial found" starts the error
when none qualifies. Ray Tune's test_result_grid.py, test_experiment_analysis.py,
test_function_api.py and doc_code/faq.py show these.
"""

import pytest
from ray import train, tune
from ray.train import RunConfig
from ray.tune import ExperimentAnalysis, PlacementGroupFactory, ResultGrid
from ray.tune.result import AUTO_RESULT_KEYS
from ray.tune.schedulers import ResourceChangingScheduler


def report_types(config):
    train.report({"k": type(config["ab"]).__name__, "loss": sum(config["ab"])})


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def tuples(storage):
    tuner = tune.Tuner(
        report_types,
        param_space={"ab": tune.grid_search([(1, 2), (3, 4)])},
        run_config=RunConfig(name="tuples", storage_path=storage, verbose=0),
    )
    return tuner.fit()


def test_a_tuple_in_the_param_space_stays_a_tuple_in_result_config(tuples):
    # doc_code/faq.py: a grid of tuples; the trainable and Result.config hold the tuple
    assert [r.metrics["k"] for r in tuples] == ["tuple", "tuple"]
    assert sorted(r.config["ab"] for r in tuples) == [(1, 2), (3, 4)]
    assert all(isinstance(r.metrics["config"]["ab"], tuple) for r in tuples)
    best = tuples.get_best_result(metric="loss", mode="min")
    assert best.config == {"ab": (1, 2)}


def test_results_read_from_disk_are_json(tuples):
    # On purpose (docs/from_ray_tune.md): the experiment state is JSON, not pickles, so
    # results read back from disk hold lists where the run had tuples (Ray: tuples).
    restored = ResultGrid(tuples.experiment_path)
    assert sorted(r.config["ab"] for r in restored) == [[1, 2], [3, 4]]
    reread = tune.Tuner.restore(tuples.experiment_path, report_types).get_results()
    assert sorted(r.config["ab"] for r in reread) == [[1, 2], [3, 4]]


def test_result_repr_leaves_out_the_automatic_keys(tuples):
    # test_result_grid.py test_result_repr / test_result_grid_repr
    result = tuples[0]
    assert "loss" in repr(result) and "'k': 'tuple'" in repr(result)
    assert not any(key in repr(result) for key in AUTO_RESULT_KEYS)
    assert repr(tuples).startswith("ResultGrid<[") and repr(tuples).count("Result(") == 2
    assert not any(key in repr(tuples) for key in AUTO_RESULT_KEYS)
    assert "training_iteration" in AUTO_RESULT_KEYS and "config" in AUTO_RESULT_KEYS


def test_one_trial_is_the_best_result_without_a_metric(storage):
    # test_result_grid.py test_no_metric_mode_one_trial: "This should not throw"
    def f(config):
        train.report(dict(x=1))

    tuner = tune.Tuner(
        f,
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=RunConfig(name="one", storage_path=storage, verbose=0),
    )
    result_grid = tuner.fit()
    assert result_grid.get_best_result().metrics["x"] == 1


def test_best_result_with_no_trial_reporting_the_metric(storage):
    # test_result_grid.py test_best_result_no_report
    def f(config):
        pass

    analysis = tune.run(
        f, config={"x": tune.grid_search([1, 2])}, storage_path=storage, name="none", verbose=0
    )
    result_grid = ResultGrid(analysis)
    with pytest.raises(RuntimeError, match=r"No best trial found for the given metric: x"):
        result_grid.get_best_result(metric="x", mode="max")


def test_best_result_is_the_best_trials_last_result(storage):
    # test_experiment_analysis.py test_default_properties
    def f(config):
        train.report({"a": 1, "nested": {"tags": ("x", "y")}})

    experiment_analysis = tune.run(
        f, config={"b": 2}, metric="a", mode="max", storage_path=storage, name="ea", verbose=0
    )
    assert isinstance(experiment_analysis, ExperimentAnalysis)
    best_trial = experiment_analysis.best_trial
    assert experiment_analysis.best_result == best_trial.last_result
    assert best_trial.last_result["config"] == {"b": 2}
    assert experiment_analysis.trials[0].last_result["nested"]["tags"] == ("x", "y")


def test_a_reported_object_is_that_object_in_the_results(storage):
    # test_function_api.py testNewResources: the analysis holds the trial's last result
    def train_fn(config):
        for _ in range(2):
            train.report(dict(metric=1, resources=train.get_context().get_trial_resources()))

    analysis = tune.run(
        train_fn,
        scheduler=ResourceChangingScheduler(
            resources_allocation_function=lambda a, b, c, d: PlacementGroupFactory([{"CPU": 2}])
        ),
        resources_per_trial=PlacementGroupFactory([{"CPU": 1}]),
        stop={"training_iteration": 2},
        storage_path=storage,
        name="resources",
        verbose=0,
    )
    assert next(iter(analysis.results.values()))["resources"].head_cpus == 2.0
