"""Weights & Biases in offline mode: what a real run logged is read back from W&B's own files.

An offline run keeps its records in ``run-<id>.wandb``: LevelDB's log format (32 KiB
blocks of records with a 7-byte header) after W&B's 7-byte file header, each record a
`wandb_internal_pb2.Record`. Reading them back checks that the config, the history, the
summary, the exit code and the artifacts really landed.
"""

from __future__ import annotations

import json
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune

pytest.importorskip("wandb")

KEY = "wandb-key-0123456789abcdef0123456789abcdef"  # a fake key: offline mode never uses it
_BLOCK = 32 * 1024


def records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, parts = 7, []
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zeroed rest of a block
            pos += left
            continue
        parts.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # generated
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


def read_run(run_dir: Path) -> dict[str, Any]:
    """What an offline run recorded: run info, config, history rows, summary, exit code."""
    out: dict[str, Any] = {"history": [], "summary": {}, "artifacts": [], "config": {}}
    (wandb_file,) = run_dir.glob("run-*.wandb")
    for record in records(wandb_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["id"], out["name"] = record.run.run_id, record.run.display_name
            out["project"], out["group"] = record.run.project, record.run.run_group
            out["config"].update(
                {i.key: json.loads(i.value_json) for i in record.run.config.update}
            )
        elif kind == "config":
            out["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            row = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            out["history"].append({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "summary":
            out["summary"].update(
                {i.key: json.loads(i.value_json) for i in record.summary.update if i.key}
            )
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
        elif kind == "artifact":
            files = sorted(entry.path for entry in record.artifact.manifest.contents)
            out["artifacts"].append((record.artifact.name, files))
    return out


@pytest.fixture
def wandb_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "wandb-runs"
    folder.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(folder))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return folder


def run_dirs(wandb_dir: Path, trial_id: str) -> list[Path]:
    return sorted((wandb_dir / "wandb").glob(f"offline-run-*-{trial_id}"))


def train(config: dict[str, Any]) -> None:
    for i in range(3):
        metrics = {"loss": config["x"] / (i + 1), "nested": {"a": i}, "note": "text"}
        if i == 2:
            with tempfile.TemporaryDirectory() as folder:
                Path(folder, "model.txt").write_text(f"x={config['x']}")
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)
    if config["x"] == 2.0:
        raise RuntimeError("this trial fails after its results")


def test_one_run_per_trial_with_config_history_summary_and_checkpoint(
    storage: str, wandb_dir: Path, tmp_path: Path
) -> None:
    from tunefleet.callbacks import WandbLoggerCallback

    key_file = tmp_path / "wandb.key"
    key_file.write_text(KEY + "\n")
    callback = WandbLoggerCallback(
        project="tf-test",
        api_key_file=str(key_file),
        excludes=["nested"],
        upload_checkpoints=True,
        tags=["unit"],
    )
    grid = tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1.0, 2.0]), "db_password": tune.Secret("hunter2-pw")},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[callback]),
    ).fit()
    assert len(grid) == 2 and grid.num_errors == 1
    for result in grid:
        (run_dir,) = run_dirs(wandb_dir, result.trial_id)
        run = read_run(run_dir)
        x = result.config["x"]
        assert run["id"] == result.trial_id and run["project"] == "tf-test"
        assert run["name"] == Path(result.path).name or run["name"].startswith("train_")
        assert run["group"] == Path(grid.experiment_path).name
        assert run["config"]["x"] == x and run["config"]["db_password"] == "***"
        assert [r["training_iteration"] for r in run["history"]] == [1, 2, 3]
        assert [r["loss"] for r in run["history"]] == [x, x / 2, x / 3]
        assert all("nested/a" not in r and "note" not in r for r in run["history"])
        assert run["summary"]["loss"] == pytest.approx(x / 3)
        assert run["exit_code"] == (1 if x == 2.0 else 0)
        (name, files), *_ = run["artifacts"]
        assert name == f"checkpoint_{result.trial_id}" and "model.txt" in files
    for folder in (wandb_dir, Path(storage)):  # neither secret was written anywhere
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert KEY.encode() not in data and b"hunter2-pw" not in data, path


def train_with_setup_wandb(config: dict[str, Any]) -> None:
    from tunefleet.callbacks import setup_wandb

    with setup_wandb(config, project="inside") as run:
        for i in range(2):
            run.log({"score": config["x"] * (i + 1)})
            tune.report({"score": config["x"] * (i + 1)})


def test_setup_wandb_starts_the_trials_run_inside_the_trainable(
    storage: str, wandb_dir: Path
) -> None:
    grid = tune.Tuner(
        train_with_setup_wandb,
        param_space={"x": tune.grid_search([1.0, 3.0]), "api_key": tune.Secret(KEY)},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),  # one worker, two runs in turn
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0, [e.traceback for e in grid.errors]
    for result in grid:
        (run_dir,) = run_dirs(wandb_dir, result.trial_id)
        run = read_run(run_dir)
        x = result.config["x"]
        assert run["id"] == result.trial_id and run["project"] == "inside"
        assert run["config"]["x"] == x and run["config"]["api_key"] == "***"
        assert [r["score"] for r in run["history"]] == [x, 2 * x]
        assert run["exit_code"] == 0


def test_bad_arguments_name_the_value_and_the_rule(wandb_dir: Path, tmp_path: Path) -> None:
    from tunefleet.callbacks import WandbLoggerCallback, setup_wandb

    with pytest.raises(TypeError, match=r"excludes='loss' must be a list of result keys"):
        WandbLoggerCallback(excludes="loss")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'projcet' is not an argument of wandb.init"):
        WandbLoggerCallback(projcet="typo")
    with pytest.raises(ValueError, match=r"'id' is set for each trial's run"):
        WandbLoggerCallback(id="mine")
    with pytest.raises(ValueError, match=r"give api_key or api_key_file, not both"):
        WandbLoggerCallback(api_key=KEY, api_key_file=str(tmp_path / "k"))
    with pytest.raises(ValueError, match=r"api_key_file=.*missing.key' cannot be read"):
        WandbLoggerCallback(api_key_file=str(tmp_path / "missing.key"))
    with pytest.raises(RuntimeError, match=r"outside a tunefleet trial"):
        setup_wandb({})


def test_an_api_key_is_hidden_from_every_log_line_and_message(wandb_dir: Path) -> None:
    from tunefleet._redact import redact_text
    from tunefleet.callbacks import WandbLoggerCallback

    key = "wandb-secret-key-" + "7" * 24
    WandbLoggerCallback(api_key=key)
    # tunefleet's log filter and every failure message go through redact_text
    assert redact_text(f"wandb.init failed with key {key}") == "wandb.init failed with key ***"


def flaky(config: dict[str, Any]) -> None:
    start = tune.get_checkpoint()
    first = 0 if start is None else int(Path(start.path, "i").read_text())
    for i in range(first, 4):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "i").write_text(str(i + 1))
            tune.report({"loss": 1.0 / (i + 1)}, checkpoint=tune.Checkpoint.from_directory(folder))
        if i == 1 and not Path(config["flag"]).exists():
            Path(config["flag"]).write_text("failed once")
            raise RuntimeError("fails once after iteration 2")


def test_a_retried_trial_goes_on_logging_into_its_run(
    storage: str, wandb_dir: Path, tmp_path: Path
) -> None:
    from tunefleet.callbacks import WandbLoggerCallback

    grid = tune.Tuner(
        flaky,
        param_space={"flag": str(tmp_path / "flag")},
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            callbacks=[WandbLoggerCallback(project="retry")],
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()
    assert grid.num_errors == 0
    (run_dir,) = run_dirs(wandb_dir, grid[0].trial_id)  # one run for both attempts
    run = read_run(run_dir)
    assert [r["training_iteration"] for r in run["history"]] == [1, 2, 3, 4]
    assert run["exit_code"] == 0 and run["summary"]["loss"] == pytest.approx(0.25)


def test_log_config_follows_a_changing_config_and_excludes_drop_keys(
    wandb_dir: Path, tmp_path: Path
) -> None:
    from tunefleet.callbacks import WandbLoggerCallback
    from tunefleet.trial import Trial

    trial = Trial(
        "cafe0_00000",
        0,
        "pbt_00000",
        {"lr": 0.1},
        {"cpu": 1},
        str(tmp_path / "exp" / "trials" / "t0"),
    )
    callback = WandbLoggerCallback(project="pbt", log_config=True, excludes=["extra"])
    callback.on_trial_start(0, [trial], trial)
    callback.on_trial_result(
        0, [trial], trial, {"training_iteration": 1, "acc": 0.5, "extra": {"a": 1}}
    )
    trial.config = {"lr": 0.05}  # as a PBT exploit changes it
    trial.last_result = {"training_iteration": 2, "acc": 0.75, "extra": {"a": 2}}
    callback.on_trial_result(0, [trial], trial, trial.last_result)
    callback.on_trial_complete(0, [trial], trial)
    callback.on_experiment_end([trial])
    (run_dir,) = run_dirs(wandb_dir, "cafe0_00000")
    run = read_run(run_dir)
    assert run["config"]["lr"] == 0.05 and run["project"] == "pbt" and run["group"] == "exp"
    assert run["history"] == [
        {"acc": 0.5, "training_iteration": 1},
        {"acc": 0.75, "training_iteration": 2},
    ]
    assert "extra/a" not in run["summary"] and run["summary"]["acc"] == 0.75
