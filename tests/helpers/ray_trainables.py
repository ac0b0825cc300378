"""Trainables and helpers of the Ray backend tests (Ray's workers import this module)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import ray

import tunefleet as tune
from tests.helpers.processes import meet


def where(config: dict[str, Any]) -> None:
    """Reports which node and process ran it."""
    context = ray.get_runtime_context()
    for _ in range(config.get("iterations", 2)):
        time.sleep(config.get("sleep", 0.0))
        tune.report({"score": config["x"], "node": context.get_node_id(), "pid": os.getpid()})


def counting(config: dict[str, Any]) -> None:
    """Counts to `iterations`, checkpointing every step when `checkpoint` is set.

    Each report says where it ran and which iteration the attempt started from; a file
    in `marks` tells the test the node it runs on once it has reported `mark_at` times.
    With `hold` (a path), the first attempt then waits until that file exists, so the
    test can take its node away while it surely still runs.
    """
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = json.loads(Path(d, "state.json").read_text())["i"]
    node = ray.get_runtime_context().get_node_id()
    trial_id = tune.get_context().get_trial_id()
    for i in range(start + 1, config["iterations"] + 1):
        hold = config.get("hold")  # the first attempt waits past `mark_at` until released
        if hold and start == 0 and i == config.get("mark_at", 0) + 1:
            while not os.path.exists(hold):
                time.sleep(0.05)
        time.sleep(config.get("sleep", 0.2))
        metrics = {"i": i, "started_from": start, "node": node}
        if config.get("checkpoint"):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps({"i": i}))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)
        if i == config.get("mark_at"):
            Path(config["marks"], trial_id).write_text(node)


def climbing(config: dict[str, Any]) -> None:
    """Score grows by `lr` per step, from its checkpoint; reports where it ran. With
    `meeting(...)` in its config, a fresh trial waits after its first step until the
    whole population is there (`meet`), so PBT knows every trial at its first
    perturbation however slowly a busy machine starts the second one."""
    step, score = 0, 0.0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = json.loads(Path(d, "state.json").read_text())
            step, score = state["step"], state["score"]
    node = ray.get_runtime_context().get_node_id()
    while step < config["steps"]:
        time.sleep(0.1)
        step, score = step + 1, score + config["lr"]
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step, "score": score}))
            metrics = {"score": score, "node": node}
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        if step == 1 and checkpoint is None:
            meet(config, config["lr"])


def sees_gpus(config: dict[str, Any]) -> None:
    """Reports the GPU ids it was given and CUDA_VISIBLE_DEVICES.

    With `meeting(...)` in its config it first waits for the others (`meet`: "met" says
    whether they all came), so trials that run at the same time prove it without a
    timing; otherwise it waits 1 s.
    """
    start = time.time()
    met = meet(config, config["x"])
    if "meet" not in config:
        time.sleep(1.0)
    gpu_ids = tune.get_context().get_gpu_ids()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    report = {"gpu_ids": ",".join(gpu_ids), "visible": visible, "start": start, "met": met}
    tune.report(report)
    tune.report({**report, "end": time.time()})


def crashes(config: dict[str, Any]) -> None:
    tune.report({"score": 1.0})
    if config["x"] == 1:
        print("about to die", file=sys.stderr, flush=True)
        os._exit(3)


def gpu_oom(config: dict[str, Any]) -> None:
    """Reports its pid; `oom` raises an error of torch.cuda.OutOfMemoryError's name and
    module (without torch), as a trial out of GPU memory does."""
    tune.report({"score": config["x"], "pid": os.getpid()})
    if config["x"] == 1:
        error = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch.cuda"})
        raise error("CUDA out of memory. Tried to allocate 2.00 GiB")


def hungry(config: dict[str, Any]) -> None:
    """Grows by 100 MB every 50 ms up to `gb` GB (x == 1); the others report 3 times."""
    if config["x"] == 1:
        chunks = []
        for _ in range(int(config["gb"] * 10)):
            chunk = bytearray(100 * 2**20)
            chunk[::4096] = b"x" * len(chunk[::4096])  # touch every page
            chunks.append(chunk)
            time.sleep(0.05)
        time.sleep(30)
    for i in range(3):
        time.sleep(0.5)
        tune.report({"score": float(i)})


def data_parallel(config: dict[str, Any]) -> None:
    """Runs one Ray task per extra bundle of its placement group, as a trainer would."""

    @ray.remote(num_cpus=1)
    def shard(i: int) -> int:
        return i * i

    group = ray.util.get_current_placement_group()
    squares = ray.get([shard.remote(i) for i in range(config["workers"])])
    tune.report({"sum": sum(squares), "in_group": group is not None, "t": time.time()})
    time.sleep(0.5)


class Steps(tune.Trainable):
    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.total = 0

    def step(self) -> dict[str, Any]:
        self.total += 1
        return {"total": self.total, "done": self.total >= 3}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"total": self.total}

    def load_checkpoint(self, state: Any) -> None:
        self.total = state["total"]


def resources_returned(timeout: float = 20.0) -> None:
    """Every CPU, GPU and custom resource of the cluster is free again (actors end async)."""
    deadline = time.monotonic() + timeout
    while True:
        total = ray.cluster_resources()  # type: ignore[no-untyped-call]
        free = ray.available_resources()  # type: ignore[no-untyped-call]
        held = {
            k: total[k] - free.get(k, 0.0)
            for k in total
            if not k.startswith(("node:", "object_store_memory"))
            and total[k] - free.get(k, 0.0) > 1e-6
        }
        if not held or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not held, f"resources still held after the experiment: {held}"


def shutdown_and_check(before: set[int]) -> None:
    ray.shutdown()
    deadline = time.monotonic() + 20
    while True:
        left = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for p in left:
        p.kill()
    assert not left, f"processes left behind: {[p.cmdline()[:3] for p in left]}"


def run(trainable: Any, space: dict[str, Any], storage: str, **kwargs: Any) -> Any:
    failure = kwargs.pop("failure_config", tune.FailureConfig())
    filesystem = kwargs.pop("storage_filesystem", None)
    return tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(**kwargs),
        run_config=tune.RunConfig(
            storage_path=storage,
            storage_filesystem=filesystem,
            backend="ray",
            verbose=0,
            failure_config=failure,
        ),
    ).fit()


def events(storage: str, kind: str) -> list[dict[str, Any]]:
    """The store's events of one kind (failed, started, ...), in order."""
    import sqlite3

    (db,) = Path(storage).glob("*/experiment.db")
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT trial_id, data FROM events WHERE kind = ? ORDER BY seq", (kind,)
        ).fetchall()
    return [{"trial_id": t, **(json.loads(d) if d else {})} for t, d in rows]


def status(storage: str) -> str:
    import sqlite3

    (db,) = Path(storage).glob("*/experiment.db")
    with sqlite3.connect(db) as conn:
        (status,) = conn.execute("SELECT status FROM trials").fetchone()
    return str(status)
