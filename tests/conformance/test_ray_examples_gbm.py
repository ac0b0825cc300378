"""Ray Tune's XGBoost and LightGBM example scripts' APIs (Ray form, ported at collection).

xgboost_example.py, lightgbm_example.py and xgboost_dynamic_resources_example.py: the
integrations' report/checkpoint callbacks, get_model, xgb.cv's post-processing hook, and
a ResourceChangingScheduler allocation function written against Ray's controller.
"""

from typing import TYPE_CHECKING, Any

import lightgbm as lgb
import numpy as np
import pytest
import sklearn.datasets
import sklearn.metrics
import xgboost as xgb
from ray import train, tune
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.experiment import Trial
from ray.tune.integration.lightgbm import TuneReportCheckpointCallback as LightGBMCallback
from ray.tune.integration.xgboost import TuneReportCallback, TuneReportCheckpointCallback
from ray.tune.schedulers import ASHAScheduler, ResourceChangingScheduler
from sklearn.model_selection import train_test_split

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController


def _run_config(factory, name, **kwargs):
    return train.RunConfig(name=name, storage_path=str(factory.mktemp(name)), verbose=0, **kwargs)


# -- xgboost_example.py: TuneReportCheckpointCallback and get_model; xgb.cv's callback ---


def _breast_cancer():
    data, labels = sklearn.datasets.load_breast_cancer(return_X_y=True)
    return train_test_split(data, labels, test_size=0.25, random_state=0)


def train_breast_cancer(config: dict):
    train_x, test_x, train_y, test_y = _breast_cancer()
    train_set = xgb.DMatrix(train_x, label=train_y)
    test_set = xgb.DMatrix(test_x, label=test_y)
    xgb.train(
        config,
        train_set,
        evals=[(test_set, "eval")],
        verbose_eval=False,
        num_boost_round=3,
        callbacks=[TuneReportCheckpointCallback(frequency=1)],
    )


def train_breast_cancer_cv(config: dict):
    data, labels = sklearn.datasets.load_breast_cancer(return_X_y=True)

    def average_cv_folds(results_dict: dict[str, list[float]]) -> dict[str, float]:
        # Dict value format: [mean, std]
        return {k: np.mean(v) for k, v in results_dict.items()}

    xgb.cv(
        config,
        xgb.DMatrix(data, label=labels),
        verbose_eval=False,
        stratified=True,
        nfold=3,
        num_boost_round=2,
        callbacks=[TuneReportCallback(results_postprocessing_fn=average_cv_folds)],
    )


XGB_SPACE = {
    "objective": "binary:logistic",
    "eval_metric": ["logloss", "error"],
    "max_depth": tune.randint(1, 9),
    "min_child_weight": tune.choice([1, 2, 3]),
    "subsample": tune.uniform(0.5, 1.0),
    "eta": tune.loguniform(1e-4, 1e-1),
}


@pytest.fixture(scope="module")
def xgboost_best(tmp_path_factory):
    """xgboost_example.py."""
    scheduler = ASHAScheduler(max_t=10, grace_period=1, reduction_factor=2)
    tuner = tune.Tuner(
        train_breast_cancer,
        tune_config=tune.TuneConfig(
            metric="eval-logloss", mode="min", scheduler=scheduler, num_samples=2
        ),
        run_config=_run_config(tmp_path_factory, "xgb"),
        param_space=XGB_SPACE,
    )
    return tuner.fit().get_best_result()


def test_xgboost_example_reports_eval_metrics(xgboost_best):
    assert 0.0 <= 1.0 - xgboost_best.metrics["eval-error"] <= 1.0
    assert xgboost_best.metrics["training_iteration"] == 3


def test_xgboost_example_get_model_loads_a_booster(xgboost_best):
    best_bst = TuneReportCheckpointCallback.get_model(xgboost_best.checkpoint)
    assert isinstance(best_bst, xgb.Booster)
    assert best_bst.num_boosted_rounds() == 3


def test_xgboost_cv_example_reports_the_postprocessed_keys(tmp_path_factory):
    tuner = tune.Tuner(
        train_breast_cancer_cv,
        tune_config=tune.TuneConfig(metric="test-logloss", mode="min", num_samples=1),
        run_config=_run_config(tmp_path_factory, "xgb_cv"),
        param_space=XGB_SPACE,
    )
    metrics = tuner.fit().get_best_result().metrics
    assert {"train-logloss", "train-error", "test-logloss", "test-error"} <= set(metrics)
    assert metrics["training_iteration"] == 2


# -- lightgbm_example.py: the callback's metric mapping, then a final report with done ---


def train_lightgbm(config):
    train_x, test_x, train_y, test_y = _breast_cancer()
    train_set = lgb.Dataset(train_x, label=train_y)
    test_set = lgb.Dataset(test_x, label=test_y)
    gbm = lgb.train(
        config,
        train_set,
        valid_sets=[test_set],
        valid_names=["eval"],
        num_boost_round=3,
        callbacks=[
            LightGBMCallback(
                {"binary_error": "eval-binary_error", "binary_logloss": "eval-binary_logloss"}
            )
        ],
    )
    pred_labels = np.rint(gbm.predict(test_x))
    train.report(
        {"mean_accuracy": sklearn.metrics.accuracy_score(test_y, pred_labels), "done": True}
    )


def test_lightgbm_example(tmp_path_factory):
    """lightgbm_example.py."""
    config = {
        "objective": "binary",
        "metric": ["binary_error", "binary_logloss"],
        "verbose": -1,
        "boosting_type": tune.grid_search(["gbdt", "dart"]),
        "num_leaves": tune.randint(10, 100),
        "learning_rate": tune.loguniform(1e-8, 1e-1),
    }
    tuner = tune.Tuner(
        train_lightgbm,
        tune_config=tune.TuneConfig(
            metric="binary_error", mode="min", num_samples=1, scheduler=ASHAScheduler()
        ),
        run_config=_run_config(tmp_path_factory, "lgb"),
        param_space=config,
    )
    results = tuner.fit()
    assert {r.config["boosting_type"] for r in results} == {"gbdt", "dart"}
    frame = results[0].metrics_dataframe
    assert {"binary_error", "binary_logloss", "mean_accuracy"} <= set(frame.columns)
    assert results.get_best_result().config["boosting_type"] in ("gbdt", "dart")


# -- xgboost_dynamic_resources_example.py: ResourceChangingScheduler, an allocation ------
# function written against Ray's controller, trial resources read inside the trial


def train_breast_cancer_dynamic(config: dict):
    train_x, test_x, train_y, test_y = _breast_cancer()
    train_set = xgb.DMatrix(train_x, label=train_y)
    test_set = xgb.DMatrix(test_x, label=test_y)
    xgb_model = None
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        xgb_model = TuneReportCheckpointCallback.get_model(checkpoint, filename="booster.json")
    config["nthread"] = int(tune.get_context().get_trial_resources().head_cpus)
    xgb.train(
        config,
        train_set,
        evals=[(test_set, "eval")],
        verbose_eval=False,
        xgb_model=xgb_model,
        num_boost_round=3,
        callbacks=[TuneReportCheckpointCallback(frequency=1, filename="booster.json")],
    )


def example_resources_allocation_function(
    tune_controller: "TuneController",
    trial: Trial,
    result: dict[str, Any],
    scheduler: "ResourceChangingScheduler",
) -> PlacementGroupFactory | None:
    base_trial_resource = scheduler._base_trial_resources
    if result["training_iteration"] < 1:
        return None
    if base_trial_resource is None:
        base_trial_resource = PlacementGroupFactory([{"CPU": 1, "GPU": 0}])
    min_cpu = base_trial_resource.required_resources.get("CPU", 0)
    total_available_cpus = tune_controller._resource_updater.get_num_cpus()
    cpu_to_use = max(min_cpu, total_available_cpus // len(tune_controller.get_live_trials()))
    return PlacementGroupFactory([{"CPU": cpu_to_use, "GPU": 0}])


@pytest.fixture(scope="module")
def dynamic_resources_best(tmp_path_factory):
    """xgboost_dynamic_resources_example.py."""
    scheduler = ResourceChangingScheduler(
        base_scheduler=ASHAScheduler(max_t=5, grace_period=1, reduction_factor=2),
        resources_allocation_function=example_resources_allocation_function,
    )
    tuner = tune.Tuner(
        tune.with_resources(
            train_breast_cancer_dynamic, resources=PlacementGroupFactory([{"CPU": 1, "GPU": 0}])
        ),
        tune_config=tune.TuneConfig(
            metric="eval-logloss", mode="min", num_samples=1, scheduler=scheduler
        ),
        run_config=_run_config(tmp_path_factory, "dynamic"),
        param_space={
            "objective": "binary:logistic",
            "eval_metric": ["logloss", "error"],
            "max_depth": 2,
            "learning_rate": 1,
            "random_state": 1,
        },
    )
    return tuner.fit().get_best_result()


def test_dynamic_resources_example_runs_to_the_end(dynamic_resources_best):
    assert dynamic_resources_best.error is None
    assert dynamic_resources_best.metrics["eval-logloss"] >= 0


def test_dynamic_resources_example_model_loads_from_the_checkpoint(dynamic_resources_best):
    booster = TuneReportCheckpointCallback.get_model(
        dynamic_resources_best.checkpoint, filename="booster.json"
    )
    assert isinstance(booster, xgb.Booster)


def test_private_base_trial_resources_before_a_run():
    scheduler = ResourceChangingScheduler(
        resources_allocation_function=example_resources_allocation_function
    )
    assert scheduler._base_trial_resources is None


def test_placement_group_factory_as_the_example_reads_it():
    pgf = PlacementGroupFactory([{"CPU": 2, "GPU": 0}])
    assert pgf.required_resources.get("CPU", 0) == 2
    assert pgf.head_cpus == 2
