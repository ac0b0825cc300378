"""Memory limits, the node memory watcher and OOM records, with real allocations.

Every test runs real worker processes and really allocates memory (pages touched)
against small limits; the autouse fixture in conftest.py checks no process is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.backends import Failed, Finished, TrialLaunch, _trial_memory
from tunefleet.backends.local import LocalBackend, _memory, _memory_limits
from tunefleet.store import StoreReader
from tunefleet.trial import FailureRecord

MiB = 1024 * 1024
LIMIT = 150 * MiB
_CHILD_HOG = (
    "import sys, time\n"
    "buf = bytearray(int(sys.argv[1]) * 1024 * 1024)\n"
    "for i in range(0, len(buf), 4096):\n"
    "    buf[i] = 1\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def touch(mb: int) -> bytearray:
    """Really take `mb` MiB: bytearray() maps zero pages lazily, so write one per page."""
    buf = bytearray(mb * MiB)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    return buf


def hog(config: dict[str, Any]) -> None:
    tune.report(loss=1.0)
    if config.get("child"):  # the memory is in a child process of the trial
        hold = str(config.get("hold", 0))  # seconds to keep the memory
        subprocess.run([sys.executable, "-c", _CHILD_HOG, str(config["mb"]), hold], check=True)
        tune.report(loss=0.5)
    else:
        buf = touch(config["mb"])
        tune.report(loss=0.5, held=len(buf))


def fit(trainable: Any, param_space: dict[str, Any], storage: str, **run: Any) -> tune.ResultGrid:
    return tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, **run),
    ).fit()


def oom_of(grid: tune.ResultGrid, **config: Any) -> FailureRecord:
    for result in grid:
        if all(result.config.get(k) == v for k, v in config.items()):
            assert result.error is not None, f"{config} did not fail"
            assert result.error.failure.kind is tune.FailureKind.OOM, result.error.failure
            return result.error.failure
    raise AssertionError(f"no trial with config {config}")


def require(mechanism: str) -> None:
    reason = _memory.why_unavailable(mechanism)
    if reason is not None:
        pytest.skip(f"memory mechanism {mechanism} is not available here: {reason}")


# -- per-trial limits -------------------------------------------------------------------
def test_cgroup_v1_limit_kills_the_trial_and_the_experiment_goes_on(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("cgroup1")
    monkeypatch.setenv(_memory.ENV_MECHANISM, "cgroup1")
    limited = tune.with_resources(hog, {"cpu": 1, "memory": LIMIT})
    space = {"mb": tune.grid_search([300, 20]), "child": tune.grid_search([False, True])}
    grid = fit(limited, space, storage)

    ok = [r for r in grid if r.config["mb"] == 20]
    assert len(ok) == 2 and all(r.error is None and metrics_of(r)["loss"] == 0.5 for r in ok)
    for child in (False, True):
        failure = oom_of(grid, mb=300, child=child)
        assert "cgroup v1" in failure.message and "kernel's OOM killer" in failure.message
        assert failure.memory_limit == LIMIT and "limit 150 MiB" in failure.message
        assert failure.peak_memory is not None and 100 * MiB < failure.peak_memory <= LIMIT
        assert "To fix:" in failure.message and "'memory'" in failure.message
    assert "CalledProcessError" in oom_of(grid, mb=300, child=True).message
    own = _memory_limits.own_cgroup_dir(1)
    assert own is not None
    parent = Path(own) / "tunefleet"
    left = [p.name for p in parent.glob(f"*-{os.getpid()}-*")] if parent.exists() else []
    assert not left, f"cgroups left behind: {left}"


def test_cgroup_v2_limit(storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    require("cgroup2")
    monkeypatch.setenv(_memory.ENV_MECHANISM, "cgroup2")
    grid = fit(tune.with_resources(hog, {"cpu": 1, "memory": LIMIT}), {"mb": 300}, storage)
    failure = oom_of(grid, mb=300)
    assert "cgroup v2" in failure.message and failure.memory_limit == LIMIT


def test_rlimit_turns_memory_error_into_oom(storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    require("rlimit")
    monkeypatch.setenv(_memory.ENV_MECHANISM, "rlimit")
    limited = tune.with_resources(hog, {"cpu": 1, "memory": LIMIT})
    grid = fit(limited, {"mb": tune.grid_search([300, 20])}, storage)
    failure = oom_of(grid, mb=300)
    assert "raised MemoryError at its memory limit (RLIMIT_AS)" in failure.message
    assert failure.memory_limit == LIMIT and "limit 150 MiB" in failure.message
    assert failure.exception_type == "MemoryError" and failure.peak_memory
    (ok,) = [r for r in grid if r.config["mb"] == 20]
    assert ok.error is None and metrics_of(ok)["loss"] == 0.5


def test_tree_watcher_kills_a_child_over_the_limit(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_memory.ENV_MECHANISM, "watcher")
    limited = tune.with_resources(hog, {"cpu": 1, "memory": LIMIT})
    grid = fit(limited, {"mb": 300, "child": True, "hold": 30}, storage)
    failure = oom_of(grid, mb=300)
    assert "memory watcher" in failure.message and failure.signal == "SIGKILL"
    assert failure.memory_limit == LIMIT
    assert failure.peak_memory is not None and failure.peak_memory > LIMIT


def take(config: dict[str, Any]) -> None:
    buf = touch(config["mb"])
    tune.report(loss=1.0, pid=os.getpid(), held=len(buf))


def run_to_end(backend: LocalBackend, launch: TrialLaunch) -> list[Any]:
    backend.start_trial(launch)
    events: list[Any] = []

    def ended() -> bool:
        events.extend(backend.poll(0.05))
        return any(isinstance(e, (Finished, Failed)) for e in events)

    assert wait_for(ended), f"{launch.trial_id} did not end"
    return events


@pytest.mark.parametrize("mechanism", ["cgroup1", "rlimit"])
def test_a_reused_worker_gets_each_trials_own_limit(tmp_path: Path, mechanism: str) -> None:
    require(mechanism)
    backend = LocalBackend(
        trainable=take,
        experiment_name="limits",
        experiment_path=str(tmp_path / "exp"),
        memory_mechanism=mechanism,
    )
    plan = [(20, LIMIT), (300, 0), (20, LIMIT), (300, LIMIT)]  # (MiB taken, limit)
    ends, pids = [], []
    try:
        for i, (mb, limit) in enumerate(plan):
            launch = TrialLaunch(
                trial_id=f"t{i}",
                epoch=1,
                name=f"t{i}",
                config={"mb": mb},
                resources={"cpu": 1, "memory": limit},
                trial_dir=str(tmp_path / f"t{i}"),
            )
            events = run_to_end(backend, launch)
            ends.append(events[-1])
            pids += [m["pid"] for e in events if hasattr(e, "items") for m, _ in e.items]
    finally:
        backend.shutdown()
    assert [type(e).__name__ for e in ends] == ["Finished"] * 3 + ["Failed"]
    assert len(set(pids)) == 1  # one worker ran all three: the limit changed per trial
    failure = ends[-1].failure
    assert failure.kind is tune.FailureKind.OOM and failure.memory_limit == LIMIT


# -- the node watcher and adaptive concurrency -------------------------------------------
def trials_memory(total: int) -> _memory.NodeMemory:
    """A machine of `total` bytes whose memory in use is what the driver's children hold."""

    def usage() -> tuple[float, float]:
        used = 0
        for proc in psutil.Process().children(recursive=True):
            try:
                used += proc.memory_info().rss
            except psutil.Error:
                continue
        return float(used), float(total)

    return usage


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for(condition: Any, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def two_hogs(config: dict[str, Any]) -> None:
    """Trial 0 holds 250 MiB until trial 1 (also 250 MiB) is gone; both fit only alone."""
    shared = Path(config["dir"])
    if config["i"] == 0:
        buf = touch(250)
        tune.report(loss=1.0)
        b_pid = shared / "b_pid"
        assert wait_for(lambda: b_pid.exists() and dead(int(b_pid.read_text() or 0)))
        del buf
        (shared / "a_done").touch()
        tune.report(loss=0.5)
        return
    if tune.get_context().attempt == 0:
        (shared / "b_pid").write_text(str(os.getpid()))
        buf = touch(250)
        tune.report(loss=1.0)
        wait_for(lambda: False, timeout=30)  # the node watcher kills it before this ends
        return
    buf = touch(250)
    tune.report(loss=0.25, after_a=float((shared / "a_done").exists()), held=len(buf))


def test_node_watcher_kills_the_newest_trial_and_the_retry_fits(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_memory, "node_memory_usage", trials_memory(1000 * MiB))
    grid = fit(
        two_hogs,
        {"i": tune.grid_search([0, 1]), "dir": str(tmp_path)},
        storage,
        failure_config=tune.FailureConfig(memory_usage_threshold=0.5, max_failures=1),
    )
    first, newest = sorted(grid, key=lambda r: r.config["i"])
    assert first.error is None and metrics_of(first)["loss"] == 0.5
    assert newest.error is None and metrics_of(newest)["loss"] == 0.25
    assert metrics_of(newest)["after_a"] == 1.0  # the retry waited until it fit (adaptive)
    with StoreReader(grid.experiment_path) as reader:
        failed = reader.events(kinds="failed")
    assert [e["trial_id"] for e in failed] == [metrics_of(newest)["trial_id"]]
    failure = FailureRecord.from_json(failed[0]["data"])
    assert failure.kind is tune.FailureKind.OOM and "node memory watcher" in failure.message
    assert "newest running trial" in failure.message
    assert "memory_usage_threshold=0.5" in failure.message
    assert failure.memory_limit == 500 * MiB and failure.peak_memory
    assert f"{metrics_of(first)['trial_id']}: " in failure.message  # the other trial's memory
    assert "max_concurrent_trials" in failure.message


def hold_until_released(config: dict[str, Any]) -> None:
    buf = touch(config["mb"])
    tune.report(loss=1.0, held=len(buf))
    assert wait_for(lambda: Path(config["release"]).exists())


def test_adaptive_concurrency_refuses_a_trial_that_would_not_fit(tmp_path: Path) -> None:
    backend = LocalBackend(
        trainable=hold_until_released,
        experiment_name="adaptive",
        experiment_path=str(tmp_path / "exp"),
        memory_usage_threshold=0.5,
        node_memory=trials_memory(1000 * MiB),
    )
    release = tmp_path / "release"
    try:
        assert backend.can_start({"cpu": 1})  # nothing runs: always allowed
        backend.start_trial(
            TrialLaunch(
                trial_id="t0",
                epoch=1,
                name="t0",
                config={"mb": 300, "release": str(release)},
                resources={"cpu": 1},
                trial_dir=str(tmp_path / "t0"),
            )
        )
        # once its peak (~300 MiB of the 500 MiB allowed) is learned, a second
        # trial of unknown size is estimated at that peak and must wait ...
        assert wait_for(lambda: not backend.poll(0.05) and not backend.can_start({"cpu": 1}))
        assert backend._pool.can_allocate({"cpu": 1})  # the CPUs alone would allow it
        # ... while one that declares it needs little fits next to it
        assert backend.can_start({"cpu": 1, "memory": 100 * MiB})
        release.touch()
        events: list[Any] = []

        def ended() -> bool:
            events.extend(backend.poll(0.05))
            return any(isinstance(e, (Finished, Failed)) for e in events)

        assert wait_for(ended)
        assert isinstance(events[-1], Finished), events
        assert backend.can_start({"cpu": 1})
    finally:
        backend.shutdown()


def sleepy(config: dict[str, Any]) -> None:
    shared = Path(config["dir"])
    me = shared / f"running_{config['i']}"
    me.touch()
    others = len(list(shared.glob("running_*"))) - 1
    time.sleep(0.3)
    me.unlink()
    tune.report(loss=1.0, others=others)


def test_declared_memory_limits_concurrency(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_memory, "node_memory_usage", trials_memory(1000 * MiB))
    declared = tune.with_resources(sleepy, {"cpu": 0.5, "memory": 300 * MiB})
    grid = fit(
        declared,
        {"i": tune.grid_search([0, 1, 2]), "dir": str(tmp_path)},
        storage,
        failure_config=tune.FailureConfig(memory_usage_threshold=0.5),
    )
    assert grid.num_errors == 0 and len(grid) == 3
    assert [metrics_of(r)["others"] for r in grid] == [0, 0, 0]  # 2 x 300 MiB > 500 MiB


def test_a_container_limit_smaller_than_ram_is_the_node_total(tmp_path: Path) -> None:
    require("cgroup1")
    own = _memory_limits.own_cgroup_dir(1)
    assert own is not None
    box = Path(own) / f"tunefleet-test-{os.getpid()}"  # a "container" of 2 GiB
    box.mkdir()
    try:
        (box / "memory.limit_in_bytes").write_text(str(2 << 30))
        probe = (
            "from tunefleet.backends.local._memory_limits import node_memory_usage\n"
            "from tunefleet.backends.local._resources import detect_memory\n"
            "used, total = node_memory_usage()\n"
            "print(int(total), int(detect_memory()), 0 < used < total)\n"
        )
        enter = f'echo $$ > "{box}/cgroup.procs" && exec "$0" -c "$1"'
        out = subprocess.run(
            ["sh", "-c", enter, sys.executable, probe],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out == [str(2 << 30), str(2 << 30), "True"]
    finally:
        assert wait_for(lambda: not (box / "cgroup.procs").read_text().strip(), timeout=10)
        box.rmdir()


# -- GPU out of memory ----------------------------------------------------------------------
def gpu_oom(config: dict[str, Any]) -> None:
    tune.report(loss=1.0, pid=os.getpid())
    how = config["how"]
    if how == "class":  # a class like torch.cuda.OutOfMemoryError, without torch
        error = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch.cuda"})
        raise error("CUDA out of memory. Tried to allocate 2.00 GiB")
    if how == "text":
        raise RuntimeError("CUDA error: out of memory")
    if how == "name-only":  # the same name outside torch is no GPU OOM
        raise type("OutOfMemoryError", (RuntimeError,), {})("my own error")


def test_gpu_oom_is_classified_and_its_worker_replaced(storage: str) -> None:
    hows = ["ok", "ok", "class", "text", "name-only", "ok"]
    grid = tune.Tuner(
        gpu_oom,
        param_space={"how": tune.grid_search(hows)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    results = sorted(grid, key=lambda r: metrics_of(r)["trial_id"])
    assert [r.config["how"] for r in results] == hows
    pids = [metrics_of(r)["pid"] for r in results]
    for result in results[2:4]:
        assert result.error is not None, result.config
        failure = result.error.failure
        assert failure.kind is tune.FailureKind.GPU_OOM, failure
        assert "out of GPU memory" in failure.message and "batch size" in failure.message
        assert failure.peak_memory is None  # torch not loaded: the device's peak is unknown
    assert results[4].error is not None
    assert results[4].error.failure.kind is tune.FailureKind.EXCEPTION
    assert pids[0] == pids[1] == pids[2]  # workers are reused ...
    assert pids[3] != pids[2] and pids[4] != pids[3]  # ... but not after a GPU OOM


def test_real_torch_out_of_memory_error_is_recognised() -> None:
    torch = pytest.importorskip("torch")  # the real class, checked by name and module
    assert _trial_memory.is_gpu_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to ..."))
    assert _trial_memory.gpu_peak_memory() is None or torch.cuda.is_initialized()


# -- records -----------------------------------------------------------------------------
def test_old_failure_records_still_load() -> None:
    old = {"kind": "OOM", "message": "m", "attempt": 0, "time": 1.0}
    record = FailureRecord.from_json(old)
    assert record.peak_memory is None and record.memory_limit is None
    new = FailureRecord.from_json({**old, "peak_memory": 5, "memory_limit": 7})
    assert new.to_json()["peak_memory"] == 5 and new.memory_limit == 7


def test_oom_message_uses_human_units() -> None:
    message = _memory.oom_message(
        "t1", "it hit its limit", 1536 * MiB, 1 << 30, {"t2": 300 * MiB}, "do less"
    )
    assert "peak 1.50 GiB" in message and "limit 1.00 GiB" in message
    assert "t2: 300 MiB" in message and message.endswith("To fix: do less.")
