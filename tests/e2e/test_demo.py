"""The demo (`make demo`, ``examples/lstm_sunspots.py``) is reproducible and says which
checkpoint its forecast comes from. Real subprocesses, as a user runs it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.paths import EXAMPLES
from tests.helpers.scripts import run_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (tunefleet[torch])",
    ),
]

FORECAST = re.compile(
    r"Forecast for 2009 from trial (\S+)'s checkpoint at epoch (\d+) "
    r"\(val_loss (\d+\.\d{4})\): \d+\.\d sunspots"
)


def _demo(storage: Path, cwd: Path) -> str:
    args = [str(EXAMPLES / "lstm_sunspots.py"), "--smoke", "--storage-path", str(storage)]
    return run_script(args, cwd, timeout=110).stdout


def _trials(storage: Path) -> dict[str, tuple[dict[str, Any], list[dict[Any, Any]]]]:
    """Each trial's config and reported metrics, by its number in the experiment (the
    ids' random prefix differs between runs)."""
    analysis = tune.ExperimentAnalysis(storage / "lstm_sunspots")
    frames = analysis.trial_dataframes
    columns = ["epoch", "val_loss", "val_rmse", "train_loss"]
    return {
        t.trial_id.rsplit("_", 1)[1]: (
            t.config,
            frames[t.trial_id][columns].to_dict("records"),
        )
        for t in analysis.trials
    }


def test_demo_twice_gives_the_same_configs_and_metrics(tmp_path: Path) -> None:
    configs_a, metrics_a = _trials_after(tmp_path, "a")
    configs_b, metrics_b = _trials_after(tmp_path, "b")
    assert sorted(configs_a) == ["00000", "00001"]
    assert configs_a["00000"] != configs_a["00001"], "the smoke run's two trials are alike"
    assert configs_a == configs_b, "the two runs sampled different configs (or order)"
    assert metrics_a == metrics_b, "the two runs reported different metrics"


def _trials_after(tmp_path: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    storage = tmp_path / name
    _demo(storage, tmp_path)
    trials = _trials(storage)
    return (
        {n: config for n, (config, _) in trials.items()},
        {n: rows for n, (_, rows) in trials.items()},
    )


def test_demo_forecast_names_the_best_epochs_checkpoint(tmp_path: Path) -> None:
    storage = tmp_path / "r"
    out = _demo(storage, tmp_path)
    found = FORECAST.search(out)
    assert found, f"no 'Forecast ... from trial <id>'s checkpoint at epoch <n>' line:\n{out}"
    trial_id, epoch, val_loss = found.group(1), int(found.group(2)), found.group(3)

    # The best trial is the one with the lowest val_loss at any epoch (scope="all"),
    # and the forecast's epoch is that minimum's.
    frames = tune.ExperimentAnalysis(storage / "lstm_sunspots").trial_dataframes
    best_id = min(frames, key=lambda t: float(frames[t]["val_loss"].min()))
    assert trial_id == best_id
    rows: list[dict[Any, Any]] = frames[best_id].to_dict("records")
    best_row = min(rows, key=lambda row: float(row["val_loss"]))
    assert epoch == int(best_row["epoch"])
    assert val_loss == f"{best_row['val_loss']:.4f}"
    assert f"Best trial: {best_id} (lowest val_loss at any epoch)" in out
    checkpoint_line = next(x for x in out.splitlines() if x.startswith("Best checkpoint: "))
    assert f"/trials/{best_id}/checkpoints/" in checkpoint_line
