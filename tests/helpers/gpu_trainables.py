"""Trainables of the real-GPU tests (a module, so Ray's workers can import them too).

They import torch only inside a trial: the driver never touches CUDA.
"""

from __future__ import annotations

import os
import time
from typing import Any

import tunefleet as tune

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
