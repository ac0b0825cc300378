"""Resource accounting for the local backend: CPUs, GPUs (with fractions), memory, custom."""

from __future__ import annotations

import os


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
    """What is free on this machine; GPUs are tracked per device so fractions can share one."""

    def __init__(self, total: dict[str, float], gpu_ids: list[str]) -> None:
        self.total = dict(total)
        self.free = dict(total)
        self.gpu_free = {gpu: 1.0 for gpu in gpu_ids}

    def fits_ever(self, request: dict[str, float]) -> str | None:
        """None if `request` can fit on an empty machine, else the reason it cannot."""
        for name, amount in request.items():
            have = self.total.get(name, 0.0)
            if amount > have + 1e-9:
                return f"needs {name}={_fmt(name, amount)} but the machine has {_fmt(name, have)}"
        return None

    def can_allocate(self, request: dict[str, float]) -> bool:
        for name, amount in request.items():
            if amount > self.free.get(name, 0.0) + 1e-9:
                return False
        return self._pick_gpus(request.get("gpu", 0.0)) is not None

    def allocate(self, request: dict[str, float]) -> list[str]:
        """Take `request`; return the GPU ids assigned (empty for CPU-only trials)."""
        gpus = self._pick_gpus(request.get("gpu", 0.0))
        if gpus is None or not self.can_allocate(request):
            raise RuntimeError(f"resources {request} are not free")
        for name, amount in request.items():
            self.free[name] = self.free.get(name, 0.0) - amount
        share = request.get("gpu", 0.0)
        for gpu in gpus:
            self.gpu_free[gpu] -= min(share, 1.0)
        return gpus

    def release(self, request: dict[str, float], gpus: list[str]) -> None:
        for name, amount in request.items():
            self.free[name] = min(self.total.get(name, 0.0), self.free.get(name, 0.0) + amount)
        share = request.get("gpu", 0.0)
        for gpu in gpus:
            self.gpu_free[gpu] = min(1.0, self.gpu_free[gpu] + min(share, 1.0))

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
