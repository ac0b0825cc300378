"""Resources per trial: CPUs, fractions of a GPU, and a memory limit that is enforced.

Two small experiments:

1. **GPU packing.** Four trials each ask for ``{"cpu": 0.5, "gpu": 0.5}``: two share one
   GPU at a time (tunefleet sets ``CUDA_VISIBLE_DEVICES`` in each trial's worker to the
   device it was given). CPUs would allow four at once; the GPU is what limits them to two.
   Each trial prints the device it got and when it ran, so the sharing is visible.
2. **Memory.** Three trials each declare ``{"cpu": 1, "memory": 256 * MiB}``; one of them
   grows past it. That one is stopped as ``OOM`` (its peak and limit in the message);
   the other two finish. docs/memory.md explains how the limit is enforced.

tunefleet counts the GPUs it may use from ``CUDA_VISIBLE_DEVICES`` or the NVIDIA
driver. On a machine without one, ``--simulate-gpus N`` (the default when no GPU is
found: 1) declares N devices by setting ``CUDA_VISIBLE_DEVICES`` before the run: the
scheduling and packing are the real ones, the trials just do not touch CUDA. With a
real GPU and torch installed, each trial also multiplies a matrix on its device.

A multi-worker trial asks for a group of bundles instead, as in Ray Tune:
``tune.with_resources(train, tune.PlacementGroupFactory([{"cpu": 1}, {"cpu": 1, "gpu":
0.5}]))``; on the local backend the trial is one process that holds their sum.

    python examples/resources.py                       # about 10 s
    python examples/resources.py --smoke               # shorter trials, for tests

The Ray Tune form of ``examples/resources.py``; ``tunefleet port`` turns it into that
program (tests/e2e/test_ray_tune_examples.py runs it so).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ray import tune
from ray.air import RunConfig, session

MiB = 2**20


def has_real_gpu() -> bool:
    """What tunefleet's local backend would find: visible devices, or the NVIDIA driver's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return any(d.strip() not in ("", "-1") for d in visible.split(","))
    return os.path.isdir("/proc/driver/nvidia/gpus") and bool(
        os.listdir("/proc/driver/nvidia/gpus")
    )


# -- 1. GPU packing -------------------------------------------------------------------------
def gpu_trial(config: dict[str, Any]) -> None:
    start = time.time()
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # set by tunefleet per trial
    if config["real_gpu"]:
        import torch  # only with a real GPU: the matrix lives in this trial's share of it

        x = torch.randn(512, 512, device="cuda")
        float((x @ x).sum())
    time.sleep(config["seconds"])  # "training"
    session.report({"loss": 1.0, "device": device, "start": start, "end": time.time()})


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals that overlap at one moment."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = best = 0
    for _, step in edges:  # at equal times an end (-1) sorts first: touching is not sharing
        running += step
        best = max(best, running)
    return best


def pack_gpus(storage_path: str | None, seconds: float, simulated: bool) -> dict[str, int]:
    grid = tune.Tuner(
        tune.with_resources(gpu_trial, {"cpu": 0.5, "gpu": 0.5}),
        param_space={
            "trial": tune.grid_search([0, 1, 2, 3]),
            "seconds": seconds,
            "real_gpu": not simulated,
        },
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(name="resources_gpu", storage_path=storage_path, verbose=0),
    ).fit()
    t0 = min((r.metrics or {})["start"] for r in grid)
    per_device: dict[str, list[tuple[float, float]]] = {}
    for r in sorted(grid, key=lambda r: r.config["trial"]):
        m = r.metrics or {}
        print(
            f"  trial {r.config['trial']}: gpu 0.5 on device {m['device']}, "
            f"ran {m['start'] - t0:4.1f}s -> {m['end'] - t0:4.1f}s"
        )
        per_device.setdefault(m["device"], []).append((m["start"], m["end"]))
    sharing = {device: most_at_once(spans) for device, spans in per_device.items()}
    for device, count in sorted(sharing.items()):
        print(f"  device {device}: at most {count} trials at once")
    return sharing


# -- 2. Memory -------------------------------------------------------------------------------
def memory_trial(config: dict[str, Any]) -> None:
    hoard = []
    for step in range(1, 6):
        if config["name"] == "grows" and step >= 2:
            for _ in range(10):  # 10 x 50 MiB per step: well past the 256 MiB declared
                chunk = bytearray(50 * MiB)
                chunk[::4096] = b"x" * len(chunk[::4096])  # touch every page: real memory
                hoard.append(chunk)
        time.sleep(0.1)
        session.report({"loss": 1.0 / step})


def limit_memory(storage_path: str | None) -> dict[str, str]:
    grid = tune.Tuner(
        tune.with_resources(memory_trial, {"cpu": 1, "memory": 256 * MiB}),
        param_space={"name": tune.grid_search(["small-a", "grows", "small-b"])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(name="resources_memory", storage_path=storage_path, verbose=0),
    ).fit()
    outcome: dict[str, str] = {}
    for r in grid:
        name = r.config["name"]
        outcome[name] = "finished" if r.error is None else str(r.error)
        print(f"  {name:>7}: {outcome[name]}")
    return outcome


# -- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None)
    parser.add_argument(
        "--simulate-gpus",
        type=int,
        default=None,
        help="declare this many GPUs (default: the real ones; 1 if there are none)",
    )
    parser.add_argument("--smoke", action="store_true", help="shorter trials, for tests")
    args = parser.parse_args(argv)
    if args.simulate_gpus is not None and args.simulate_gpus < 1:
        parser.error(f"--simulate-gpus={args.simulate_gpus}: give at least 1")

    simulated = args.simulate_gpus is not None or not has_real_gpu()
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if simulated:
        count = args.simulate_gpus or 1
        # The local backend reads CUDA_VISIBLE_DEVICES when the run starts: N declared devices.
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
        print(f"GPU packing ({count} simulated GPU(s): CUDA_VISIBLE_DEVICES, no CUDA used)")
    else:
        print("GPU packing (real GPUs)")
    try:
        sharing = pack_gpus(args.storage_path, 1.5 if args.smoke else 3.0, simulated)
    finally:  # main() may be called in a process that goes on (a test)
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before

    print("Memory limits (256 MiB per trial)")
    outcome = limit_memory(args.storage_path)
    return {"sharing": sharing, "memory": outcome}


if __name__ == "__main__":
    main()
