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
