"""Memory for the local backend: per-trial limits, the node memory watcher, OOM records.

A trial's limit is ``resources["memory"]`` (bytes; absent or 0: none). It is enforced
by the strongest mechanism available, checked once per experiment (docs/memory.md):

- ``cgroup2`` / ``cgroup1``: each worker gets a memory cgroup under the driver's own
  (``<driver cgroup>/tunefleet/<experiment>/worker-<pid>-<n>``); the limit is set
  before each trial and the kernel enforces it on the worker and everything it starts.
- ``rlimit``: the worker sets a soft RLIMIT_AS on itself for the trial; an allocation
  past it raises MemoryError. The tree watcher backs it up (children have their own).
- ``watcher``: the driver samples the RSS of the worker's process tree and kills the
  tree when it is over the limit.

`MemoryGuard` is the driver's side; the trial's side (peaks, RLIMIT_AS, OOM records)
is `backends/_trial_memory.py`, which Ray actors run too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tunefleet.backends._trial_memory import human_bytes
from tunefleet.backends.local._memory_limits import (
    ENV_MECHANISM,
    MECHANISMS,
    Mechanism,
    cgroup_memory_limit,
    choose_mechanism,
    node_memory_usage,
    tree_rss,
    why_unavailable,
)
from tunefleet.trial import FailureKind, FailureRecord

__all__ = [
    "ENV_MECHANISM",
    "MECHANISMS",
    "Mechanism",
    "MemoryGuard",
    "node_memory_usage",
    "why_unavailable",
]

SAMPLE_INTERVAL_S = 0.25
NodeMemory = Callable[[], tuple[float, float]]  # () -> (bytes in use, bytes total)

_TRIAL_ADVICE = (
    "if the trial needs more, declare it with tune.with_resources(trainable, "
    "{'memory': '4GB'}); otherwise reduce its batch size or model size"
)
_NODE_ADVICE = (
    "lower TuneConfig(max_concurrent_trials=...), declare memory= in "
    "tune.with_resources(...) so that only trials that fit are started, "
    "or reduce the batch size"
)


# -- the driver's guard ------------------------------------------------------------------
@dataclass
class _Running:
    trial_id: str
    limit: int  # 0: none
    started: float
    enforced: bool  # the kernel enforces `limit`; else the tree watcher does
    usage: int = 0
    peak: int = 0
    killed: bool = False


class MemoryGuard:
    """The driver's memory bookkeeping, one per backend.

    Args:
        experiment: the experiment's name (part of the cgroup names).
        threshold: the node watcher kills a trial above this fraction of memory in use.
        mechanism: force one of MECHANISMS (default: the strongest available).
        node_memory: () -> (used, total) bytes; default: the machine's or its cgroup's.
        interval: seconds between samples.
    """

    def __init__(
        self,
        *,
        experiment: str,
        threshold: float,
        mechanism: str | None = None,
        node_memory: NodeMemory | None = None,
        interval: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self.mechanism = choose_mechanism(mechanism, experiment)
        self._threshold = threshold
        self._node = node_memory or node_memory_usage
        self._interval = interval
        self._running: dict[int, _Running] = {}
        self._largest_peak = 0  # of trials that ended
        self._next_sample = 0.0
        self._node_victim: int | None = None  # until its worker is gone, kill no other
        self._gone: list[int] = []  # dead workers, forgotten at the next sample
        self._node_reading: tuple[float, tuple[float, float]] | None = None  # (when, reading)

    # -- worker and trial lifetimes -------------------------------------------------------
    def attach(self, pid: int) -> None:
        self._forget_gone()  # a new worker may have a dead one's pid
        self.mechanism.attach(pid)

    def detach(self, pid: int) -> None:
        """The worker died; its cgroup stays readable (death_record) until the next sample."""
        self._gone.append(pid)
        if self._node_victim == pid:
            self._node_victim = None

    def _forget_gone(self) -> None:
        for pid in self._gone:
            self.mechanism.detach(pid)
            self._running.pop(pid, None)
        self._gone.clear()
        self.mechanism.tidy()

    def start(self, pid: int, trial_id: str, resources: dict[str, Any]) -> int | None:
        """Apply the trial's limit; return the RLIMIT_AS the worker sets for it, if any."""
        limit = int(resources.get("memory", 0) or 0)
        enforced = self.mechanism.apply(pid, limit or None)
        self._running[pid] = _Running(trial_id, limit, time.monotonic(), enforced)
        # CUDA reserves huge address space, so RLIMIT_AS would break GPU trials
        rlimit = self.mechanism.worker_rlimit and limit and not resources.get("gpu")
        return limit if rlimit else None

    def end(self, pid: int) -> None:
        """The worker's trial ended: remember its peak for the next estimates."""
        run = self._running.pop(pid, None)
        if run is not None:
            self._largest_peak = max(self._largest_peak, run.peak)
        if self._node_victim == pid:
            self._node_victim = None

    # -- adaptive concurrency --------------------------------------------------------------
    def fits(self, resources: dict[str, Any]) -> bool:
        """Would the running trials plus a new one fit under the threshold?"""
        if not self._running:
            return True  # never deadlock: one trial may always run
        used, total = self._node_usage()
        others = max(0.0, used - sum(r.usage for r in self._running.values()))
        need = sum(self._estimate(r.limit, r.peak) for r in self._running.values())
        need += self._estimate(int(resources.get("memory", 0) or 0), 0)
        return need <= self._threshold * total - others

    def _node_usage(self, fresh: bool = False) -> tuple[float, float]:
        """(used, total): read at most once per sampling interval unless `fresh`."""
        now = time.monotonic()
        cached = self._node_reading
        if fresh or cached is None or now - cached[0] >= self._interval:
            cached = (now, self._node())
            self._node_reading = cached
        return cached[1]

    def _estimate(self, declared: int, peak: int) -> int:
        largest = max([self._largest_peak, *(r.peak for r in self._running.values())])
        return max(declared or largest, peak)

    # -- sampling ----------------------------------------------------------------------------
    def due_in(self) -> float | None:
        """Seconds until the next sample is due; None when no trial runs."""
        if not self._running:
            return None
        return max(0.0, self._next_sample - time.monotonic())

    def sample(self) -> list[tuple[int, FailureRecord]]:
        """Measure the running trials; return the workers to kill now and why."""
        self._forget_gone()
        now = time.monotonic()
        if not self._running or now < self._next_sample:
            return []
        self._next_sample = now + self._interval
        self._measure()
        return self._over_limit() or self._node_check()

    def _measure(self) -> None:
        watched = [pid for pid in self._running if not self.mechanism.manages(pid)]
        trees = tree_rss(watched) if watched else {}
        for pid, run in self._running.items():
            usage = trees[pid] if pid in trees else self.mechanism.usage(pid)
            run.usage = usage or 0
            run.peak = max(run.peak, run.usage)

    def _over_limit(self) -> list[tuple[int, FailureRecord]]:
        kills = []
        for pid, run in self._running.items():
            if run.limit and not run.enforced and not run.killed and run.usage > run.limit:
                run.killed = True
                cause = (
                    f"its process tree used {human_bytes(run.usage)}, over its memory "
                    "limit (the driver's memory watcher)"
                )
                kills.append((pid, self._record(pid, cause, run.peak, run.limit, _TRIAL_ADVICE)))
        return kills

    def _node_check(self) -> list[tuple[int, FailureRecord]]:
        if self._node_victim is not None:
            return []
        used, total = self._node_usage(fresh=True)
        line = self._threshold * total
        alive = [(run.started, pid) for pid, run in self._running.items() if not run.killed]
        if used <= line or not alive:
            return []
        pid = max(alive)[1]
        run = self._running[pid]
        run.killed = True
        self._node_victim = pid
        cause = (
            f"the node memory watcher killed it, the newest running trial, because the "
            f"machine's memory in use ({human_bytes(used)} of {human_bytes(total)}, "
            f"{used / total:.0%}) went above memory_usage_threshold={self._threshold:g} "
            f"({human_bytes(line)})"
        )
        return [(pid, self._record(pid, cause, run.peak, int(line), _NODE_ADVICE))]

    # -- failure records ----------------------------------------------------------------------
    def death_record(self, pid: int) -> FailureRecord | None:
        """An OOM record if the kernel's OOM killer killed this worker's trial."""
        run = self._running.get(pid)
        if run is None or not self.mechanism.oom_killed(pid):
            return None
        return self._kernel_record(pid, run, "the kernel's OOM killer killed it")

    def explain(self, pid: int, record: FailureRecord) -> FailureRecord:
        """Complete a failure the worker reported: a MemoryError, or an error after the
        kernel OOM-killed one of the trial's processes, is OOM with limit, peak and others."""
        run = self._running.get(pid)
        detail = _shorten(record.message, 200)
        if run is None:
            return record
        if record.kind is FailureKind.EXCEPTION and self.mechanism.oom_killed(pid):
            what = "the kernel's OOM killer killed one of its processes"
            new = self._kernel_record(pid, run, what, f"{record.exception_type}: {detail}")
        elif record.kind is FailureKind.OOM:
            rlimit = run.limit and self.mechanism.worker_rlimit
            cause = "it raised MemoryError" + (" at its memory limit (RLIMIT_AS)" if rlimit else "")
            cause += f" ({detail})" if detail else ""
            peak = max(record.peak_memory or 0, run.peak)
            advice = _TRIAL_ADVICE if run.limit else _NODE_ADVICE
            new = self._record(pid, cause, peak, run.limit or cgroup_memory_limit(), advice)
        else:
            return record
        record.kind, record.message = FailureKind.OOM, new.message
        record.peak_memory, record.memory_limit = new.peak_memory, new.memory_limit
        return record

    def _kernel_record(self, pid: int, run: _Running, what: str, then: str = "") -> FailureRecord:
        peak = self.mechanism.peak(pid) or run.peak
        then = f", then it raised {then}" if then else ""
        if run.limit and run.enforced:
            cause = f"{what} at its memory limit ({self.mechanism.name}){then}"
            return self._record(pid, cause, peak, run.limit, _TRIAL_ADVICE)
        cause = f"{what}: the machine (or the driver's cgroup) ran out of memory{then}"
        return self._record(pid, cause, peak, cgroup_memory_limit(), _NODE_ADVICE)

    def _record(
        self, pid: int, cause: str, peak: int | None, limit: int | None, advice: str
    ) -> FailureRecord:
        run = self._running[pid]
        others = {r.trial_id: r.usage for p, r in self._running.items() if p != pid}
        message = oom_message(run.trial_id, cause, peak, limit, others, advice)
        return FailureRecord(
            kind=FailureKind.OOM,
            message=message,
            signal="SIGKILL",
            peak_memory=peak or None,
            memory_limit=limit or None,
        )

    def close(self) -> None:
        self._forget_gone()
        self.mechanism.close()


def _shorten(text: str, size: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= size else flat[: size - 3] + "..."


def oom_message(
    trial_id: str,
    cause: str,
    peak: int | None,
    limit: int | None,
    others: dict[str, int],
    advice: str,
) -> str:
    """One line: which limit was hit, the peak, the limit, the other trials, what to change."""
    if others:
        top = sorted(others.items(), key=lambda kv: -kv[1])[:5]
        listed = ", ".join(f"{tid}: {human_bytes(used)}" for tid, used in top)
        more = f", and {len(others) - 5} more" if len(others) > 5 else ""
        rest = f"the other running trials used {human_bytes(sum(others.values()))} ({listed}{more})"
    else:
        rest = "no other trial was running"
    limit_text = human_bytes(limit) if limit else "none"
    return (
        f"trial {trial_id} ran out of memory: {cause}; peak {human_bytes(peak)}, "
        f"limit {limit_text}; {rest}. To fix: {advice}."
    )
