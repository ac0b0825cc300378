"""On a real NVIDIA GPU: fractional trials share a device, whole ones do not, a trial
out of CUDA memory is GPU_OOM while its neighbour on the same GPU goes on, and its
worker is replaced so the next trial gets the memory back; ``gpu="auto"`` packs trials
by the memory they really hold and retries a real CUDA OOM with a larger share; the same
on the Ray backend, and through `tunefleet run`.

Skipped where there is no NVIDIA GPU or no torch (CI has neither); run on the GPU
machine with ``pytest tests/backends/test_gpu.py``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.gpu_trainables import GiB, auto_sized, gpu_memory, on_gpu, run_four_then_one
from tests.helpers.paths import PROGRAMS
from tests.helpers.processes import overlap
from tests.helpers.results import metrics_of
from tunefleet.backends._gpu_auto import trials_per_gpu
from tunefleet.backends.local._resources import detect_gpus
from tunefleet.results import ResultGrid
from tunefleet.trial import FailureKind

HAVE_GPU = bool(os.path.isdir("/proc/driver/nvidia/gpus") and detect_gpus())
pytestmark = [
    pytest.mark.skipif(not HAVE_GPU, reason="no NVIDIA GPU here"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed"),
]
SCRIPT = PROGRAMS / "cuda_script.py"


def most_at_once(grid: ResultGrid) -> int:
    """The largest number of trials running at one moment."""
    return overlap([(metrics_of(r)["start"], metrics_of(r)["end"]) for r in grid])


def run_on_gpu(gpu: float, num_samples: int, storage: str, **run: Any) -> ResultGrid:
    return tune.Tuner(
        tune.with_resources(on_gpu, {"cpu": 1, "gpu": gpu}),
        param_space={"steps": 4, "pause": 0.5},
        tune_config=tune.TuneConfig(num_samples=num_samples),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, **run),
    ).fit()


def check_packing(half: ResultGrid, whole: ResultGrid, gpus: int) -> None:
    for result in [*half, *whole]:
        assert result.error is None, result.error
        assert result.metrics["device_count"] == 1, "a trial sees the one GPU it was given"
    assert len({metrics_of(r)["uuid"] for r in half}) == gpus
    assert most_at_once(half) == 2 * gpus, "two half-GPU trials share each device"
    assert most_at_once(whole) == gpus, "whole-GPU trials never share one"


def test_half_gpu_trials_share_a_real_device_and_whole_ones_do_not(storage: str) -> None:
    gpus = len(detect_gpus())
    half = run_on_gpu(0.5, 4 * gpus, storage)
    whole = run_on_gpu(1, 2 * gpus, storage)
    check_packing(half, whole, gpus)


def run_memory_roles(storage: str, **run: Any) -> dict[str, Any]:
    grid = tune.Tuner(
        tune.with_resources(gpu_memory, {"cpu": 1, "gpu": 0.5}),
        param_space={"role": tune.grid_search(["steady", "greedy", "after"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, **run),
    ).fit()
    return {r.config["role"]: r for r in grid}


def check_memory_roles(by_role: dict[str, Any]) -> None:
    steady, greedy, after = by_role["steady"], by_role["greedy"], by_role["after"]
    assert steady.error is None and steady.metrics["i"] == 7, "its neighbour ran to the end"
    assert greedy.error is not None
    failure = greedy.error.failure
    assert failure.kind is FailureKind.GPU_OOM, failure
    assert "out of GPU memory" in failure.message and "OutOfMemoryError" in failure.message
    assert failure.peak_memory is not None and failure.peak_memory >= 8 * GiB, failure
    assert "GiB allocated by torch on this GPU" in failure.message
    assert after.error is None
    assert after.metrics["pid"] != greedy.metrics["pid"], "the OOM's worker is replaced"
    assert after.metrics["free_share"] > 0.8, "the next trial gets the GPU's memory back"


def test_a_cuda_oom_is_gpu_oom_its_neighbour_goes_on_and_memory_comes_back(
    storage: str,
) -> None:
    check_memory_roles(run_memory_roles(storage))


# 0.15 of a GPU's memory per trial: 4 share a GPU of 16 GiB or more (the rule's margins).
FRACTION = 0.15


def test_auto_packs_trials_by_their_real_gpu_memory_and_retries_a_real_oom(
    storage: str, tmp_path: Path
) -> None:
    grid = run_four_then_one(auto_sized, "greedy", storage, tmp_path, fraction=FRACTION)
    assert not grid.errors, grid.errors
    usage = grid[0].metrics["resources"]
    peak, total = usage["gpu_peak_mb"], usage["gpu_total_mb"]
    assert peak >= FRACTION * total * 0.99, usage
    assert trials_per_gpu(peak, total) == 4
    shares = sorted(r.metrics["share"] for r in grid)
    assert shares == [0.25, 0.25, 0.25, 0.5, 1.0], "whole, then 1/4 each; the OOM's retry 1/2"
    assert all(r.metrics["met"] for r in grid), "four trials held their memory at once"
    assert most_at_once(grid) >= 4
    assert (tmp_path / "marks" / "greedy").exists(), "the greedy trial ran out of memory"


def test_tunefleet_run_gives_each_script_its_share_of_a_gpu(tmp_path: Path) -> None:
    from tunefleet.cli import main
    from tunefleet.store import StoreReader

    space = tmp_path / "space.yaml"
    space.write_text("size: {choice: [512, 1024, 2048]}\n")
    code = main(
        [
            "run",
            *("--verbose", "0", str(SCRIPT), "--space", str(space)),
            *("--metric", "loss", "--mode", "min", "--num-samples", "4"),
            *("--gpus-per-trial", "0.5", "--storage", str(tmp_path), "--name", "gpu"),
        ]
    )
    assert code == 0
    with StoreReader(tmp_path / "gpu") as reader:
        trials, results = reader.trials(), reader.all_results()
    assert len(trials) == 4
    for trial in trials:
        (last,) = results[trial.trial_id]
        assert last["device_count"] == 1 and last["visible"] in detect_gpus()


# -- the Ray backend ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=4, num_gpus=len(detect_gpus()), include_dashboard=False)
    yield
    ray.shutdown()


def test_on_ray_half_gpu_trials_share_a_device_and_whole_ones_do_not(
    gpu_ray: None, storage: str
) -> None:
    gpus = len(detect_gpus())
    half = run_on_gpu(0.5, 4 * gpus, storage, backend="ray")
    whole = run_on_gpu(1, 2 * gpus, storage, backend="ray")
    check_packing(half, whole, gpus)


def test_on_ray_a_cuda_oom_is_gpu_oom_and_its_actor_is_not_reused(
    gpu_ray: None, storage: str
) -> None:
    check_memory_roles(run_memory_roles(storage, backend="ray"))
