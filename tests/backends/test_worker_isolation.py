"""What a local worker keeps from its trials: no daemon outlives the driver, and the key
that verifies the trainable file is never in a worker's environment or arguments."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil

import tunefleet as tune
from tests.helpers.processes import pid_alive
from tests.helpers.scripts import script_env

_DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import tunefleet as tune

    def daemonise(config):
        if os.fork() == 0:  # the classic double fork: a daemon in a session of its own
            os.setsid()
            if os.fork() == 0:
                with open(config["pid_file"] + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(config["pid_file"] + ".tmp", config["pid_file"])
                while True:
                    time.sleep(60)
            os._exit(0)
        open(config["ready_file"], "w").close()
        while True:  # a long step: the driver is killed meanwhile
            time.sleep(60)

    tune.Tuner(
        daemonise,
        param_space={"pid_file": sys.argv[2], "ready_file": sys.argv[3]},
        run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
    ).fit()
    """
)


def _wait_for(check: Any, what: str, timeout: float = 60.0) -> None:
    """Poll `check()` until it is true; the timeout is only a safety net."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what} after {timeout:.0f} s"
        time.sleep(0.05)


def test_a_daemon_a_trial_started_dies_when_the_driver_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    pid_file, ready_file = tmp_path / "daemon.pid", tmp_path / "ready"
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "results"), str(pid_file), str(ready_file)],
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    daemon = 0
    try:
        _wait_for(
            lambda: (pid_file.exists() and ready_file.exists()) or driver.poll() is not None,
            "the trial and its daemon",
        )
        assert driver.poll() is None, driver.communicate()[1].decode()[-3000:]
        daemon = int(pid_file.read_text())
        assert pid_alive(daemon)
        worker = psutil.Process(daemon).parent()  # a subreaper: the orphan is its child
        assert worker is not None and os.getsid(daemon) != os.getsid(worker.pid), (
            "the daemon left the worker's session (and process group)"
        )
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        _wait_for(lambda: not pid_alive(daemon), f"the daemon (pid {daemon}) to be killed")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if daemon and pid_alive(daemon):
            os.kill(daemon, signal.SIGKILL)
        if driver.stderr is not None:
            driver.stderr.close()


def _key_exposure(config: dict[str, Any]) -> None:
    """Report which of this trial's process and its parent show the trainable file's HMAC
    key (as hex) in their environment or arguments: every 64-hex-digit word is tried."""
    import glob
    import re

    from tunefleet.backends.local._trainable_file import TrainableFileError, read_trainable_file

    (path,) = glob.glob(os.path.join(config["storage"], "*", ".tunefleet", "trainable.pkl"))

    def is_key(word: str) -> bool:
        try:
            read_trainable_file(path, bytes.fromhex(word))
        except TrainableFileError:
            return False
        return True

    exposed, tried = [], 0
    for pid, who in ((os.getpid(), "worker"), (os.getppid(), "driver")):
        for what in ("environ", "cmdline"):
            with open(f"/proc/{pid}/{what}", "rb") as f:
                text = f.read().decode("utf-8", "replace")
            for word in re.findall(r"[0-9a-fA-F]{64,}", text):
                tried += 1
                if is_key(word[:64]) or is_key(word[-64:]):
                    exposed.append(f"{who} {what}")
    tune.report(loss=0.0, pid=os.getpid(), exposed=",".join(exposed), tried=tried)


def test_the_trainable_key_is_in_no_workers_environment_or_arguments(storage: str) -> None:
    grid = tune.Tuner(
        _key_exposure,
        param_space={"storage": storage},
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    result = grid[0]
    assert result.error is None, result.error
    assert result.metrics["pid"] != os.getpid(), "the trial runs in a worker process"
    assert result.metrics["exposed"] == "", result.metrics


def _fork_then_die(config: dict[str, Any]) -> None:
    child = os.fork()
    if child == 0:  # the child holds the worker's channel open, and lives on
        time.sleep(3600)
        os._exit(0)
    Path(config["child_pid"]).write_text(str(child))
    tune.report({"loss": 1.0})
    os.kill(os.getpid(), signal.SIGKILL)  # the worker itself dies


def test_a_worker_that_dies_while_a_forked_child_holds_its_channel_is_seen_dead(
    tmp_path: Path,
) -> None:
    # the channel never closes (the child has a copy of it): the backend must learn of
    # the death from the process itself, and kill the child with it
    child_pid = tmp_path / "child.pid"
    grid = tune.Tuner(
        _fork_then_die,
        param_space={"child_pid": str(child_pid)},
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), verbose=0, failure_config=tune.FailureConfig(max_failures=0)
        ),
    ).fit()
    (error,) = grid.errors
    assert "SIGKILL" in str(error)
    assert grid[0].metrics["loss"] == 1.0  # its result before the death is kept
    child = int(child_pid.read_text())
    _wait_for(lambda: not pid_alive(child), "the forked child to be killed")
