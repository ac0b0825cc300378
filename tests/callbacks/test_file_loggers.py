"""The per-trial files in Ray Tune's layout: params.json, result.json, progress.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import tunefleet as tune
from tunefleet.logger import CSVLoggerCallback, JsonLoggerCallback


def train(config: dict[str, Any]) -> None:
    for i in range(3):
        metrics: dict[str, Any] = {"loss": config["x"] / (i + 1), "nested": {"a": i}}
        if i == 2:
            metrics["late"] = 1.0  # not in the first result: not a CSV column
        tune.report(metrics)


def test_params_results_and_progress_files_per_trial(storage: str) -> None:
    grid = tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1.0, 2.0]), "api_key": tune.Secret("sk-9a8b7c6d5e")},
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            callbacks=[JsonLoggerCallback(), CSVLoggerCallback()],
        ),
    ).fit()
    assert len(grid) == 2
    for result in grid:
        folder = Path(result.path)
        params = json.loads((folder / "params.json").read_text())
        assert params["x"] == result.config["x"]
        assert "sk-9a8b7c6d5e" not in (folder / "params.json").read_text()
        lines = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        assert [r["training_iteration"] for r in lines] == [1, 2, 3]
        assert lines[1]["nested"] == {"a": 1} and lines[2]["late"] == 1.0
        with open(folder / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3]
        assert [float(r["loss"]) for r in rows] == [result.config["x"] / k for k in (1, 2, 3)]
        assert rows[2]["nested/a"] == "2" and "late" not in rows[0]


def test_a_resumed_trial_appends_under_the_same_header(storage: str, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"

    def flaky(config: dict[str, Any]) -> None:
        for i in range(2):
            tune.report({"loss": float(i)})
        if not marker.exists():
            marker.write_text("x")
            raise RuntimeError("once")

    grid = tune.Tuner(
        flaky,
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            callbacks=[CSVLoggerCallback()],
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()
    (result,) = grid
    assert result.error is None
    text = (Path(result.path) / "progress.csv").read_text().splitlines()
    assert text[0].startswith("loss") and sum(line == text[0] for line in text) == 1
    assert len(text) == 1 + 4, "two attempts of two results, one header"


def _events(folder: Path, pattern: str) -> list[Any]:
    """Every Event in the TensorBoard files matching `pattern` (TFRecord framing)."""
    import struct

    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(folder.glob(pattern)):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            out.append(event_pb2.Event.FromString(data[at + 12 : at + 12 + length]))
            at += 12 + length + 4
    return out


def test_tensorboard_scalars_per_trial_and_hparams(storage: str) -> None:
    import pytest

    pytest.importorskip("tensorboardX")
    from tunefleet.logger import TBXLoggerCallback

    grid = tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1.0, 2.0]), "token": tune.Secret("tok-55aa66bb")},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[TBXLoggerCallback()]),
    ).fit()
    for result in grid:
        folder = Path(result.path)
        scalars: dict[str, list[tuple[int, float]]] = {}
        for event in _events(folder, "events.out.tfevents.*"):  # the trial's run
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
        plugins = {  # HParams go to a run of their own below the trial's
            value.metadata.plugin_data.plugin_name
            for event in _events(folder, "*/events.out.tfevents.*")
            for value in event.summary.value
        }
        x = result.config["x"]
        assert scalars["ray/tune/loss"] == [(1, x), (2, x / 2), (3, pytest.approx(x / 3))]
        assert [step for step, _ in scalars["ray/tune/nested/a"]] == [1, 2, 3]
        assert "hparams" in plugins, "the trial's config and last results in HParams"
        raw = b"".join(p.read_bytes() for p in folder.rglob("events.out.tfevents.*"))
        assert b"tok-55aa66bb" not in raw


def test_mlflow_one_run_per_trial_with_params_metrics_and_checkpoint(
    storage: str, tmp_path: Path, monkeypatch: Any
) -> None:
    import pytest

    monkeypatch.chdir(tmp_path)  # MLflow puts artifacts in ./mlruns by default

    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from tunefleet.callbacks import MLflowLoggerCallback

    def checkpointed(config: dict[str, Any]) -> None:
        import tempfile

        for i in range(3):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "weights.txt").write_text(f"{config['x']} {i}")
                tune.report(
                    {"loss": config["x"] / (i + 1), "nested": {"a": i}},
                    checkpoint=tune.Checkpoint.from_directory(d),
                )

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    callback = MLflowLoggerCallback(uri, experiment_name="tf-test", save_artifact=True)
    grid = tune.Tuner(
        checkpointed,
        param_space={"x": tune.grid_search([1.0, 2.0]), "api_key": tune.Secret("sk-mlf-7788")},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[callback]),
    ).fit()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tf-test")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert (
        sorted(r.data.tags["trial_id"] for r in runs)
        == sorted(r.path.split("/")[-1].split("_")[0] for r in grid)
        or len(runs) == 2
    )
    for run in runs:
        assert run.info.status == "FINISHED"
        x = float(run.data.params["x"])
        assert run.data.params["api_key"] != "sk-mlf-7788"
        history = client.get_metric_history(run.info.run_id, "loss")
        assert [(m.step, m.value) for m in history] == [
            (1, x),
            (2, x / 2),
            (3, pytest.approx(x / 3)),
        ]
        assert [m.step for m in client.get_metric_history(run.info.run_id, "nested/a")] == [1, 2, 3]
        artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")]
        assert "checkpoint/weights.txt" in artifacts, artifacts
