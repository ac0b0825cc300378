"""Resource accounting for the local backend: CPUs, GPUs (with fractions), memory, custom."""

from __future__ import annotations

import os

from tunefleet.backends._gpu_auto import GpuAuto
from tunefleet.backends._protocol import TrialFailed, TrialMessage, TrialResults
from tunefleet.resources import GPU_AUTO
from tunefleet.result import RESOURCES
from tunefleet.trial import FailureKind, FailureRecord


def detect_gpus() -> list[str]:
    """Ids of the NVIDIA GPUs this process may use (CUDA_VISIBLE_DEVICES is respected)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    root = "/proc/driver/nvidia/gpus"
    try:
        count = len(os.listdir(root))
    except OSError:
        return []
    return [str(i) for i in range(count)]


def detect_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def detect_memory() -> float:
    """The machine's RAM, or the driver's cgroup limit (a container's) when smaller."""
    import psutil

    from tunefleet.backends.local._memory_limits import cgroup_memory_limit

    total = float(psutil.virtual_memory().total)
    limit = cgroup_memory_limit()
    return min(total, float(limit)) if limit else total


class ResourcePool:
    """What is free on this machine; GPUs are tracked per device so fractions can share one.

    A ``gpu="auto"`` request gets the share `auto` decides when it is allocated; the
    pool keeps each such trial's share (by its id) to give back, and hands `auto` the
    trial's results and GPU_OOM (`on_message`).
    """

    def __init__(self, total: dict[str, float], gpu_ids: list[str]) -> None:
        self.total = dict(total)
        self.free = dict(total)
        self.gpu_free = {gpu: 1.0 for gpu in gpu_ids}
        self.auto = GpuAuto()
        self._auto_held: dict[str, tuple[float, list[str]]] = {}  # trial id -> share, GPUs
        self._free_retries: set[str] = set()  # GPU_OOM retried with a larger share

    def fits_ever(self, request: dict[str, float]) -> str | None:
        """None if `request` can fit on an empty machine, else the reason it cannot."""
        request = self.auto.resolve(request)
        for name, amount in request.items():
            have = self.total.get(name, 0.0)
            if amount > have + 1e-9:
                return f"needs {name}={_fmt(name, amount)} but the machine has {_fmt(name, have)}"
        return None

    def can_allocate(self, request: dict[str, float]) -> bool:
        request = self.auto.resolve(request)
        for name, amount in request.items():
            if amount > self.free.get(name, 0.0) + 1e-9:
                return False
        return self._pick_gpus(request.get("gpu", 0.0)) is not None

    def allocate(self, request: dict[str, float], owner: str = "") -> list[str]:
        """Take `request` for trial `owner`; return the GPU ids assigned (empty for
        CPU-only trials)."""
        if GPU_AUTO in request:
            resolved = self.auto.resolve(request)
            taken = self.allocate(resolved)
            self._auto_held[owner] = (resolved["gpu"], taken)
            return taken
        gpus = self._pick_gpus(request.get("gpu", 0.0))
        if gpus is None or not self.can_allocate(request):
            raise RuntimeError(f"resources {request} are not free")
        for name, amount in request.items():
            self.free[name] = self.free.get(name, 0.0) - amount
        share = request.get("gpu", 0.0)
        for gpu in gpus:
            self.gpu_free[gpu] -= min(share, 1.0)
        return gpus

    def release(self, request: dict[str, float], gpus: list[str], owner: str = "") -> None:
        if GPU_AUTO in request:
            share = self._auto_held.pop(owner, (1.0, gpus))[0]
            request = {**{k: v for k, v in request.items() if k != GPU_AUTO}, "gpu": share}
        for name, amount in request.items():
            self.free[name] = min(self.total.get(name, 0.0), self.free.get(name, 0.0) + amount)
        share = request.get("gpu", 0.0)
        for gpu in gpus:
            self.gpu_free[gpu] = min(1.0, self.gpu_free[gpu] + min(share, 1.0))

    def held(self, owner: str, request: dict[str, float]) -> dict[str, float]:
        """`request` as allocated to `owner`: ``gpu="auto"`` replaced by its share."""
        if owner not in self._auto_held or GPU_AUTO not in request:
            return request
        rest = {k: v for k, v in request.items() if k != GPU_AUTO}
        return {**rest, "gpu": self._auto_held[owner][0]}

    def on_message(self, msg: TrialMessage) -> None:
        """A ``gpu="auto"`` trial's results (its GPU memory) or GPU_OOM, for `auto`."""
        held = self._auto_held.get(msg.trial_id)
        if held is None:
            return
        if isinstance(msg, TrialResults):
            if any([self.auto.observe(metrics.get(RESOURCES)) for metrics, _ in msg.items]):
                self._shrink_to(self.auto.share())
        elif isinstance(msg, TrialFailed) and msg.failure.kind is FailureKind.GPU_OOM:
            self._on_gpu_oom(msg.trial_id, held[0], msg.failure)

    def _on_gpu_oom(self, trial_id: str, share: float, failure: FailureRecord) -> None:
        if self.auto.on_gpu_oom(share):
            self._free_retries.add(trial_id)
            failure.message += (
                f" With gpu='auto' it had 1/{round(1 / share)} of a GPU; it is retried "
                f"with 1/{self.auto.per_gpu} (not counted as a failure)."
            )

    def free_retry(self, trial_id: str) -> bool:
        """True once if the trial's failure was a GPU_OOM its retry fixes (a larger share)."""
        if trial_id in self._free_retries:
            self._free_retries.discard(trial_id)
            return True
        return False

    def _shrink_to(self, share: float) -> None:
        """Running ``gpu="auto"`` trials that hold more than `share` hold `share` now (the
        first trial, which had a whole GPU): the rest is free for new trials."""
        for owner, (held, gpus) in list(self._auto_held.items()):
            if held > share + 1e-9:
                self._auto_held[owner] = (share, gpus)
                self.free["gpu"] = self.free.get("gpu", 0.0) + (held - share) * len(gpus)
                for gpu in gpus:
                    self.gpu_free[gpu] += held - share

    def _pick_gpus(self, amount: float) -> list[str] | None:
        if amount <= 0:
            return []
        if amount < 1:
            # Best fit: the fullest device that still has room, so fractions pack together.
            fitting = [g for g, free in self.gpu_free.items() if free + 1e-9 >= amount]
            if not fitting:
                return None
            return [min(fitting, key=lambda g: self.gpu_free[g])]
        whole = [g for g, free in self.gpu_free.items() if free >= 1.0 - 1e-9]
        if len(whole) < int(amount):
            return None
        return whole[: int(amount)]


def _fmt(name: str, amount: float) -> str:
    if name == "memory":
        return f"{amount / 1e9:.2f}GB"
    return f"{amount:g}"
