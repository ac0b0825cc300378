"""The `tunefleet` command line, on experiments written directly through the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tunefleet
from tunefleet.cli import main
from tunefleet.store import ExperimentStore
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

PACKAGE_ROOT = str(Path(tunefleet.__file__).resolve().parent.parent)


def add_trial(
    store: ExperimentStore,
    exp: Path,
    index: int,
    losses: list[float],
    status: TrialStatus,
    error: FailureRecord | None = None,
    checkpoint: bool = False,
) -> Trial:
    trial = Trial(
        trial_id=f"t{index:04d}",
        index=index,
        name=f"train_t{index:04d}",
        config={"lr": 0.1 / (index + 1), "model": {"layers": index + 1}},
        resources={"cpu": 1.0},
        path=str(exp / "trials" / f"t{index:04d}"),
    )
    store.add_trial(trial)
    for it, loss in enumerate(losses, start=1):
        trial.last_result = {"training_iteration": it, "loss": loss}
        store.add_result(trial.trial_id, trial.last_result)
    if checkpoint and trial.last_result:
        trial.latest_checkpoint = os.path.join(trial.path, "checkpoints", "checkpoint_000003")
        store.add_checkpoint(trial.trial_id, 3, trial.latest_checkpoint, trial.last_result)
    trial.status, trial.error = status, error
    if error is not None:
        store.add_event(trial.trial_id, "failed", error.to_json())
    store.update_trial(trial)
    return trial


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    alpha = root / "alpha"
    with ExperimentStore(alpha) as store:
        store.write_meta(
            {"name": "alpha", "metric": "loss", "mode": "min", "status": "finished",
             "trainable": "train_fn", "created_at": 1.0}
        )  # fmt: skip
        add_trial(store, alpha, 0, [3.0, 2.0, 1.0], TrialStatus.TERMINATED)
        add_trial(store, alpha, 1, [2.0, 0.5, 0.7], TrialStatus.TERMINATED, checkpoint=True)
        raised = FailureRecord(
            kind=FailureKind.EXCEPTION,
            message="lr too high",
            exception_type="ValueError",
            traceback='Traceback (most recent call last):\n  File "train.py", line 3\n'
            "ValueError: lr too high",
            iteration=2,
        )
        add_trial(store, alpha, 2, [9.0, 9.5], TrialStatus.ERROR, error=raised)
        crash = FailureRecord(kind=FailureKind.CRASH, message="", signal="SIGKILL", attempt=0)
        crashed = add_trial(store, alpha, 3, [], TrialStatus.ERROR, error=crash)
        Path(crashed.path).mkdir(parents=True)
        Path(crashed.path, "stderr.log").write_text("line 1\nSegmentation fault (core dumped)\n")
        # a trial that failed once and succeeded on its retry
        retried = FailureRecord(kind=FailureKind.OOM, message="used 2.1GB of 2GB", attempt=0)
        store.add_event("t0001", "failed", retried.to_json())
    with ExperimentStore(root / "beta") as store:
        store.write_meta({"name": "beta", "status": "running"})
        add_trial(store, root / "beta", 0, [1.0], TrialStatus.RUNNING)
    return root


def run_cli(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_ls(storage: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "ls", storage)
    assert code == 0
    header, alpha, beta = out.splitlines()
    assert header.split()[:3] == ["NAME", "STATUS", "TRIALS"] and "TERMINATED" in header
    assert alpha.split()[:3] == ["alpha", "finished", "4"]
    assert "loss=0.7 (t0001)" in alpha  # best by last value
    assert beta.split()[:3] == ["beta", "running", "1"] and " - " in beta


def test_ls_uses_the_environment_and_handles_nothing(
    storage: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TUNEFLEET_STORAGE", str(storage))
    code, out, _ = run_cli(capsys, "ls")
    assert code == 0 and "alpha" in out
    code, out, _ = run_cli(capsys, "ls", tmp_path / "void")
    assert code == 0 and out.startswith("No experiments under")


def test_ls_shows_a_broken_experiment_without_failing(
    storage: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (storage / "broken").mkdir()
    (storage / "broken" / "experiment.db").write_text("this is not a database")
    code, out, _ = run_cli(capsys, "ls", storage)
    assert code == 0
    assert any(line.startswith("broken") and "unreadable" in line for line in out.splitlines())
    assert "alpha" in out


def test_show(storage: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "show", "alpha", "--storage", storage)
    assert code == 0
    assert "metric: loss (min)" in out and "4 trials: 2 error, 2 terminated" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("t000")}
    assert rows["t0001"].split()[:5] == ["t0001", "TERMINATED", "3", "0.7", "0.5"]
    assert "lr=0.05 model/layers=2" in rows["t0001"]
    assert rows["t0003"].split()[:5] == ["t0003", "ERROR", "0", "-", "-"]


def test_show_a_path_and_another_metric(storage: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "show", storage / "beta", "--metric", "loss", "--mode", "max")
    assert code == 0 and "LAST loss" in out and "t0000  RUNNING" in out


def test_best(storage: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "best", "alpha", "--storage", storage)
    assert code == 0
    assert out.startswith("Best trial: t0001 (train_t0001), TERMINATED, 3 iterations")
    assert "loss = 0.7 (mode min, scope last)" in out
    config = out.split("Config:\n")[1].split("Metrics:\n")[0]
    assert json.loads(config) == {"lr": 0.05, "model": {"layers": 2}}
    assert f"Checkpoint: {storage}/alpha/trials/t0001/checkpoints/checkpoint_000003" in out


def test_best_with_another_scope_and_errors(
    storage: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "best", storage / "alpha", "--scope", "avg", "--mode", "max")
    assert code == 0 and out.startswith("Best trial: t0002")
    code, _, err = run_cli(capsys, "best", storage / "beta")
    assert code == 2 and "no metric given" in err
    code, _, err = run_cli(capsys, "best", storage / "alpha", "--metric", "acc")
    assert code == 1 and "no trial reported 'acc'" in err and "Metrics reported:" in err


def test_errors(storage: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "errors", "alpha", "--storage", storage)
    assert code == 0
    assert out.startswith("2 of 4 trials failed in alpha")
    assert "t0002 (train_t0002): EXCEPTION at iteration 2: ValueError: lr too high" in out
    assert '    File "train.py", line 3' in out
    (crash_line,) = [line for line in out.splitlines() if line.startswith("t0003")]
    assert crash_line.startswith("t0003 (train_t0003): CRASH") and "SIGKILL" in crash_line
    assert "Segmentation fault (core dumped)" in out  # from the trial's stderr.log
    assert "1 failed attempt(s) were retried; `tunefleet errors alpha --all` lists them" in out

    code, out, _ = run_cli(capsys, "errors", "alpha", "--storage", storage, "--all")
    assert code == 0
    assert "t0001 (train_t0001) (attempt 1): OOM: used 2.1GB of 2GB" in out

    code, out, _ = run_cli(capsys, "errors", storage / "beta")
    assert code == 0 and out.strip() == "No failed trials in beta (1 trials)"


def test_a_bad_experiment_name_exits_2_listing_what_exists(
    storage: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("show", "best", "errors"):
        code, out, err = run_cli(capsys, command, "alpah", "--storage", storage)
        assert code == 2 and out == ""
        assert "No experiment 'alpah'" in err and "Did you mean 'alpha'?" in err
        assert "alpha, beta" in err


def test_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys)
    assert code == 2 and "COMMAND" in err
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "errors" in out
    code, _, err = run_cli(capsys, "best", "x", "--scope", "median")
    assert code == 2 and "invalid choice" in err


def test_python_dash_m_tunefleet_in_a_subprocess(storage: Path) -> None:
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT, "TUNEFLEET_STORAGE": str(storage)}
    proc = subprocess.run(
        [sys.executable, "-m", "tunefleet", "show", "alpha"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Experiment alpha at" in proc.stdout and "t0003" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "tunefleet", "show", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2 and "No experiment 'nope'" in proc.stderr
