"""A run seen from outside while it goes on, what a trial knows, and the legacy API.

Real worker processes throughout; the "outside" is this test process reading the
store, and a separate `tunefleet` CLI process, while the driver runs in a thread.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.search import BasicVariantGenerator
from tunefleet.space import SearchSpaceError
from tunefleet.store import StoreReader


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def gated(config: dict[str, Any]) -> None:
    """Reports twice, then waits until the test removes the gate file."""
    tune.report(loss=config["x"], phase=1)
    tune.report(loss=config["x"] / 2, phase=2)
    while Path(config["gate"]).exists():
        time.sleep(0.02)
    tune.report(loss=config["x"] / 4, phase=3)


def test_store_and_cli_are_readable_while_the_run_goes_on(storage: str, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    tuner = tune.Tuner(
        gated,
        param_space={"x": tune.grid_search([1.0, 2.0]), "gate": str(gate)},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name="live", storage_path=storage, verbose=0),
    )
    outcome: dict[str, Any] = {}
    driver = threading.Thread(target=lambda: outcome.setdefault("grid", tuner.fit()))
    driver.start()
    try:
        exp = Path(storage, "live")
        wait_for(lambda: (exp / "experiment.db").exists())
        reader = StoreReader(str(exp))

        def both_reported_twice() -> bool:
            ids = reader.trial_ids()
            return len(ids) == 2 and all(len(reader.results(t)) == 2 for t in ids)

        wait_for(both_reported_twice)
        assert {t.status.value for t in reader.trials()} == {"RUNNING"}
        shown = subprocess.run(
            [sys.executable, "-m", "tunefleet", "show", str(exp)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert shown.stdout.count("RUNNING") == 2, shown.stdout
        reader.close()
    finally:
        gate.unlink()
        driver.join(timeout=60)
    grid = outcome["grid"]
    assert [r.metrics["phase"] for r in grid] == [3, 3]
    assert grid.get_best_result().metrics["loss"] == 0.25


def knows_itself(config: dict[str, Any]) -> None:
    ctx = tune.get_context()
    with tempfile.TemporaryDirectory() as d:
        Path(d, "note.txt").write_text(f"{ctx.get_trial_id()} attempt {ctx.attempt}")
        tune.report(
            {
                "loss": config["x"],
                "ctx_id": ctx.get_trial_id(),
                "ctx_name": ctx.get_trial_name(),
                "ctx_dir": ctx.get_trial_dir(),
                "ctx_exp": ctx.get_experiment_name(),
                "ctx_cpu": ctx.get_trial_resources()["cpu"],
            },
            checkpoint=tune.Checkpoint.from_directory(d),
        )


def test_trial_context_and_checkpoint_round_trip(storage: str, tmp_path: Path) -> None:
    grid = tune.Tuner(
        knows_itself,
        param_space={"x": tune.grid_search([3.0, 1.0])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", trial_name_creator=lambda t: f"named_{t.trial_id}"
        ),
        run_config=tune.RunConfig(name="ctx", storage_path=storage, verbose=0),
    ).fit()
    for result in grid:
        m = metrics_of(result)
        assert m["ctx_id"] == m["trial_id"]
        assert m["ctx_name"] == f"named_{m['trial_id']}"
        assert Path(m["ctx_dir"]) == Path(result.path)
        assert m["ctx_exp"] == "ctx" and m["ctx_cpu"] == 1
        assert result.checkpoint is not None
        copied = result.checkpoint.to_directory(str(tmp_path / m["trial_id"]))
        assert Path(copied, "note.txt").read_text() == f"{m['trial_id']} attempt 0"
    assert grid.get_best_result().config["x"] == 1.0


def curve(config: dict[str, Any]) -> None:
    for step in range(4):
        tune.report(loss=config["a"] * (4 - step))


def test_legacy_run_returns_a_full_experiment_analysis(storage: str) -> None:
    analysis = tune.run(
        curve,
        config={"a": tune.grid_search([1, 2, 3])},
        metric="loss",
        mode="min",
        storage_path=storage,
        name="legacy",
        verbose=0,
    )
    assert analysis.best_config == {"a": 1}
    assert analysis.best_result["loss"] == 1
    best = analysis.best_trial
    assert best is not None and best.config == {"a": 1}
    assert analysis.get_best_config(metric="loss", mode="max") == {"a": 3}
    assert len(analysis.results_df) == 3
    assert len(analysis.dataframe()) == 3
    frames = analysis.trial_dataframes
    assert sorted(len(df) for df in frames.values()) == [4, 4, 4]
    reopened = tune.ExperimentAnalysis(str(Path(storage, "legacy")))
    assert reopened.get_best_config(metric="loss", mode="min") == {"a": 1}


def never_called(config: dict[str, Any]) -> None:
    raise AssertionError("no trial may run for an invalid space")


def test_invalid_space_is_rejected_before_any_process_starts(storage: str) -> None:
    # bad bounds fail in the domain's constructor; a space from YAML/JSON fails here
    with pytest.raises(SearchSpaceError, match=r'\["model"\]\["opt"\].*must not be empty'):
        tune.Tuner(
            never_called,
            param_space={"model": {"lr": tune.loguniform(1e-4, 1.0), "opt": {"grid_search": []}}},
            run_config=tune.RunConfig(name="bad", storage_path=storage, verbose=0),
        ).fit()
    assert not any(Path(storage).iterdir()), os.listdir(storage)


def nested_scalars(config: dict[str, Any]) -> None:
    import numpy as np
    import torch

    for step in range(3):
        loss = config["x"] + step
        tune.report({"val": {"loss": np.float32(loss)}, "t": torch.tensor(loss * 2.0)})


class RecordingSearch(BasicVariantGenerator):
    """Random search that keeps what the controller hands it."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[Any] = []

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.seen.append(result["val"]["loss"])


def test_nested_metric_with_numpy_and_torch_scalars_reaches_the_searcher(storage: str) -> None:
    searcher = RecordingSearch()
    grid = tune.Tuner(
        nested_scalars,
        param_space={"x": tune.grid_search([2.0, 1.0])},
        tune_config=tune.TuneConfig(metric="val/loss", mode="min", search_alg=searcher),
        run_config=tune.RunConfig(storage_path=storage, verbose=1),  # summary reads it too
    ).fit()
    assert sorted(searcher.seen) == [1.0, 2.0, 2.0, 3.0, 3.0, 4.0]
    assert all(type(v) is float for v in searcher.seen)
    best = grid.get_best_result()
    assert best.config == {"x": 1.0}
    assert metrics_of(best)["val"]["loss"] == 3.0 and metrics_of(best)["t"] == 6.0
