"""Trial limits with real processes: timeouts, heartbeats, kills, stale attempts, process trees.

Timings are short (1-2 s limits) and nothing asserts how long a kill took, only that
it happened: other tests may be loading this small machine at the same time.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import pid_alive
from tests.helpers.results import metrics_of
from tunefleet.backends import Failed, Results, TrialLaunch
from tunefleet.backends._protocol import FromWorker, TrialResults
from tunefleet.backends.local import LocalBackend
from tunefleet.store import StoreReader


def wait_for(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def run(trainable: Any, storage: str, **kwargs: Any) -> tune.ResultGrid:
    failure = tune.FailureConfig(**kwargs.pop("failure", {}))
    return tune.Tuner(
        trainable,
        param_space=kwargs.pop("param_space", {}),
        tune_config=tune.TuneConfig(**kwargs.pop("tune", {})),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, failure_config=failure),
    ).fit()


def failed_events(grid: tune.ResultGrid, trial_id: str) -> list[dict[str, Any]]:
    with StoreReader(grid.experiment_path) as reader:
        return [e["data"] for e in reader.events(trial_id, "failed")]


def write_pid(directory: str, name: str) -> None:
    Path(directory, f"{name}.tmp").write_text(str(os.getpid()))
    os.replace(Path(directory, f"{name}.tmp"), Path(directory, name))  # seen whole or not at all


def read_pid(directory: Path, name: str) -> int:
    wait_for(lambda: (directory / name).exists(), what=f"pid file {name}")
    return int((directory / name).read_text())


# -- trial timeout and heartbeat ------------------------------------------------------------


def keeps_reporting(config: dict[str, Any]) -> None:
    print("stderr line of a slow trial", file=sys.stderr, flush=True)
    for i in range(100_000):
        tune.report(loss=1.0 / (i + 1))
        time.sleep(0.05)


def test_trial_timeout_kills_the_attempt_and_names_the_limit(storage: str) -> None:
    grid = run(keeps_reporting, storage, failure={"trial_timeout_s": 1.5})
    (result,) = list(grid)
    assert result.error is not None
    failure = result.error.failure
    assert failure.kind is tune.FailureKind.TIMEOUT
    assert "(trial_timeout_s=1.5)" in failure.message and "ran " in failure.message
    assert failure.iteration is not None and failure.iteration >= 1
    assert "stderr line of a slow trial" in (failure.stderr_tail or "")
    events = failed_events(grid, result.trial_id)
    assert [e["kind"] for e in events] == ["TIMEOUT"]  # the worker's death is not a CRASH too


def reports_then_hangs(config: dict[str, Any]) -> None:
    if config["report_first"]:
        tune.report(loss=1.0)
    time.sleep(600)


@pytest.mark.parametrize("report_first", [True, False], ids=["reported-once", "never-reported"])
def test_heartbeat_timeout_kills_a_silent_trial(storage: str, report_first: bool) -> None:
    config = {"report_first": report_first}
    grid = run(reports_then_hangs, storage, param_space=config, failure={"heartbeat_timeout_s": 1})
    (result,) = list(grid)
    assert result.error is not None
    failure = result.error.failure
    assert failure.kind is tune.FailureKind.TIMEOUT
    assert "(heartbeat_timeout_s=1)" in failure.message and "no report for" in failure.message
    if report_first:
        assert failure.iteration == 1
    else:
        assert "since it started" in failure.message
    assert [e["kind"] for e in failed_events(grid, result.trial_id)] == ["TIMEOUT"]


def deaf_then_next(config: dict[str, Any]) -> None:
    if config["role"] == "deaf":
        write_pid(config["pids"], "deaf")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        tune.report(loss=1.0)
        time.sleep(600)
    deaf = int(Path(config["pids"], "deaf").read_text())
    tune.report(loss=0.5, deaf_alive=os.path.exists(f"/proc/{deaf}"))


def test_a_trial_ignoring_sigterm_is_killed_before_its_cpu_is_reused(
    storage: str, tmp_path: Path
) -> None:
    # One CPU: the next trial can only start once the deaf one has released it.
    grid = tune.Tuner(
        deaf_then_next,
        param_space={"pids": str(tmp_path), "role": tune.grid_search(["deaf", "next"])},
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            resources={"cpu": 1},
            failure_config=tune.FailureConfig(heartbeat_timeout_s=1),
        ),
    ).fit()
    by_role = {r.config["role"]: r for r in grid}
    deaf = by_role["deaf"].error
    assert deaf is not None and deaf.failure.kind is tune.FailureKind.TIMEOUT
    assert [e["kind"] for e in failed_events(grid, by_role["deaf"].trial_id)] == ["TIMEOUT"]
    assert by_role["next"].error is None
    assert metrics_of(by_role["next"])["deaf_alive"] is False  # SIGKILLed (and reaped) first


# -- stale attempts -------------------------------------------------------------------------

N = 30


def stalls_once(config: dict[str, Any]) -> None:
    start = 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "it").read_text())
    attempt = tune.get_context().attempt
    continued = Path(config["pids"], "continued")
    if attempt == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so that SIGCONT lets it run on, stale
    else:
        write_pid(config["pids"], f"attempt{attempt}")
    for i in range(start, N):
        if i == 3 and attempt == 0:
            write_pid(config["pids"], "attempt0")
        ckpt_dir = Path(config["pids"], f"ckpt_{attempt}_{i}")
        ckpt_dir.mkdir()
        (ckpt_dir / "it").write_text(str(i + 1))
        # Once continued, the stale attempt reports without checkpoints: its checkpoint
        # directories would have the same names as the new attempt's.
        checkpoint = None if continued.exists() else tune.Checkpoint.from_directory(str(ckpt_dir))
        if attempt == 0 and continued.exists():
            Path(config["pids"], f"stale_{i}").touch()
        tune.report({"loss": 1.0 / (i + 1), "attempt": attempt}, checkpoint=checkpoint)
        time.sleep(0.05)


@pytest.mark.parametrize("leaky_backend", [False, True], ids=["backend-drops", "controller-drops"])
def test_sigstopped_attempt_times_out_and_its_late_results_are_dropped(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaky_backend: bool
) -> None:
    stopped: list[int] = []
    leaked: list[Any] = []
    if leaky_backend:  # deliver what the timed-out attempt still sends: the controller must drop it
        handle = LocalBackend._handle

        def leaky(self: LocalBackend, worker: Any, msg: FromWorker, events: list[Any]) -> None:
            timed_out, worker.timed_out = worker.timed_out, False
            try:
                handle(self, worker, msg, events)
            finally:
                worker.timed_out = timed_out
            if timed_out and isinstance(msg, TrialResults):
                leaked.append(msg)

        monkeypatch.setattr(LocalBackend, "_handle", leaky)

    def freeze_then_thaw() -> None:
        pid = read_pid(tmp_path, "attempt0")
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)
        read_pid(tmp_path, "attempt1")  # the retry runs on a new worker
        # Let the retry get ahead, so that a checkpoint the old attempt was writing when it
        # was frozen is not one the retry is writing now (they would have the same name).
        wait_for(lambda: len(list(tmp_path.glob("ckpt_1_*"))) >= 8, what="the retry to run")
        (tmp_path / "continued").touch()
        if pid_alive(pid):
            os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=freeze_then_thaw, daemon=True)
    thread.start()
    try:
        grid = run(
            stalls_once,
            storage,
            param_space={"pids": str(tmp_path)},
            failure={"heartbeat_timeout_s": 2, "max_failures": 1},
        )
    finally:
        thread.join(timeout=30)
        for pid in stopped:
            if pid_alive(pid):
                os.kill(pid, signal.SIGCONT)
    assert stopped, "the first attempt was never stopped"
    (result,) = list(grid)
    assert result.error is None
    with StoreReader(grid.experiment_path) as reader:
        trial = reader.trial(result.trial_id)
        results = reader.results(result.trial_id)
        failed = [e["data"] for e in reader.events(result.trial_id, "failed")]
        started = [e["data"] for e in reader.events(result.trial_id, "started")]
    assert trial.status is tune.TrialStatus.TERMINATED
    assert [r["training_iteration"] for r in results] == list(range(1, N + 1))
    assert {r["attempt"] for r in results} == {0, 1}
    assert {r["pid"] for r in results if r["attempt"] == 1} != {stopped[0]}
    assert [f["kind"] for f in failed] == ["TIMEOUT"]
    assert [s["epoch"] for s in started] == [1, 2] and started[1]["checkpoint"]
    assert not pid_alive(stopped[0])
    if leaky_backend and list(tmp_path.glob("stale_*")):
        assert leaked, "the stale attempt reported, but nothing of it reached the controller"


def reports_forever(config: dict[str, Any]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write_pid(config["pids"], "worker")
    i = 0
    while True:
        i += 1
        tune.report(loss=float(i))
        time.sleep(0.02)


def test_backend_delivers_nothing_from_an_attempt_after_its_timeout(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    backend = LocalBackend(
        trainable=reports_forever,
        experiment_name="stale",
        experiment_path=str(tmp_path / "exp"),
        resources={"cpu": 1},
        kill_grace_s=1.5,
    )
    launch = TrialLaunch(
        trial_id="t0",
        epoch=1,
        name="t0",
        config={"pids": str(pids)},
        resources={"cpu": 1.0},
        trial_dir=str(tmp_path / "exp" / "t0"),
        heartbeat_s=1.0,
    )
    try:
        backend.start_trial(launch)
        assert not backend.can_start({"cpu": 1.0})
        pid = read_pid(pids, "worker")
        events: list[Any] = []
        after: list[Any] = []

        def reported() -> bool:
            events.extend(backend.poll(0.05))
            return bool(events)

        def timed_out() -> bool:
            events.extend(backend.poll(0.05))
            return isinstance(events[-1], Failed)

        def killed() -> bool:
            after.extend(backend.poll(0.05))
            return not pid_alive(pid)

        wait_for(reported, what="a result")
        os.kill(pid, signal.SIGSTOP)
        wait_for(timed_out, what="the heartbeat timeout")
        os.kill(pid, signal.SIGCONT)  # SIGTERM is ignored: it reports until the SIGKILL
        wait_for(killed, what="kill")
        while not backend.can_start({"cpu": 1.0}):  # released once the process died
            after.extend(backend.poll(0.05))
    finally:
        backend.shutdown()
    assert [type(e) for e in events if not isinstance(e, Results)] == [Failed]
    assert events[-1].failure.kind is tune.FailureKind.TIMEOUT
    assert after == []
    assert backend.capacity()["cpu"] == 1.0 and backend._pool.free["cpu"] == 1.0


# -- process trees ----------------------------------------------------------------------------

SLEEPER = (  # argv[1]: the folder where it leaves its pid
    "import os, sys, time; "
    "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close(); time.sleep(600)"
)
PARENT = (
    "import subprocess, sys, time; "
    f"subprocess.Popen([sys.executable, '-c', {SLEEPER!r}, sys.argv[1]]); "
    "exec(" + repr(SLEEPER) + ")"
)
DAEMON = (  # double fork, the grandchild in a session of its own
    "import os, sys\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    f"        exec({SLEEPER!r})\n"
    "    os._exit(0)\n"
    "os.wait()\n"
)


def spawns_a_tree(config: dict[str, Any]) -> None:
    root = Path(config["pids"])
    root.mkdir(exist_ok=True)
    earlier = [int(p.name) for p in root.glob("*/*")]  # of trials run before in this worker
    pids = root / tune.get_context().get_trial_id()
    pids.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(pids)])
        for code in (SLEEPER, PARENT, DAEMON)
    ]
    procs[2].wait()  # the daemon's parent exits: the daemon is an orphan
    deadline = time.monotonic() + 30
    while len(os.listdir(pids)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    key_seen = "TUNEFLEET_TRAINABLE_KEY" in os.environ
    tune.report(loss=1.0, leftovers=sum(pid_alive(p) for p in earlier), key_seen=key_seen)
    if config["end"] == "times_out":
        time.sleep(600)


def spawned_pids(root: Path) -> list[int]:
    return [int(p.name) for p in root.glob("*/*")]


@pytest.mark.parametrize("end", ["returns", "times_out"])
def test_no_process_of_a_trial_survives_it(storage: str, tmp_path: Path, end: str) -> None:
    grid = run(
        spawns_a_tree,
        storage,
        param_space={"pids": str(tmp_path / "pids"), "end": end},
        failure={"heartbeat_timeout_s": 1.5},
    )
    (result,) = list(grid)
    if end == "times_out":
        assert result.error is not None
        assert result.error.failure.kind is tune.FailureKind.TIMEOUT
    else:
        assert result.error is None
    spawned = spawned_pids(tmp_path / "pids")
    assert len(spawned) == 4  # child, child's child, grandchild, double-forked daemon
    wait_for(lambda: not [p for p in spawned if pid_alive(p)], timeout=10, what="the tree to die")


def test_a_reused_worker_starts_the_next_trial_clean(storage: str, tmp_path: Path) -> None:
    grid = run(
        spawns_a_tree,
        storage,
        param_space={"pids": str(tmp_path / "pids"), "end": "returns"},
        tune={"num_samples": 2, "max_concurrent_trials": 1},
    )
    assert grid.num_terminated == 2
    first, second = sorted(grid, key=lambda r: r.trial_id)
    assert metrics_of(first)["pid"] == metrics_of(second)["pid"]  # the same worker ran both
    assert metrics_of(second)["leftovers"] == 0
    assert not metrics_of(first)["key_seen"]  # the trainable file's key stays in the worker
    assert len(spawned_pids(tmp_path / "pids")) == 8
    assert not [p for p in spawned_pids(tmp_path / "pids") if pid_alive(p)]


# -- the trainable file ----------------------------------------------------------------------


def plain(config: dict[str, Any]) -> None:
    tune.report(loss=1.0)


class _Marker:
    """Unpickling this creates a file: proof that a tampered file was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


@pytest.mark.parametrize("tamper", ["payload", "other_run"])
def test_a_tampered_trainable_file_is_refused(tmp_path: Path, tamper: str) -> None:
    marker = tmp_path / "unpickled"
    exp = tmp_path / "exp"
    backend = LocalBackend(trainable=plain, experiment_name="x", experiment_path=str(exp))
    path = exp / ".tunefleet" / "trainable.pkl"
    data = path.read_bytes()
    if tamper == "payload":
        header = data[: data.index(b"\n", data.index(b"\n") + 1) + 1]
        path.write_bytes(header + pickle.dumps(_Marker(str(marker))))
    else:  # a file another run wrote (with another key), e.g. left from an earlier run
        other = LocalBackend(trainable=plain, experiment_name="x", experiment_path=str(tmp_path))
        data = (tmp_path / ".tunefleet" / "trainable.pkl").read_bytes()
        other.shutdown()
        path.write_bytes(data)
    launch = TrialLaunch(
        trial_id="t0",
        epoch=1,
        name="t0",
        config={},
        resources={"cpu": 1.0},
        trial_dir=str(exp / "t0"),
    )
    try:
        backend.start_trial(launch)
        wait_for(lambda: backend.poll(0.05) is not None and backend.fatal is not None)
    finally:
        backend.shutdown()
    assert backend.fatal is not None
    assert str(path) in backend.fatal.message and "HMAC" in backend.fatal.message
    assert "TrainableFileError" in (backend.fatal.traceback or "")
    assert not marker.exists()
    assert "TUNEFLEET_TRAINABLE_KEY" not in (exp / ".tunefleet" / "workers.log").read_text()


def test_trainable_file_round_trip_and_refusals(tmp_path: Path) -> None:
    from tunefleet.backends.local._trainable_file import (
        TrainableFileError,
        new_key,
        read_trainable_file,
        write_trainable_file,
    )

    path = str(tmp_path / "t.pkl")
    key = new_key()
    write_trainable_file(path, {"trainable": plain}, key)
    assert read_trainable_file(path, key)["trainable"] is plain
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert key.hex().encode() not in Path(path).read_bytes()
    with pytest.raises(TrainableFileError, match="HMAC"):
        read_trainable_file(path, new_key())
    with pytest.raises(TrainableFileError, match="no key"):
        read_trainable_file(path, b"")
    Path(path).write_bytes(Path(path).read_bytes()[:-1] + b"!")
    with pytest.raises(TrainableFileError, match="HMAC"):
        read_trainable_file(path, key)
    Path(path).write_bytes(b"junk")
    with pytest.raises(TrainableFileError, match="HMAC"):
        read_trainable_file(path, key)
