"""Trainables of the real-GPU tests (a module, so Ray's workers can import them too).

They import torch only inside a trial: the driver never touches CUDA.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tunefleet as tune
from tests.helpers.processes import meet, meeting
from tunefleet.results import ResultGrid

GiB = 1 << 30


def on_gpu(config: dict[str, Any]) -> None:
    """Multiplies a matrix on the one device it sees, `steps` times, reporting which
    physical GPU that is (its UUID), CUDA_VISIBLE_DEVICES, and when it ran."""
    import torch

    start = time.time()
    props = torch.cuda.get_device_properties(0)
    x = torch.randn(2048, 2048, device="cuda")
    for step in range(config["steps"]):
        norm = float((x @ x).norm())
        time.sleep(config["pause"])
        tune.report(
            {
                "step": step,
                "norm": norm,
                "uuid": str(props.uuid),
                "device_count": torch.cuda.device_count(),
                "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "start": start,
                "end": time.time(),
            }
        )


def gpu_memory(config: dict[str, Any]) -> None:
    """Three roles on one GPU: `steady` holds 1 GiB and reports 8 times over 4 s;
    `greedy` takes 4 GiB blocks until CUDA runs out; `after` reports the free share of
    the device's memory that its process sees."""
    import torch

    role = config["role"]
    if role == "steady":
        held = torch.ones(GiB // 4, device="cuda")  # 1 GiB of float32
        total = float(held[:1000].sum())  # its small blocks are cached before greedy runs
        for i in range(8):
            time.sleep(0.5)
            tune.report({"i": i, "total": total, "pid": os.getpid()})
    elif role == "greedy":
        tune.report({"i": 0, "pid": os.getpid()})
        time.sleep(1.0)
        blocks = []
        while True:
            blocks.append(torch.empty(4 * GiB, dtype=torch.uint8, device="cuda"))
    else:
        free, total_bytes = torch.cuda.mem_get_info()
        tune.report({"i": 0, "free_share": free / total_bytes, "pid": os.getpid()})


def auto_sized(config: dict[str, Any]) -> None:
    """A ``gpu="auto"`` trial: holds `fraction` of its GPU's memory (the peak that decides
    how many trials share a GPU), reports, then meets the others of its `population`. The
    `greedy` trial, the first time it runs, takes 1 GiB blocks until CUDA runs out."""
    import torch

    ctx = tune.get_context()
    share = ctx.get_trial_resources().required_resources["GPU"]
    _, total = torch.cuda.mem_get_info()
    held = torch.ones(int(total * config["fraction"]), dtype=torch.uint8, device="cuda")
    start = time.time()
    tune.report({"share": share, "start": start, "end": start})  # its peak is known now
    mark = Path(config["marks"], "greedy")
    if config["greedy"] and not mark.exists():
        mark.touch()
        blocks = []
        while True:
            blocks.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
    met = config["greedy"] or meet(config, ctx.get_trial_id())
    tune.report(
        {
            "share": share,
            "met": met,
            "held": int(held[:8].sum()),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "start": start,
            "end": time.time(),
        }
    )


def run_four_then_one(
    trainable: Callable[[dict[str, Any]], None],
    flag: str,
    storage: str,
    tmp_path: Path,
    **space: Any,
) -> ResultGrid:
    """Five ``gpu="auto"`` trials of `trainable` on one GPU, four at a time: four with
    `flag` False, which meet (they must run at once), then one with it True. `marks` in
    their config is a fresh folder for their marks; no failure is allowed (a GPU_OOM
    retried with a larger share is none)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    return tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1, "gpu": "auto"}),
        param_space={
            **meeting(tmp_path, 4),
            **space,
            "marks": str(marks),
            flag: tune.grid_search([False, False, False, False, True]),
        },
        tune_config=tune.TuneConfig(max_concurrent_trials=4),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            resources={"cpu": 8, "gpu": 1},
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    ).fit()
