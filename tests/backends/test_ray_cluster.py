"""The Ray backend on a multi-node cluster simulated with ``ray.cluster_utils.Cluster``
(a head without CPUs plus worker nodes of one CPU each), whose nodes are really removed
while trials run on them; and Ray's memory monitor really killing a trial.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tests.helpers.processes import meeting
from tests.helpers.results import metrics_of
from tunefleet.trial import FailureKind

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from tests.helpers.ray_trainables import (  # noqa: E402
    climbing,
    counting,
    events,
    hungry,
    resources_returned,
    run,
    sees_gpus,
    shutdown_and_check,
    status,
    where,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    """Overrides conftest's: Ray keeps idle worker processes; what must come back is
    every resource. The processes are checked when each Ray is shut down."""
    yield
    if ray.is_initialized():
        resources_returned()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A head without CPUs and two worker nodes of one CPU each."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    fast_health_checks = {  # a killed node is declared dead in ~1 s, not ~15 s
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 300,
        "health_check_failure_threshold": 3,
    }
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "_system_config": fast_health_checks},
    )
    for _ in range(2):
        c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()  # type: ignore[no-untyped-call]
    shutdown_and_check(before)


# -- a simulated multi-node cluster ----------------------------------------------------------


def _remove_node_of(c: Cluster, node_id: str) -> None:
    for node in c.worker_nodes:
        if node.node_id == node_id:
            c.remove_node(node, allow_graceful=False)
            return
    raise AssertionError(f"node {node_id} is not a worker node of the cluster")


class _Fit:
    """``run(...)`` in a thread: Ray's cluster_utils must add nodes from the main thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.grid: Any = None
        self.error: BaseException | None = None
        fit = kwargs.pop("fit", run)

        def target() -> None:
            try:
                self.grid = fit(*args, **kwargs)
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def result(self, timeout: float = 120.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"fit() still runs after {timeout:g} s"
        if self.error is not None:
            raise self.error
        return self.grid


class _Committed(tune.Callback):
    """Set once the driver has recorded a trial's result `mark_at` (and, when the trial
    checkpoints, that result's checkpoint): an event from the driver itself, so a node
    removed after it cannot take that checkpoint with it, however busy the machine is
    (the trial's own mark comes earlier, before its report reaches the driver)."""

    def __init__(self, mark_at: int, checkpoints: bool) -> None:
        self.mark_at, self.checkpoints = mark_at, checkpoints
        self.node: str | None = None
        self.event = threading.Event()

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        if self.event.is_set() or result["i"] < self.mark_at:
            return
        if self.checkpoints and (trial.checkpoint_iteration or 0) < self.mark_at:
            return
        self.node = result["node"]
        self.event.set()

    def wait(self, timeout: float = 60.0) -> str:
        assert self.event.wait(timeout), f"no trial reached its mark in {timeout:g} s"
        assert self.node is not None
        return self.node


def _run_calling_back(
    callback: tune.Callback, trainable: Any, space: dict[str, Any], storage: str, **kwargs: Any
) -> Any:
    """`run`, with a callback in the driver."""
    return tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(),
        run_config=tune.RunConfig(
            storage_path=storage,
            storage_filesystem=kwargs.pop("storage_filesystem", None),
            backend="ray",
            verbose=0,
            failure_config=kwargs.pop("failure_config", tune.FailureConfig()),
            callbacks=[callback],
        ),
    ).fit()


def _lose_node_mid_trial(
    cluster: Cluster, storage: str, marks: Path, space: dict[str, Any], **kwargs: Any
) -> tuple[Any, str]:
    """Removes the node of the trial once the driver has its result `mark_at` (and
    that result's checkpoint, when the trial checkpoints), while the trial holds there."""
    marks = marks / "marks"
    marks.mkdir()
    committed = _Committed(space["mark_at"], bool(space.get("checkpoint")))
    hold = marks / "released"  # the trial holds after `mark_at` until its node is gone
    fit = _Fit(
        committed,
        counting,
        {**space, "marks": str(marks), "hold": str(hold)},
        storage,
        fit=_run_calling_back,
        **kwargs,
    )
    lost = committed.wait()
    _remove_node_of(cluster, lost)
    hold.touch()
    return fit.result(), lost


def test_trials_spread_over_nodes(cluster: Cluster, storage: str) -> None:
    grid = run(where, {"x": tune.grid_search([1, 2]), "sleep": 1.0}, storage)
    nodes = {r.metrics["node"] for r in grid}
    assert nodes == {n.node_id for n in cluster.worker_nodes}


def test_pbt_exploits_and_resumes_across_nodes(
    cluster: Cluster, storage: str, tmp_path: Path
) -> None:
    """PBT on two nodes: paused trials resume, and exploits copy checkpoints between
    trials that ran on different nodes (a shared storage path)."""
    from tunefleet.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=3,
        hyperparam_mutations={"lr": [0.1, 1.0, 10.0]},
        seed=0,
    )
    grid = tune.Tuner(
        climbing,
        param_space={"lr": tune.grid_search([0.1, 10.0]), "steps": 12, **meeting(tmp_path, 2)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(storage_path=storage, backend="ray", verbose=0),
    ).fit()
    assert all(r.error is None and metrics_of(r)["training_iteration"] == 12 for r in grid)
    assert events(storage, "exploit"), "the weak trial took the strong one's checkpoint"
    weak = min(grid, key=lambda r: metrics_of(r)["score"])
    assert metrics_of(weak)["score"] > 0.1 * 12, "it continued from the strong trial's score"


def test_node_loss_resumes_elsewhere_from_the_checkpoint(
    cluster: Cluster, storage: str, tmp_path: Path
) -> None:
    space = {"iterations": 12, "checkpoint": True, "mark_at": 3}
    grid, lost = _lose_node_mid_trial(cluster, storage, tmp_path, space)
    (result,) = grid
    assert result.error is None and result.metrics["i"] == 12
    (failed,) = events(storage, "failed")
    assert failed["kind"] == "NODE_LOST", failed
    assert result.metrics["started_from"] >= 3, "resumed from a checkpoint, not from scratch"
    assert result.metrics["node"] != lost


def test_node_loss_with_checkpoints_in_s3_resumes_from_the_bucket(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trials on two nodes write checkpoints straight to an S3 server (moto, loopback);
    the trial of a removed node resumes on the other from the bucket's checkpoint."""
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer
    from s3fs import S3FileSystem

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint, key = f"http://{host}:{port}", {"key": "testing", "secret": "testing"}
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket="tf-ray")
        fs = S3FileSystem(endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"}, **key)
        staging = tmp_path / "staging"
        monkeypatch.setenv("TUNEFLEET_STORAGE", str(staging))
        space = {"iterations": 10, "checkpoint": True, "mark_at": 3}
        grid, lost = _lose_node_mid_trial(
            cluster, "s3://tf-ray/root", tmp_path, space, storage_filesystem=fs
        )
        (result,) = grid
        assert result.error is None and result.metrics["i"] == 10
        assert result.metrics["started_from"] >= 3 and result.metrics["node"] != lost
        assert [e["kind"] for e in events(str(staging), "failed")] == ["NODE_LOST"]
        assert any("/checkpoint_" in k for k in fs.find("tf-ray/root")), "in the bucket"
    finally:
        server.stop()


def test_node_loss_without_a_checkpoint_restarts(
    cluster: Cluster, storage: str, tmp_path: Path
) -> None:
    space = {"iterations": 8, "mark_at": 2}
    grid, lost = _lose_node_mid_trial(cluster, storage, tmp_path, space)
    (result,) = grid
    assert result.error is None and result.metrics["i"] == 8
    assert result.metrics["started_from"] == 0 and result.metrics["node"] != lost
    assert [e["kind"] for e in events(storage, "failed")] == ["NODE_LOST"]


def test_node_loss_with_no_retries_left_is_an_error(
    cluster: Cluster, storage: str, tmp_path: Path
) -> None:
    space = {"iterations": 30, "mark_at": 2}
    failure_config = tune.FailureConfig(max_failures=0, node_loss_counts=True)
    grid, _ = _lose_node_mid_trial(cluster, storage, tmp_path, space, failure_config=failure_config)
    (result,) = grid
    assert result.error is not None and result.error.kind == FailureKind.NODE_LOST
    assert "node" in str(result.error) and "lost" in str(result.error)


def test_trials_wait_pending_while_no_node_fits(cluster: Cluster, storage: str) -> None:
    """Both nodes go; the trial waits as PENDING, and resumes when a node joins."""
    space = {"iterations": 10, "checkpoint": True}
    committed = _Committed(2, checkpoints=True)  # the driver has checkpoint 2: an event
    fit = _Fit(committed, counting, space, storage, fit=_run_calling_back)
    committed.wait()
    for worker in list(cluster.worker_nodes):
        cluster.remove_node(worker, allow_graceful=False)
    deadline = time.monotonic() + 30
    while status(storage) != "PENDING" and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # it stays PENDING: nothing is started while no node has a CPU
    assert status(storage) == "PENDING"
    starts = len(events(storage, "started"))
    time.sleep(2.0)
    assert len(events(storage, "started")) == starts
    cluster.add_node(num_cpus=1)
    (result,) = fit.result()
    assert result.error is None and result.metrics["i"] == 10
    assert result.metrics["started_from"] >= 2


def test_rays_memory_monitor_kill_is_oom_for_that_trial_only(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's memory monitor kills the trial that filled memory: that trial ends as OOM,
    the next one runs (Ray Tune 2.60 ends the whole experiment here)."""
    memory = psutil.virtual_memory()
    threshold = (memory.total - memory.available + 1.5 * 2**30) / memory.total
    monkeypatch.setenv("RAY_memory_usage_threshold", f"{threshold:.3f}")
    monkeypatch.setenv("RAY_memory_monitor_refresh_ms", "100")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        grid = run(hungry, {"x": tune.grid_search([1, 0]), "gb": 4}, storage)
        by_x = {r.config["x"]: r for r in grid}
        failure = by_x[1].error
        assert failure is not None and failure.kind == FailureKind.OOM, failure
        assert "memory monitor" in str(failure)
        assert by_x[0].error is None and by_x[0].metrics["training_iteration"] == 3
    finally:
        shutdown_and_check(before)


def test_fractional_gpus_share_a_device_and_whole_ones_do_not(storage: str, tmp_path: Path) -> None:
    """Ray hands out GPU ids (it needs no real GPU for that): two 0.5-GPU trials share
    one device at once, and each trial sees only its device in CUDA_VISIBLE_DEVICES."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        half = tune.with_resources(sees_gpus, {"cpu": 0.5, "gpu": 0.5})
        grid = run(half, {"x": tune.grid_search([1, 2]), **meeting(tmp_path, 2)}, storage)
        assert all(r.error is None for r in grid)
        assert {r.metrics["gpu_ids"] for r in grid} == {r.metrics["visible"] for r in grid}
        assert len({r.metrics["gpu_ids"] for r in grid}) == 1, "both on one device"
        assert all(r.metrics["met"] for r in grid), "at the same time"
        whole = tune.with_resources(sees_gpus, {"cpu": 0.5, "gpu": 1})
        grid = run(whole, {"x": tune.grid_search([1, 2])}, str(tmp_path / "whole"))
        assert sorted(r.metrics["visible"] for r in grid) == ["0", "1"]
    finally:
        shutdown_and_check(before)


def test_custom_resources_and_memory_are_ray_resources(storage: str) -> None:
    """One "accel" on the node: trials needing it run one after the other, while their
    CPUs and memory would let two run at once."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(
        address="local",
        num_cpus=2,
        resources={"accel": 1},
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        needs = tune.with_resources(sees_gpus, {"cpu": 0.5, "accel": 1, "memory": "50MB"})
        grid = run(needs, {"x": tune.grid_search([1, 2])}, storage)
        assert all(r.error is None for r in grid)
        first, second = sorted(grid, key=lambda r: r.metrics["start"])
        assert second.metrics["start"] >= first.metrics["end"] - 0.05, "never at once"
    finally:
        shutdown_and_check(before)
