"""``gpu="auto"``: how many trials share one GPU, decided from the GPU memory they use.

A pure decision, with no GPU and no torch: the local backend's resource pool
(`local/_resources.py`) asks it what share of a GPU the next ``gpu="auto"`` trial gets,
tells it each result's recorded usage (``result["resources"]``: ``gpu_peak_mb``, torch's
peak allocated memory, and ``gpu_total_mb``, the device's memory) and each GPU_OOM.

The rule:

* Until a peak is known, a trial gets a whole GPU: the first trial runs alone.
* Then K trials share each GPU (each gets ``1/K``)::

      K = floor(total * (1 - MARGIN) / (peak * (1 + SAFETY) + CONTEXT_MB))

  capped to ``1 <= K <= MAX_PER_GPU``. `peak` is the largest peak any trial reported
  (it only grows, so K only shrinks), `total` the smallest GPU seen. MARGIN keeps part
  of the device free for the driver and fragmentation; SAFETY covers a trial whose
  peak comes later or is larger than the first's; CONTEXT_MB is what each process's
  CUDA context and torch's allocator cache take beyond what torch reports allocated.
* A trial that runs out of GPU memory with ``1/K`` (K > 1) is retried with ``1/(K//2)``,
  and from then on every new trial gets at most that share; the retry does not count
  against ``FailureConfig.max_failures``. Out of memory on a whole GPU is a failure
  like any other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tunefleet.resources import GPU_AUTO
from tunefleet.result import RESOURCES_GPU_PEAK_MB, RESOURCES_GPU_TOTAL_MB

MARGIN = 0.10  # of the GPU's memory, never planned for trials
SAFETY = 0.25  # added to the measured peak of each trial
CONTEXT_MB = 512.0  # per process: its CUDA context and the allocator's cache
MAX_PER_GPU = 16  # trials on one GPU at most


def trials_per_gpu(
    peak_mb: float,
    total_mb: float,
    *,
    margin: float = MARGIN,
    safety: float = SAFETY,
    context_mb: float = CONTEXT_MB,
    cap: int = MAX_PER_GPU,
) -> int:
    """K: how many trials of peak `peak_mb` fit on a GPU of `total_mb` (1 to `cap`)."""
    need = peak_mb * (1 + safety) + context_mb
    if not need > 0 or not math.isfinite(need):
        return 1
    return max(1, min(cap, math.floor(total_mb * (1 - margin) / need)))


def smallest_share(resources: Mapping[str, float]) -> dict[str, float]:
    """`resources` with ``gpu="auto"`` replaced by the smallest share it may get
    (``1/MAX_PER_GPU``): what bounds how many trials may run at once."""
    return GpuAuto(per_gpu=MAX_PER_GPU).resolve(resources)


class GpuAuto:
    """The share of a GPU each ``gpu="auto"`` trial gets, from the usage seen so far."""

    def __init__(self, cap: int = MAX_PER_GPU, per_gpu: int = 1) -> None:
        self.peak_mb: float | None = None  # the largest peak reported
        self.total_mb: float | None = None  # the smallest GPU seen
        self._cap = cap  # lowered by each GPU_OOM at a shared GPU
        self.per_gpu = per_gpu  # K: 1 until a peak is known

    def share(self) -> float:
        """The share of one GPU the next ``gpu="auto"`` trial gets: ``1/K``."""
        return 1.0 / self.per_gpu

    def resolve(self, resources: Mapping[str, float]) -> dict[str, float]:
        """`resources` with ``gpu="auto"`` replaced by the share a trial gets now."""
        if GPU_AUTO not in resources:
            return dict(resources)
        out = {k: v for k, v in resources.items() if k != GPU_AUTO}
        out["gpu"] = self.share()
        return out

    def observe(self, usage: Any) -> bool:
        """Take one result's ``resources`` (usage) into account; True if K changed."""
        if not isinstance(usage, Mapping):
            return False
        peak, total = _mb(usage.get(RESOURCES_GPU_PEAK_MB)), _mb(usage.get(RESOURCES_GPU_TOTAL_MB))
        if peak is not None and (self.peak_mb is None or peak > self.peak_mb):
            self.peak_mb = peak
        if total is not None and (self.total_mb is None or total < self.total_mb):
            self.total_mb = total
        return self._decide()

    def on_gpu_oom(self, share: float) -> bool:
        """A trial holding `share` of a GPU ran out of its memory. True: the retry gets a
        larger share (K halved), and is not counted as a failure; False: it held a whole
        GPU already."""
        held = max(1, round(1.0 / share)) if share > 0 else 1
        if held <= 1:
            return False
        self._cap = min(self._cap, held // 2)
        self._decide()
        return True

    def _decide(self) -> bool:
        before = self.per_gpu
        if self.peak_mb is not None and self.total_mb is not None:
            self.per_gpu = trials_per_gpu(self.peak_mb, self.total_mb, cap=self._cap)
        self.per_gpu = min(self.per_gpu, self._cap)
        return self.per_gpu != before


def _mb(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
