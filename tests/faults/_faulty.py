"""The trainable and the driver-side user code the fault suite injects faults into.

One trainable, `faulty`, counts iterations and checkpoints every one of them; its
config says which fault it suffers, at which iteration, in which trial (``"who"``,
matched against ``"x"``) and whether only once (a flag file per fault and trial, so a
retry or a resumed run goes through). Every process it starts writes its pid into
``config["pids"]`` so the suite can check that none survives.

`build` turns a JSON-able spec into `Tuner` arguments; the in-process scenarios and
the driver subprocess (``_driver.py``) share it, so both run the same experiment.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tunefleet as tune

CRASH = "planned failure"  # the text of the exception faults raise


class DriverFault(RuntimeError):
    """Raised by user code that runs in the driver (callbacks, stoppers, searchers...)."""


def _note_pid(config: dict[str, Any], role: str, pid: int | None = None) -> None:
    pid = os.getpid() if pid is None else pid
    Path(config["pids"], f"{role}-{pid}").write_text(str(pid))


def _due(config: dict[str, Any], i: int) -> bool:
    """Whether this trial suffers its fault at iteration `i` (once, if a flag dir is set)."""
    if (
        config.get("fault") is None
        or i != config.get("at")
        or config.get("who", config["x"]) != config["x"]
    ):
        return False
    once = config.get("once")
    if once:
        flag = Path(once, f"{config['fault']}-{config['x']}")
        if flag.exists():
            return False
        flag.touch()
    return True


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 300  # a safety net: the test creates the file
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.02)


def _daemon(config: dict[str, Any]) -> None:
    """Double fork: a grandchild in its own session, re-parented away from the trial."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            _note_pid(config, "daemon")
            while True:
                time.sleep(3600)
        os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 60
    while not any(p.startswith("daemon-") for p in os.listdir(config["pids"])):
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon never started")
        time.sleep(0.01)


def _child(config: dict[str, Any]) -> None:
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(3600)
    _note_pid(config, "child", pid)


def _fill(path: str) -> None:
    """Fill the filesystem of `path` to the last byte (a real ENOSPC for everyone on it)."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass


def _inject(config: dict[str, Any], i: int) -> float | None:
    """Suffer the configured fault before reporting iteration `i`; a NaN to report, or None."""
    if not _due(config, i):
        return None
    if config.get("fault_after"):  # e.g. until a sibling is surely running
        _wait_for(config["fault_after"])
    fault = config["fault"]
    if fault == "raise":
        raise RuntimeError(f"{CRASH} at iteration {i}")
    if fault == "sigkill_mid_checkpoint":  # lands while the report persists the checkpoint
        threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGKILL), daemon=True).start()
    elif fault in ("sigstop", "hang_in_c"):
        _note_pid(config, "hung")
        if fault == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)
        else:  # a C call that holds the GIL: no Python code of the trial runs again
            ctypes.PyDLL(None).sleep(100_000)
    elif fault == "fork_child":
        _child(config)
    elif fault == "daemon":
        _daemon(config)
    elif fault == "nan":
        return math.nan
    elif fault == "fill_disk":  # until `free_at`, where this trial frees it again
        _fill(config["filler"])
    return None


def faulty(config: dict[str, Any]) -> None:
    """`config["n"]` iterations, a checkpoint at each, resumed from the latest one."""
    _note_pid(config, "trial")
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "i").read_text())
    for i in range(start + 1, config["n"] + 1):
        time.sleep(config.get("pause", 0.0))
        nan = _inject(config, i)
        if i == config.get("free_at") and os.path.exists(config["filler"]):
            os.remove(config["filler"])
        Path(config["pids"], f"step-{config['x']}-{i}").touch()
        hold = config.get("hold")  # [release file, iteration]: wait there until released
        if hold and i == hold[1]:
            _wait_for(hold[0])
        loss = nan if nan is not None else 1.0 / (i * config["x"])
        if not config.get("checkpoints", True):
            tune.report({"loss": loss, "i": i})
            continue
        with tempfile.TemporaryDirectory() as d:
            Path(d, "i").write_text(str(i))
            Path(d, "weights").write_bytes(os.urandom(config.get("ckpt_bytes", 1024)))
            tune.report({"loss": loss, "i": i}, checkpoint=tune.Checkpoint.from_directory(d))
    if config.get("linger"):  # after its last report: ignore SIGTERM, never return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)


# -- user code that runs in the driver ------------------------------------------------------
def _raise_once(flag: str, kind: str, at: int) -> None:
    if not os.path.exists(flag):
        Path(flag).touch()
        raise DriverFault(f"{kind} raised at iteration {at}")


class RaisingCallback(tune.Callback):
    def __init__(self, at: int, flag: str) -> None:
        self.at, self.flag = at, flag

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        if result["training_iteration"] == self.at:
            _raise_once(self.flag, "callback", self.at)


class RaisingStopper(tune.Stopper):
    def __init__(self, at: int, flag: str) -> None:
        self.at, self.flag = at, flag

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        if result["training_iteration"] == self.at:
            _raise_once(self.flag, "stopper", self.at)
        return False

    def stop_all(self) -> bool:
        return False


class RaisingScheduler(tune.schedulers.FIFOScheduler):
    def __init__(self, at: int, flag: str) -> None:
        super().__init__()
        self.at, self.flag = at, flag

    def on_trial_result(self, trial: Any, result: dict[str, Any]) -> Any:
        if result["training_iteration"] == self.at:
            _raise_once(self.flag, "scheduler", self.at)
        return super().on_trial_result(trial, result)


class RaisingSearcher(tune.search.BasicVariantGenerator):
    """Raises in `on_trial_result` at iteration `at` (as a model-based searcher might)."""

    def __init__(self, at: int, flag: str) -> None:
        super().__init__(random_state=0)
        self.at, self.flag = at, flag

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if result["training_iteration"] == self.at:
            _raise_once(self.flag, "searcher", self.at)


def build(spec: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `tune.Tuner` for a scenario's spec (JSON-able)."""
    raiser = spec.get("raiser")  # (kind, iteration, flag): driver-side user code raises once
    run: dict[str, Any] = {
        "name": spec.get("name", "exp"),
        "storage_path": spec["storage"],
        "verbose": 0,
        "stop": spec.get("stop"),
        "failure_config": tune.FailureConfig(**spec.get("failure", {})),
        "callbacks": [],
        "backend": spec.get("backend", "local"),
    }
    tune_config: dict[str, Any] = {
        "metric": "loss",
        "mode": "min",
        "max_concurrent_trials": spec.get("concurrent", 2),
    }
    if raiser:
        kind, at, flag = raiser
        if kind == "callback":
            run["callbacks"] = [RaisingCallback(at, flag)]
        elif kind == "stopper":
            run["stop"] = RaisingStopper(at, flag)
        elif kind == "scheduler":
            tune_config["scheduler"] = RaisingScheduler(at, flag)
        elif kind == "searcher":
            tune_config["search_alg"] = RaisingSearcher(at, flag)
    config = {"x": tune.grid_search(list(range(1, spec.get("trials", 2) + 1))), **spec["config"]}
    return {
        "trainable": faulty,
        "param_space": config,
        "tune_config": tune.TuneConfig(**tune_config),
        "run_config": tune.RunConfig(**run),
    }
