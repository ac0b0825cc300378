"""Memory on the trial's side, in a local worker or a Ray actor: the trial's peaks, its
address-space limit (the "rlimit" mechanism) and the OOM / GPU_OOM failure records.

The driver's side of the local backend's memory limits is `local/_memory.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from tunefleet.backends._files import HeldFile
from tunefleet.trial import FailureKind, FailureRecord


def human_bytes(n: float | None) -> str:
    """1536 MiB -> '1.50 GiB'; binary units, as `free -h` and the kernel use."""
    if n is None:
        return "unknown"
    if abs(n) >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if abs(n) >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB"
    return f"{n / 1024:.0f} KiB"


def _shorten(text: str, size: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= size else flat[: size - 3] + "..."


def limit_address_space(limit: int | None) -> Callable[[], None]:
    """Let the trial add about `limit` bytes to the worker (soft RLIMIT_AS); return the undo.

    Address space is not memory: the limit is the worker's current size plus what the
    trial may add (`limit` less what the worker holds now).
    """
    if not limit:
        return lambda: None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size, rss = _status_kib("VmSize") * 1024, _status_kib("VmRSS") * 1024
    new = size + max(0, limit - rss)
    if hard != resource.RLIM_INFINITY:
        new = min(new, hard)
    resource.setrlimit(resource.RLIMIT_AS, (new, hard))
    done: list[bool] = []

    def undo() -> None:
        if not done:
            done.append(True)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    return undo


_STATUS = HeldFile("/proc/self/status")
_CLEAR_REFS = HeldFile("/proc/self/clear_refs", "w")


def _status_kib(key: str) -> int:
    for line in (_STATUS.read() or "").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def reset_peaks() -> None:
    """Start the trial's peak counters (this process's RSS, torch's CUDA) from now."""
    try:
        _CLEAR_REFS.write("5")  # resets VmHWM
    except OSError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.reset_peak_memory_stats()
        except Exception:
            pass


def peak_rss() -> int | None:
    """This process's peak RSS since `reset_peaks()`."""
    return _status_kib("VmHWM") * 1024 or None


def is_gpu_oom(exc: BaseException) -> bool:
    """torch's OutOfMemoryError (by name, without importing torch) or CUDA's OOM text."""
    for cls in type(exc).__mro__:
        if cls.__name__ == "OutOfMemoryError" and cls.__module__.split(".")[0] == "torch":
            return True
    text = str(exc)
    return "CUDA out of memory" in text or "CUDA error: out of memory" in text


def gpu_peak_memory() -> int | None:
    """The largest peak of memory allocated by torch on a visible GPU, if torch is loaded."""
    found = gpu_memory()
    return None if found is None else found[0]


def gpu_memory() -> tuple[int, int] | None:
    """(peak allocated by torch, the device's total memory) of the visible GPU with the
    largest peak, if torch's CUDA is initialised."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        peaks = [
            (int(torch.cuda.max_memory_allocated(d)), d) for d in range(torch.cuda.device_count())
        ]
        peak, device = max(peaks)
        return peak, int(torch.cuda.get_device_properties(device).total_memory)
    except Exception:
        return None


def memory_failure(exc: BaseException, record: FailureRecord) -> None:
    """Turn `record` of an exception into OOM or GPU_OOM when it is one (worker side)."""
    if is_gpu_oom(exc):
        record.kind = FailureKind.GPU_OOM
        record.peak_memory = gpu_peak_memory()
        text = _shorten(str(exc), 300)
        peak = "the GPU's peak is unknown (torch's CUDA not initialised)"
        if record.peak_memory is not None:
            peak = f"peak {human_bytes(record.peak_memory)} allocated by torch on this GPU"
        record.message = (
            f"the trial ran out of GPU memory ({type(exc).__name__}: {text}); {peak}. "
            "To fix: reduce the batch size or model size, or give each trial more of the "
            "GPU (a larger 'gpu' in tune.with_resources, or lower max_concurrent_trials). "
            "The worker was replaced so the next trial on this GPU starts with its memory free."
        )
    elif isinstance(exc, MemoryError):
        record.kind = FailureKind.OOM
        record.peak_memory = peak_rss()
