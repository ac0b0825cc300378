"""A driver killed for real leaves its experiment recorded "running": `tunefleet ls`,
`tunefleet show` and the dashboard show it as interrupted and resumable.

The driver is a real subprocess whose trial writes a ready file and then waits
forever; the test SIGKILLs the driver and waits for its exit. The lock file names the
driver's pid and start time, so a reused pid (a live process started at another
moment) is not mistaken for the driver.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.scripts import script_env
from tunefleet.cli.main import main
from tunefleet.dashboard._data import experiment_view, experiments_list, poll
from tunefleet.store._check import DriverLock, driver_alive

TRAINABLE = textwrap.dedent(
    """
    import threading
    from pathlib import Path

    def hold(config):
        Path(config["ready"]).touch()
        threading.Event().wait()  # until the worker is killed
    """
)

DRIVER = textwrap.dedent(
    """
    import sys
    import tunefleet as tune
    from stale_trainable import hold

    if __name__ == "__main__":
        tune.run(hold, config={"ready": sys.argv[2]}, storage_path=sys.argv[1], name="exp")
    """
)


def _wait_for(ready: Path, driver: subprocess.Popen[str], timeout: float = 120.0) -> None:
    """Until the trial has written `ready` (an event); fail if the driver ends first."""
    deadline = time.monotonic() + timeout  # a guard against a hang only
    while not ready.exists():
        if driver.poll() is not None:
            out = driver.stdout.read() if driver.stdout else ""
            pytest.fail(f"the driver exited with {driver.returncode} first:\n{out[-4000:]}")
        assert time.monotonic() < deadline, "the trial never started"
        time.sleep(0.02)


def _ls(storage: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["ls", str(storage)]) == 0
    return capsys.readouterr().out


def _kill_workers(experiment: Path) -> None:
    """The trial's worker dies with its driver (its watchdog); make sure of it."""
    marker = str(experiment)
    workers = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                workers.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    _, alive = psutil.wait_procs(workers, timeout=30)
    for proc in alive:
        proc.kill()


@pytest.mark.timeout(300)
def test_sigkilled_driver_shows_interrupted_and_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "stale_trainable.py").write_text(TRAINABLE)
    (tmp_path / "driver.py").write_text(DRIVER)
    storage, ready = tmp_path / "results", tmp_path / "ready"
    env = script_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    driver = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(storage), str(ready)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    experiment = storage / "exp"
    try:
        _wait_for(ready, driver)
        assert driver_alive(experiment) is True
        running = _ls(storage, capsys)
        assert "running" in running and "interrupted" not in running, running
        assert experiments_list(storage)[0]["status"] == "running"
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
        _kill_workers(experiment)

    lock, db = experiment / ".tunefleet" / "driver.lock", experiment / "experiment.db"
    before = [(p.read_bytes(), p.stat().st_mtime_ns) for p in (lock, db)]
    assert driver_alive(experiment) is False
    out = _ls(storage, capsys)
    row = next(line for line in out.splitlines() if line.startswith("exp "))
    assert row.split()[1] == "interrupted", out
    assert "tunefleet resume exp --script" in out, out
    assert main(["show", str(experiment)]) == 0
    shown = capsys.readouterr().out
    assert "status: interrupted (the driver is gone; resume with: tunefleet resume exp" in shown
    listed = experiments_list(storage)[0]
    assert listed["status"] == "interrupted" and listed["resume"].startswith("tunefleet resume")
    view = experiment_view(experiment)
    assert view["meta"]["status"] == "interrupted"
    assert view["meta"]["resume"].startswith("tunefleet resume exp")
    assert poll(experiment)["status"] == "interrupted"
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in (lock, db)] == before  # read only


def _lock_file(experiment: Path, pid: int, started: float, host: str) -> None:
    lock = experiment / ".tunefleet" / "driver.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(f"{pid} {started!r} {host}\n")


def test_a_lock_naming_a_reused_pid_is_stale(tmp_path: Path) -> None:
    me = psutil.Process(os.getpid())
    host = socket.gethostname()
    assert driver_alive(tmp_path) is None  # no driver ever ran here
    _lock_file(tmp_path, me.pid, me.create_time() - 3600.0, host)  # the pid, reused
    assert driver_alive(tmp_path) is False
    _lock_file(tmp_path, me.pid, me.create_time(), host)  # no flock, but the same process
    assert driver_alive(tmp_path) is True
    _lock_file(tmp_path, me.pid, me.create_time(), host + "-elsewhere")  # its flock answered
    assert driver_alive(tmp_path) is False
    with DriverLock(tmp_path):  # the flock held
        assert driver_alive(tmp_path) is True
        fields = (tmp_path / ".tunefleet" / "driver.lock").read_text().split()
        assert fields[0] == str(os.getpid()) and fields[2] == host
        assert float(fields[1]) == pytest.approx(me.create_time())
    assert driver_alive(tmp_path) is True  # released, but this process still runs
