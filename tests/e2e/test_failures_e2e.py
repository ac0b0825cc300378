"""Failure truth with real processes: exceptions, crashes, kills, Ctrl-C, no orphans."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import pid_alive
from tests.helpers.results import metrics_of
from tunefleet.store import StoreReader


def misbehave(config: dict[str, Any]) -> None:
    tune.report(loss=1.0)
    how = config["how"]
    if how == "raise":
        raise ValueError("bad learning rate 42")
    if how == "exit":
        print("about to exit", file=sys.stderr, flush=True)
        os._exit(3)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "segfault":
        ctypes.string_at(0)
    if how == "sysexit":
        sys.exit(0)
    tune.report(loss=0.5)


def test_each_failure_is_named_and_the_experiment_goes_on(storage: str) -> None:
    hows = ["raise", "exit", "sigkill", "segfault", "ok", "sysexit"]
    grid = tune.Tuner(
        misbehave,
        param_space={"how": tune.grid_search(hows)},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    by_how = {r.config["how"]: r for r in grid}
    assert by_how["ok"].error is None and metrics_of(by_how["ok"])["loss"] == 0.5
    assert grid.num_errors == 5 and grid.num_terminated == 1

    raised = by_how["raise"].error
    assert raised is not None and raised.failure.kind is tune.FailureKind.EXCEPTION
    assert raised.failure.exception_type == "ValueError"
    assert "bad learning rate 42" in raised.failure.message
    assert "Traceback" in (raised.failure.traceback or "")
    assert "ValueError: bad learning rate 42" in str(raised)

    exited = by_how["exit"].error
    assert exited is not None and exited.failure.kind is tune.FailureKind.CRASH
    assert exited.failure.exit_code == 3
    assert "about to exit" in (exited.failure.stderr_tail or "")

    for how, sig in (("sigkill", "SIGKILL"), ("segfault", "SIGSEGV")):
        err = by_how[how].error
        assert err is not None and err.failure.kind is tune.FailureKind.CRASH, how
        assert err.failure.signal == sig
        assert err.failure.iteration == 1

    sysexit = by_how["sysexit"].error
    assert sysexit is not None and "sys.exit(0)" in sysexit.failure.message

    analysis_errors = {e.trial_id for e in grid.errors}
    assert len(analysis_errors) == 5


def no_report(config: dict[str, Any]) -> None:
    return None


def test_returning_without_reporting_ends_terminated_and_is_said(
    storage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As in Ray Tune the trial ends TERMINATED (no error); tunefleet warns, naming it."""
    with caplog.at_level(logging.WARNING, logger="tunefleet"):
        grid = tune.Tuner(
            no_report, run_config=tune.RunConfig(storage_path=storage, verbose=0)
        ).fit()
    (result,) = list(grid)
    assert result.error is None and result.metrics == {}
    assert grid.num_errors == 0
    with StoreReader(grid.experiment_path) as reader:
        (trial,) = reader.trials()
    assert trial.status is tune.TrialStatus.TERMINATED and trial.num_results == 0
    assert f"Trial {trial.trial_id} finished without reporting a result" in caplog.text


def spawn_and_hang(config: dict[str, Any]) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    grandchild_script = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    )
    child2 = subprocess.Popen([sys.executable, "-c", grandchild_script])
    Path(config["pids"], f"{child.pid}").touch()
    Path(config["pids"], f"{child2.pid}").touch()
    Path(config["pids"], f"{os.getpid()}").touch()
    tune.report(loss=1.0)
    # ignore SIGTERM and never report again: only SIGKILL to the group ends this
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)


def test_stop_kills_the_whole_process_group(storage: str, tmp_path: Path) -> None:
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    grid = tune.Tuner(
        spawn_and_hang,
        param_space={"pids": str(pids_dir)},
        tune_config=tune.TuneConfig(time_budget_s=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    (result,) = list(grid)
    assert result.error is None  # stopped on purpose by the budget: TERMINATED
    assert grid.num_terminated == 1
    pids = [int(p) for p in os.listdir(pids_dir)]
    assert len(pids) == 3
    # SIGKILLed with their group; the kernel reaps the orphans a moment later
    deadline = time.monotonic() + 30
    while [p for p in pids if pid_alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)]


def test_fail_fast_keeps_other_trials_true_states(storage: str) -> None:
    grid = tune.Tuner(
        misbehave,
        param_space={"how": tune.grid_search(["raise", "ok", "ok", "ok"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(
            storage_path=storage, verbose=0, failure_config=tune.FailureConfig(fail_fast=True)
        ),
    ).fit()
    assert grid.num_errors == 1
    assert len(grid) == 1  # the other trials were never started, and are not invented


def test_fail_fast_raise(storage: str) -> None:
    with pytest.raises(tune.TrialError, match="bad learning rate"):
        tune.Tuner(
            misbehave,
            param_space={"how": "raise"},
            run_config=tune.RunConfig(
                storage_path=storage,
                verbose=0,
                failure_config=tune.FailureConfig(fail_fast="raise"),
            ),
        ).fit()


def test_tune_run_raises_on_failed_trial_naming_it(storage: str) -> None:
    with pytest.raises(tune.TuneError, match=r"1 trial\(s\) failed: .*ValueError"):
        tune.run(misbehave, config={"how": "raise"}, storage_path=storage, verbose=0)
    analysis = tune.run(
        misbehave,
        config={"how": tune.grid_search(["raise", "ok"])},
        storage_path=storage,
        verbose=0,
        raise_on_failed_trial=False,
        metric="loss",
        mode="min",
    )
    assert analysis.best_config == {"how": "ok"}


DRIVER = textwrap.dedent(
    """
    import sys, time
    import tunefleet as tune

    def slow(config):
        for i in range(10_000):
            tune.report(loss=1.0 / (i + 1))
            time.sleep(config["pause"])

    if __name__ == "__main__":
        results = tune.Tuner(
            slow,
            param_space={"pause": 0.05 if sys.argv[2] == "responsive" else 600},
            tune_config=tune.TuneConfig(num_samples=4, metric="loss", mode="min"),
            run_config=tune.RunConfig(name="ctrlc", storage_path=sys.argv[1], verbose=1),
        ).fit()
        print("FIT RETURNED", len(results), flush=True)
    """
)


def start_driver(
    storage: str, tmp_path: Path, trials: str, min_results: int
) -> tuple[subprocess.Popen[str], list[int], Path]:
    """A driver process running DRIVER, once two trials have `min_results` results."""
    import psutil

    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), storage, trials],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    db = Path(storage, "ctrlc", "experiment.db")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if db.exists():
            with StoreReader(db.parent) as reader:
                running = [t for t in reader.trials() if t.num_results >= min_results]
            if len(running) >= 2:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("trials did not start")
    workers = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert workers
    return proc, workers, db


def assert_stopped_cleanly(proc: subprocess.Popen[str], workers: list[int], db: Path) -> str:
    out, _ = proc.communicate(timeout=50)
    assert proc.returncode == 0, out
    assert "FIT RETURNED" in out
    assert "Experiment finished" in out
    time.sleep(0.2)
    assert not [p for p in workers if pid_alive(p)]
    with StoreReader(db.parent) as reader:
        assert {t.status for t in reader.trials()} == {tune.TrialStatus.PAUSED}
        assert reader.meta()["status"] == "interrupted"
        assert all(len(reader.results(t.trial_id)) >= 1 for t in reader.trials())
    return out


def test_ctrl_c_stops_cleanly(storage: str, tmp_path: Path) -> None:
    proc, workers, db = start_driver(storage, tmp_path, "responsive", min_results=3)
    proc.send_signal(signal.SIGINT)
    out = assert_stopped_cleanly(proc, workers, db)
    assert "Interrupted again" not in out


def test_second_ctrl_c_kills_trials_that_do_not_listen(storage: str, tmp_path: Path) -> None:
    # The trials sleep 600 s between reports, so they never see the polite stop.
    proc, workers, db = start_driver(storage, tmp_path, "deaf", min_results=1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out = assert_stopped_cleanly(proc, workers, db)
    assert "Interrupted again: killing the trials now" in out
