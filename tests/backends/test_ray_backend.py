"""The Ray backend on a real local Ray: trials as actors, reuse, pause and resume,
crashes, stops, and the configuration's errors."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.trial import FailureKind

ray = pytest.importorskip("ray")
from tests.helpers.ray_trainables import (  # noqa: E402
    Steps,
    crashes,
    data_parallel,
    events,
    gpu_oom,
    resources_returned,
    run,
    shutdown_and_check,
    where,
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    """Overrides conftest's: Ray keeps idle worker processes; what must come back is
    every resource. The processes are checked when each Ray is shut down."""
    yield
    if ray.is_initialized():
        resources_returned()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    shutdown_and_check(before)


# -- a local Ray ---------------------------------------------------------------------------


def test_trials_run_as_ray_actors_and_actors_are_reused(local_ray: None, storage: str) -> None:
    grid = run(where, {"x": tune.grid_search([1, 2, 3, 4])}, storage, max_concurrent_trials=1)
    assert [r.metrics["score"] for r in grid] == [1, 2, 3, 4]
    assert all(r.error is None for r in grid)
    pids = {r.metrics["pid"] for r in grid}
    assert len(pids) == 1, "one actor ran every trial (reuse_actors)"
    assert os.getpid() not in pids


def test_without_reuse_each_trial_gets_a_new_actor(local_ray: None, storage: str) -> None:
    grid = tune.Tuner(
        where,
        param_space={"x": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=False),
        run_config=tune.RunConfig(storage_path=storage, backend="ray", verbose=0),
    ).fit()
    assert len({metrics_of(r)["pid"] for r in grid}) == 3


def test_class_trainable_and_pause_resume_from_checkpoints(local_ray: None, storage: str) -> None:
    from tunefleet.schedulers import HyperBandScheduler

    grid = tune.Tuner(
        Steps,
        param_space={"x": tune.grid_search([1, 2, 3, 4])},
        tune_config=tune.TuneConfig(
            metric="total", mode="max", scheduler=HyperBandScheduler(max_t=3, reduction_factor=3)
        ),
        run_config=tune.RunConfig(
            storage_path=storage,
            backend="ray",
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
        ),
    ).fit()
    assert all(r.error is None for r in grid)
    assert max(metrics_of(r)["total"] for r in grid) == 3
    assert events(storage, "paused"), "HyperBand paused trials at its milestones"


def test_a_crash_is_an_error_with_its_cause(local_ray: None, storage: str) -> None:
    grid = run(crashes, {"x": tune.grid_search([0, 1, 2])}, storage, max_concurrent_trials=2)
    by_x = {r.config["x"]: r for r in grid}
    assert by_x[0].error is None and by_x[2].error is None
    failure = by_x[1].error
    assert failure is not None and failure.kind == FailureKind.CRASH
    assert "Ray actor" in str(failure) and "died without reporting an error" in str(failure)
    assert "about to die" in (failure.stderr_tail or "")


def test_a_gpu_oom_is_classified_and_its_actor_not_reused(local_ray: None, storage: str) -> None:
    """The Ray backend runs the local worker's loop, so a CUDA OOM is GPU_OOM there too;
    its actor (and the CUDA cache it holds) is ended, not handed the next trial."""
    grid = run(gpu_oom, {"x": tune.grid_search([0, 1, 2])}, storage, max_concurrent_trials=1)
    by_x = {r.config["x"]: r for r in grid}
    failure = by_x[1].error
    assert failure is not None and failure.failure.kind is FailureKind.GPU_OOM, failure
    assert "out of GPU memory" in failure.failure.message
    assert by_x[0].error is None and by_x[2].error is None
    pids = [by_x[x].metrics["pid"] for x in (0, 1, 2)]
    assert pids[0] == pids[1], "the actor is reused until the OOM"
    assert pids[2] != pids[1], "the OOM's actor is not reused"


def test_a_stop_condition_ends_the_trial_on_time(local_ray: None, storage: str) -> None:
    grid = tune.Tuner(
        where,
        param_space={"x": 1, "iterations": 1000, "sleep": 0.05},
        run_config=tune.RunConfig(
            storage_path=storage, backend="ray", verbose=0, stop={"training_iteration": 5}
        ),
    ).fit()
    assert metrics_of(grid[0])["training_iteration"] == 5 and grid[0].error is None


def test_a_trial_that_ignores_stop_is_killed(local_ray: None, storage: str) -> None:
    """It sleeps without reporting past the time budget: asked to stop, then ray.kill."""
    grid = tune.Tuner(
        where,
        param_space={"x": 1, "iterations": 2, "sleep": 60.0},
        tune_config=tune.TuneConfig(time_budget_s=1.0),
        run_config=tune.RunConfig(storage_path=storage, backend="ray", verbose=0),
    ).fit()
    # killed after the stop grace period (5 s): it never woke up to report (60 s)
    assert not grid[0].metrics
    assert grid[0].error is None  # stopped on purpose: TERMINATED, not a failure


def test_a_placement_group_trial_runs_its_workers_in_its_bundles(
    local_ray: None, storage: str
) -> None:
    """Two bundles of 1 CPU on a 2-CPU Ray: one trial at a time, its task in bundle 1."""
    bundles = tune.PlacementGroupFactory([{"cpu": 1}, {"cpu": 1}])
    grid = tune.Tuner(
        tune.with_resources(data_parallel, bundles),
        param_space={"workers": 1, "x": tune.grid_search([1, 2])},
        run_config=tune.RunConfig(storage_path=storage, backend="ray", verbose=0),
    ).fit()
    assert all(r.error is None and metrics_of(r)["in_group"] for r in grid)
    assert all(metrics_of(r)["sum"] == 0 for r in grid)
    first, second = sorted(metrics_of(r)["t"] for r in grid)
    assert second - first >= 0.5, "the trials ran one after the other: each holds both CPUs"


def test_a_placement_group_from_the_config_is_the_trials_own(local_ray: None, storage: str) -> None:
    """`with_resources(trainable, lambda config: PlacementGroupFactory(...))`: each trial
    gets its config's bundles (its task runs in bundle 1)."""
    grid = tune.Tuner(
        tune.with_resources(
            data_parallel,
            lambda config: tune.PlacementGroupFactory([{"cpu": config["head"]}, {"cpu": 1}]),
        ),
        param_space={"workers": 1, "x": 1, "head": tune.grid_search([0.5, 1])},
        run_config=tune.RunConfig(storage_path=storage, backend="ray", verbose=0),
    ).fit()
    assert all(r.error is None and metrics_of(r)["in_group"] for r in grid)


def test_placement_group_factory_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"strategy='SIDEWAYS'.*PACK, SPREAD"):
        tune.PlacementGroupFactory([{"cpu": 1}], strategy="SIDEWAYS")
    with pytest.raises(ValueError, match=r"bundles\)\[1\]=\{'gpu': 0\} asks for nothing"):
        tune.PlacementGroupFactory([{"cpu": 1}, {"gpu": 0}])
    with pytest.raises(ValueError, match=r"bundles=\[\]"):
        tune.PlacementGroupFactory([])


def test_ray_config_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"RunConfig.backend='spark'.*'local', 'ray'"):
        tune.RunConfig(backend="spark").validate()
    with pytest.raises(ValueError, match=r"ray_init=.*only used with backend='ray'"):
        tune.RunConfig(ray_init={"num_cpus": 2}).validate()
    with pytest.raises(ValueError, match=r"RunConfig.resources=.*come from the Ray cluster"):
        tune.RunConfig(backend="ray", resources={"cpu": 2}).validate()
    with pytest.raises(TypeError, match=r"node_loss_counts='yes'"):
        tune.FailureConfig(node_loss_counts="yes").validate()  # type: ignore[arg-type]
