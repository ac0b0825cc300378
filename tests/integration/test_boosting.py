"""LightGBM's and XGBoost's report-only TuneReportCallback: one implementation
(`integration._boosting`), each library's calling convention, tiny real models."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

import tunefleet as tune


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(120, 3))
    return x, (x[:, 0] > 0).astype(float)


def report_only(config: dict[str, Any]) -> None:
    x, y = _data()
    if config["library"] == "xgboost":
        import xgboost as xgb

        from tunefleet.integration.xgboost import TuneReportCallback as XGBCallback

        xgb.train(
            {"objective": "binary:logistic", "eval_metric": "logloss", "nthread": 1},
            xgb.DMatrix(x[:90], y[:90]),
            num_boost_round=4,
            evals=[(xgb.DMatrix(x[90:], y[90:]), "eval")],
            verbose_eval=False,
            callbacks=[XGBCallback({"loss": "eval-logloss"})],
        )
    else:
        import lightgbm as lgb

        from tunefleet.integration.lightgbm import TuneReportCallback as LGBCallback

        train = lgb.Dataset(x[:90], y[:90])
        lgb.train(
            {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
            train,
            num_boost_round=4,
            valid_sets=[lgb.Dataset(x[90:], y[90:], reference=train)],
            callbacks=[LGBCallback({"loss": "valid_0-binary_logloss"})],
        )


def test_report_only_callbacks_report_every_round_and_never_checkpoint(storage: str) -> None:
    pytest.importorskip("xgboost")
    pytest.importorskip("lightgbm")
    grid = tune.Tuner(
        report_only,
        param_space={"library": tune.grid_search(["xgboost", "lightgbm"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert not grid.errors, [(e, e.traceback) for e in grid.errors]
    for result in grid:
        history = result.metrics_dataframe
        assert list(history["training_iteration"]) == [1, 2, 3, 4], result.config
        assert history["loss"].between(0, 1).all()
        assert result.checkpoint is None and not result.best_checkpoints


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_both_callbacks_are_the_checkpoint_callback_and_errors_name_the_one_used(
    library: str,
) -> None:
    pytest.importorskip(library)
    module = importlib.import_module(f"tunefleet.integration.{library}")
    callback = module.TuneReportCallback("loss")
    assert isinstance(callback, module.TuneReportCheckpointCallback)
    if library == "xgboost":
        import xgboost as xgb

        assert isinstance(callback, xgb.callback.TrainingCallback)
    else:
        assert callback.order == 20 and callback.before_iteration is False
    where = f"tunefleet.integration.{library}.TuneReportCallback: metrics=3"
    with pytest.raises(TypeError, match=where):
        module.TuneReportCallback(metrics=3)
    with pytest.raises(TypeError, match="results_postprocessing_fn=1 must be a function"):
        module.TuneReportCallback(results_postprocessing_fn=1)
