"""A trial's resource usage on its own side, in a local worker or a Ray actor: CPU, peak
RSS of its process tree and peak GPU memory, added to each result as ``resources``.

A daemon thread samples the trial's process tree (the worker and what it started) every
``TUNEFLEET_RESOURCE_SAMPLE_S`` seconds (0.5; 0 turns sampling off): the sum of RSS over
the tree (its peak kept) and the tree's CPU seconds. A report reads what the thread
found, with cheap calls only (no /proc scan), so reporting stays fast. The thread is the
worker's, started with its first attempt and handed each later one (`_Sampling`):
starting and joining a thread per attempt cost a short trial about 0.3 ms.
"""

from __future__ import annotations

import math
import os
import resource
import sys
import threading
import time
from typing import Any

from tunefleet.backends import _trial_memory
from tunefleet.result import (
    RESOURCES,
    RESOURCES_CPU_PERCENT,
    RESOURCES_GPU_PEAK_MB,
    RESOURCES_GPU_TOTAL_MB,
    RESOURCES_MEMORY_LIMIT_MB,
    RESOURCES_PEAK_RSS_MB,
)

SAMPLE_ENV = "TUNEFLEET_RESOURCE_SAMPLE_S"
_DEFAULT_SAMPLE_S = 0.5
_MB = 1 << 20


def sample_interval() -> float:
    """Seconds between samples of the trial's process tree; 0: no sampling."""
    raw = os.environ.get(SAMPLE_ENV, "").strip()
    if not raw:
        return _DEFAULT_SAMPLE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise ValueError(
            f"{SAMPLE_ENV}={raw!r}: must be a number of seconds >= 0 "
            "(the interval between samples of a trial's resource usage; 0 turns it off)"
        )
    return value


def _own() -> tuple[float, int]:
    """This process's CPU seconds (all its threads) and lifetime peak RSS, in one call."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # KiB on Linux


class UsageSampler:
    """Samples this process's tree while one trial attempt runs; `snapshot()` per report.

    Args:
        memory_limit: the trial's memory limit in bytes (``resources["memory"]``), if any.
        interval: seconds between samples; 0 samples nothing (CPU and own peak still shown).
    """

    def __init__(self, memory_limit: float | None = None, interval: float | None = None):
        if interval is None:
            try:
                interval = sample_interval()
            except ValueError as exc:  # told in the trial's stderr log; the trial runs on
                print(f"tunefleet: {exc}; sampling every {_DEFAULT_SAMPLE_S} s", file=sys.stderr)
                interval = _DEFAULT_SAMPLE_S
        self._interval = interval
        self._limit = memory_limit or None
        self._peak = 0  # bytes, the largest sampled sum of RSS over the tree
        self._others_cpu: dict[int, float] = {}  # descendants' CPU seconds, last seen
        self._others_total = 0.0  # kept monotone: an exited child keeps its last value
        # ru_maxrss is the process's lifetime high (a reused worker's earlier trials too):
        # it is this attempt's peak only once it grows past its value at the start
        own_cpu, self._maxrss_start = _own()
        self._last_wall = time.perf_counter()
        self._own_read_at = -1.0  # when VmHWM was last read here (no thread)
        self._last_cpu = own_cpu + self._others_total
        self._thread: threading.Thread | None = None  # the worker's sampling thread, if on
        self._next_sample = 0.0  # time.monotonic() of its next sample (set by `_Sampling`)

    def start(self) -> UsageSampler:
        if self._interval > 0:
            self._thread = _SAMPLING.attach(self)
        return self

    def stop(self) -> None:
        """Sample this attempt no more (at the trial's end); the thread waits for the next."""
        if self._thread is not None:
            _SAMPLING.detach(self)
            self._thread = None

    def _sample(self, me: Any) -> None:
        import psutil

        rss = me.memory_info().rss
        seen: dict[int, float] = {}
        for child in _descendants(me):
            try:
                with child.oneshot():
                    rss += child.memory_info().rss
                    times = child.cpu_times()
                    seen[child.pid] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        own_peak = _trial_memory.peak_rss() or 0  # VmHWM, reset at the trial's start
        self._peak = max(self._peak, rss, own_peak)
        for pid, cpu in seen.items():
            before = self._others_cpu.get(pid, 0.0)
            if cpu > before:
                self._others_total += cpu - before
        self._others_cpu.update(seen)

    def _own_peak(self, now: float) -> int:
        """Without the thread, or before its first sample: this process's VmHWM (read at
        most once a second)."""
        if (self._thread is None or not self._peak) and now - self._own_read_at >= 1.0:
            self._own_read_at = now
            self._peak = max(self._peak, _trial_memory.peak_rss() or 0)
        return self._peak

    def snapshot(self) -> dict[str, Any]:
        """This attempt's usage so far, for one result (cheap: no /proc scan)."""
        now = time.perf_counter()
        own_cpu, maxrss = _own()
        cpu = own_cpu + self._others_total
        wall = now - self._last_wall
        percent = 100.0 * (cpu - self._last_cpu) / wall if wall > 0 else 0.0
        self._last_wall, self._last_cpu = now, cpu
        peak = self._own_peak(now)
        if maxrss > self._maxrss_start:
            peak = max(peak, maxrss)
        usage: dict[str, Any] = {
            RESOURCES_CPU_PERCENT: round(max(percent, 0.0), 1),
            RESOURCES_PEAK_RSS_MB: round(peak / _MB, 1) if peak else None,
        }
        gpu = _trial_memory.gpu_memory()
        if gpu is not None:
            usage[RESOURCES_GPU_PEAK_MB] = round(gpu[0] / _MB, 1)
            usage[RESOURCES_GPU_TOTAL_MB] = round(gpu[1] / _MB, 1)
        if self._limit:
            usage[RESOURCES_MEMORY_LIMIT_MB] = round(self._limit / _MB, 1)
        return usage

    def fill(self, result: dict[str, Any]) -> None:
        """Add ``resources`` to `result` unless the trainable reported its own."""
        if RESOURCES not in result:
            try:
                result[RESOURCES] = self.snapshot()
            except Exception:
                pass


class _Sampling:
    """The worker's one sampling thread: it samples the running attempt's `UsageSampler`
    every interval, the first time one interval after the attempt started, and waits
    while no attempt runs. A forked child starts its own.

    An attempt that starts while the thread sleeps towards an earlier one's sample does
    not wake it (the thread finds it when it wakes, and sleeps on to its first sample):
    back-to-back short trials cost no thread switch each, only one wake-up per interval.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._current: UsageSampler | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0  # the process the thread runs in
        self._until = 0.0  # the thread sleeps until then (math.inf: until an attempt starts)

    def attach(self, sampler: UsageSampler) -> threading.Thread:
        """Sample `sampler` from now on (its first sample one interval from now);
        returns the thread."""
        sampler._next_sample = time.monotonic() + sampler._interval
        with self._lock:
            self._current = sampler
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._until = 0.0
                self._thread = threading.Thread(
                    target=self._run, args=(self._pid,), name="tunefleet-usage", daemon=True
                )
                self._thread.start()
            thread, wake = self._thread, sampler._next_sample < self._until
        if wake:
            self._wake.set()
        return thread

    def detach(self, sampler: UsageSampler) -> None:
        with self._lock:
            if self._current is sampler:
                self._current = None

    def _run(self, pid: int) -> None:
        try:
            import psutil

            me = psutil.Process(pid)
        except Exception:
            return
        while True:
            # an attempt's first sample comes one interval after it starts: a short
            # trial (most of a search of trivial trials) costs no /proc walk at all
            with self._lock:
                sampler = self._current
                self._until = math.inf if sampler is None else sampler._next_sample
                self._wake.clear()
            delay = self._until - time.monotonic()
            if delay > 0:
                self._wake.wait(None if sampler is None else delay)
                continue  # the attempt running now may be another: its own time
            assert sampler is not None
            sampler._next_sample = time.monotonic() + sampler._interval
            try:
                sampler._sample(me)
            except Exception:  # usage is informative only: never fail a trial for it
                pass


_SAMPLING = _Sampling()


def _descendants(me: Any) -> list[Any]:
    """The processes under `me`, read from /proc/<pid>/task/<tid>/children (the tree only,
    not a scan of every process on the machine); psutil's scan where that file is missing."""
    import psutil

    found: list[Any] = []
    todo, seen = [me.pid], {me.pid}
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            if pid == me.pid:
                return list(me.children(recursive=True))
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as file:
                    kids = [int(k) for k in file.read().split()]
            except FileNotFoundError:
                if pid == me.pid:  # no CONFIG_PROC_CHILDREN in this kernel
                    return list(me.children(recursive=True))
                continue
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in seen:
                    seen.add(kid)
                    todo.append(kid)
                    try:
                        found.append(psutil.Process(kid))
                    except psutil.Error:
                        continue
    return found
