"""Framework callbacks, each with a tiny model inside a real tunefleet run (worker processes).

Trainables import their framework inside, so the driver (this process) stays light; the
slow imports (Lightning, Keras, Transformers) are paid in the trial's worker.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of


def _fit(trainable: Any, space: dict[str, Any], storage: str, **run: Any) -> tune.ResultGrid:
    grid = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(max_concurrent_trials=1),  # one worker: one framework import
        run_config=tune.RunConfig(storage_path=storage, verbose=0, **run),
    ).fit()
    assert not grid.errors, [(e, e.traceback) for e in grid.errors]
    return grid


def _binary_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    return x, (x[:, 0] + x[:, 1] > 0).astype(float)


def _logloss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


# -- XGBoost ------------------------------------------------------------------------------------


def xgboost_trainable(config: dict[str, Any]) -> None:
    import xgboost as xgb

    from tunefleet.integration.xgboost import TuneReportCheckpointCallback

    x, y = _binary_data()
    dtrain, dvalid = xgb.DMatrix(x[:150], y[:150]), xgb.DMatrix(x[150:], y[150:])
    params = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "nthread": 1}
    callback = TuneReportCheckpointCallback({"loss": "eval-logloss"}, frequency=2)
    booster = xgb.train(
        {**params, "max_depth": config["max_depth"]},
        dtrain,
        num_boost_round=5,
        evals=[(dvalid, "eval")],
        verbose_eval=False,
        callbacks=[callback],
    )
    np.save(os.path.join(tune.get_context().get_trial_dir(), "pred.npy"), booster.predict(dvalid))


def test_xgboost_reports_each_round_and_checkpoints_a_booster_that_reloads(storage: str) -> None:
    pytest.importorskip("xgboost")
    from tunefleet.integration.xgboost import TuneReportCheckpointCallback

    grid = _fit(xgboost_trainable, {"max_depth": tune.grid_search([1, 3])}, storage)
    assert grid.num_errors == 0 and len(grid) == 2
    x, y = _binary_data()
    for result in grid:
        history = result.metrics_dataframe
        # 5 rounds, then the final checkpoint with the last round's metrics (as Ray Tune)
        assert list(history["training_iteration"]) == [1, 2, 3, 4, 5, 6]
        assert history["loss"].iloc[-1] == history["loss"].iloc[-2]
        assert len(result.best_checkpoints) == 3  # rounds 2 and 4, and the end
        assert result.checkpoint is not None
        assert os.path.isfile(os.path.join(result.checkpoint.path, "model.ubj"))
        import xgboost as xgb

        booster = TuneReportCheckpointCallback.get_model(result.checkpoint)
        predicted = booster.predict(xgb.DMatrix(x[150:]))
        np.testing.assert_allclose(predicted, np.load(Path(result.path) / "pred.npy"))
        assert _logloss(y[150:], predicted) == pytest.approx(metrics_of(result)["loss"], rel=1e-5)


def test_xgboost_bad_arguments_name_the_value_and_the_rule() -> None:
    pytest.importorskip("xgboost")
    from tunefleet.integration.xgboost import TuneReportCallback, TuneReportCheckpointCallback

    with pytest.raises(TypeError, match=r"metrics=3 is a int; it must be None"):
        TuneReportCheckpointCallback(metrics=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"metrics entry 'loss': 1 is not a pair of"):
        TuneReportCheckpointCallback(metrics={"loss": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"frequency=-1 must be an integer >= 0"):
        TuneReportCheckpointCallback(frequency=-1)
    with pytest.raises(ValueError, match=r"filename='a/b.ubj' must be a plain file name"):
        TuneReportCheckpointCallback(filename="a/b.ubj")
    with pytest.raises(ValueError, match=r"metrics is empty"):
        TuneReportCallback(metrics=[])


def test_a_metric_that_was_never_logged_is_named_with_what_was() -> None:
    pytest.importorskip("xgboost")
    from tunefleet.integration.xgboost import TuneReportCheckpointCallback

    callback = TuneReportCheckpointCallback({"loss": "valid-logloss"})
    with pytest.raises(KeyError, match=r"\['valid-logloss'\].*logged \['eval-logloss'\]"):
        callback.after_iteration(None, 0, {"eval": {"logloss": [0.5]}})


def test_a_missing_framework_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "tunefleet.integration.lightgbm", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[lightgbm\]'"):
        importlib.import_module("tunefleet.integration.lightgbm")


# -- LightGBM -----------------------------------------------------------------------------------


def lightgbm_trainable(config: dict[str, Any]) -> None:
    import lightgbm as lgb

    from tunefleet.integration.lightgbm import TuneReportCheckpointCallback

    x, y = _binary_data()
    train = lgb.Dataset(x[:150], y[:150])
    valid = lgb.Dataset(x[150:], y[150:], reference=train)
    params = {"objective": "binary", "num_leaves": config["num_leaves"], "verbose": -1}
    booster = lgb.train(
        {**params, "num_threads": 1, "min_data_in_leaf": 5},
        train,
        num_boost_round=5,
        valid_sets=[valid],
        callbacks=[TuneReportCheckpointCallback({"loss": "valid_0-binary_logloss"}, frequency=2)],
    )
    np.save(os.path.join(tune.get_context().get_trial_dir(), "pred.npy"), booster.predict(x[150:]))


def test_lightgbm_reports_each_round_and_checkpoints_a_booster_that_reloads(storage: str) -> None:
    pytest.importorskip("lightgbm")
    from tunefleet.integration.lightgbm import TuneReportCheckpointCallback

    grid = _fit(lightgbm_trainable, {"num_leaves": tune.grid_search([2, 7])}, storage)
    assert grid.num_errors == 0 and len(grid) == 2
    x, y = _binary_data()
    for result in grid:
        assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3, 4, 5]
        assert len(result.best_checkpoints) == 3  # rounds 2, 4 and the last
        assert result.checkpoint is not None
        booster = TuneReportCheckpointCallback.get_model(result.checkpoint)
        predicted = booster.predict(x[150:])
        np.testing.assert_allclose(predicted, np.load(Path(result.path) / "pred.npy"))
        assert _logloss(y[150:], predicted) == pytest.approx(metrics_of(result)["loss"], rel=1e-5)


# -- PyTorch Lightning --------------------------------------------------------------------------


def lightning_trainable(config: dict[str, Any]) -> None:
    import lightning.pytorch as pl
    import torch

    from tunefleet.integration.lightning import TuneReportCheckpointCallback

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y))
            self.log("epoch_seen", float(self.current_epoch))

        def on_train_epoch_start(self) -> None:
            with open(config["epochs_log"], "a") as f:
                f.write(f"{self.current_epoch}\n")
            if self.current_epoch == 2 and not os.path.exists(config["fail_flag"]):
                Path(config["fail_flag"]).write_text("failed once")
                raise RuntimeError("simulated crash in epoch 2")

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=config["lr"])

    torch.manual_seed(0)
    x = torch.randn(32, 4)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    trainer = pl.Trainer(
        max_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        default_root_dir=tune.get_context().get_trial_dir(),
        callbacks=[TuneReportCheckpointCallback({"loss": "val_loss", "epoch": "epoch_seen"})],
    )
    checkpoint = tune.get_checkpoint()  # after the crash: resume where the last report was
    path = os.path.join(checkpoint.path, "checkpoint") if checkpoint else None
    trainer.fit(Net(), loader, loader, ckpt_path=path)


@pytest.mark.slow
def test_lightning_reports_each_validation_and_resumes_from_its_checkpoint(
    storage: str, tmp_path: Path
) -> None:
    pytest.importorskip("lightning")
    log = tmp_path / "epochs.log"
    space = {"lr": 0.05, "epochs_log": str(log), "fail_flag": str(tmp_path / "failed")}
    grid = _fit(
        lightning_trainable,
        space,
        storage,
        failure_config=tune.FailureConfig(max_failures=1),
    )
    assert grid.num_errors == 0
    result = grid[0]
    # the crash in epoch 2 restarted the trial from the checkpoint of epoch 1, not from 0
    assert [int(line) for line in log.read_text().split()] == [0, 1, 2, 2, 3]
    history = result.metrics_dataframe
    assert list(history["epoch"]) == [0.0, 1.0, 2.0, 3.0]
    assert list(history["training_iteration"]) == [1, 2, 3, 4]
    assert history["loss"].iloc[-1] < history["loss"].iloc[0]
    assert result.checkpoint is not None
    assert os.path.getsize(os.path.join(result.checkpoint.path, "checkpoint")) > 0


@pytest.mark.slow
def test_lightning_bad_arguments_name_the_value_and_the_rule() -> None:
    pytest.importorskip("lightning")
    from tunefleet.integration.lightning import TuneReportCallback, TuneReportCheckpointCallback

    with pytest.raises(
        ValueError, match=r"on='validation_ends' is not an event .*'validation_end'"
    ):
        TuneReportCheckpointCallback(on="validation_ends")
    with pytest.raises(TypeError, match=r"on=5 must be an event name"):
        TuneReportCallback(on=5)
    with pytest.raises(TypeError, match=r"metrics=\{'loss'\} is a set"):
        TuneReportCallback(metrics={"loss"})
    import lightning.pytorch

    callback = TuneReportCheckpointCallback(on=["train_epoch_end", "validation_end"])
    assert isinstance(callback, lightning.pytorch.Callback)


@pytest.mark.slow
def test_ray_tunes_pytorch_lightning_module_name_gives_pytorch_lightning_callbacks() -> None:
    pl = pytest.importorskip("pytorch_lightning")
    from tunefleet.integration.pytorch_lightning import TuneReportCallback

    assert isinstance(TuneReportCallback({"loss": "val_loss"}), pl.Callback)


# -- Keras 3 ------------------------------------------------------------------------------------


def _keras_data() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(-1, 1, 64 * 4, dtype="float32").reshape(64, 4)
    return x, x.sum(axis=1, keepdims=True)


def keras_trainable(config: dict[str, Any]) -> None:
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras

    from tunefleet.integration.keras import TuneReportCheckpointCallback

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(config["lr"]), loss="mse")
    x, y = _keras_data()
    callback = TuneReportCheckpointCallback(metrics={"loss": "val_loss", "train_loss": "loss"})
    model.fit(x, y, validation_split=0.25, epochs=3, batch_size=16, verbose=0, callbacks=[callback])


@pytest.mark.slow
def test_keras_reports_each_epoch_and_its_model_reloads(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERAS_BACKEND", "torch")  # no TensorFlow needed
    pytest.importorskip("keras")
    from tunefleet.integration.keras import TuneReportCallback, TuneReportCheckpointCallback

    with pytest.raises(ValueError, match=r"report_metrics_on='epoch_ends' is not an event"):
        TuneReportCallback(on="epoch_ends")
    with pytest.raises(ValueError, match=r"filename='model.h5' must end in '.keras'"):
        TuneReportCheckpointCallback(filename="model.h5")

    grid = _fit(keras_trainable, {"lr": 0.05}, storage)
    assert grid.num_errors == 0
    result = grid[0]
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3]
    assert len(result.best_checkpoints) == 3
    assert result.checkpoint is not None
    model = TuneReportCheckpointCallback.get_model(result.checkpoint)
    x, y = _keras_data()
    val_loss = model.evaluate(x[48:], y[48:], verbose=0)  # the validation split: the last 25%
    assert val_loss == pytest.approx(metrics_of(result)["loss"], rel=1e-4)


# -- Hugging Face Transformers ------------------------------------------------------------------


def _tiny_bert() -> Any:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,  # type: ignore[call-arg]  # taken by its base class, not in the stub
    )
    return BertForSequenceClassification(config)


def _examples() -> list[dict[str, Any]]:
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 32, (16, 8), generator=generator)
    return [
        {"input_ids": row, "attention_mask": torch.ones(8, dtype=torch.long), "labels": int(i % 2)}
        for i, row in enumerate(ids)
    ]


def huggingface_trainable(config: dict[str, Any]) -> None:
    from transformers import Trainer, TrainingArguments

    from tunefleet.integration.huggingface import TuneReportCheckpointCallback

    args = TrainingArguments(
        output_dir=os.path.join(tune.get_context().get_trial_dir(), "hf"),
        num_train_epochs=2,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=config["lr"],
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    data = _examples()
    trainer = Trainer(
        model=_tiny_bert(),
        args=args,
        train_dataset=data,
        eval_dataset=data,
        callbacks=[TuneReportCheckpointCallback()],
    )
    checkpoint = tune.get_checkpoint()
    trainer.train(resume_from_checkpoint=checkpoint.path if checkpoint else None)


@pytest.mark.slow
def test_huggingface_trainer_reports_evaluations_with_its_checkpoints(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing is downloaded
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("transformers")
    grid = _fit(huggingface_trainable, {"lr": 1e-3}, storage)
    assert grid.num_errors == 0
    result = grid[0]
    history = result.metrics_dataframe
    assert list(history["epoch"]) == [1.0, 2.0]
    assert list(history["step"]) == [2, 4]
    assert all(math.isfinite(v) for v in history["eval_loss"])
    assert len(result.best_checkpoints) == 2
    assert result.checkpoint is not None
    import torch
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(result.checkpoint.path)
    model.eval()  # type: ignore[no-untyped-call]
    batch = {k: torch.stack([torch.as_tensor(e[k]) for e in _examples()]) for k in _examples()[0]}
    with torch.no_grad():
        loss = float(model(**batch).loss)
    assert loss == pytest.approx(metrics_of(result)["eval_loss"], rel=1e-4)
