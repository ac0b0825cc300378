"""One flatten behind every table: progress.csv's columns are the result DataFrame's
(less its config/ columns, as in Ray Tune)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

import tunefleet as tune
from tunefleet.logger import CSVLoggerCallback, JsonLoggerCallback


def train(config: dict[str, Any]) -> None:
    for i in range(2):
        tune.report(
            {
                "loss": np.float32(0.5) / (i + 1),  # reported as numpy: recorded as a float
                "val": {"acc": np.float64(0.25 * i), "per_class": {"a": i}},
                "extra": {},  # an empty dict stays a column, as in the DataFrame
            }
        )


def test_progress_csv_columns_are_the_dataframe_columns(storage: str) -> None:
    grid = tune.Tuner(
        train,
        param_space={"model": {"width": 8}},
        run_config=tune.RunConfig(
            storage_path=storage, verbose=0, callbacks=[CSVLoggerCallback(), JsonLoggerCallback()]
        ),
    ).fit()
    [result] = list(grid)
    with open(Path(result.path) / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    frame = result.metrics_dataframe
    # As Ray's: progress.csv leaves the config out, the DataFrame has it as config/...
    metrics = [c for c in frame.columns if not c.startswith("config/")]
    assert rows and list(rows[0]) == metrics
    assert list(frame["config/model/width"]) == [8, 8]
    assert {"loss", "val/acc", "val/per_class/a", "extra"} <= set(frame.columns)
    assert [r["val/per_class/a"] for r in rows] == ["0", "1"]
    assert [r["extra"] for r in rows] == ["{}", "{}"]
    assert list(frame["loss"]) == [0.5, 0.25] and list(frame["val/acc"]) == [0.0, 0.25]
    lines = (Path(result.path) / "result.json").read_text().splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [0.5, 0.25]
    assert grid.get_dataframe()["config/model/width"].tolist() == [8]
