"""Text for people, kept readable: values cut to a width, why a trial ended, and
commands quoted so that they paste into a shell.

The live table, the end-of-run summary and ``tunefleet show`` use these; the store,
``tunefleet show --full`` and the dashboard keep the full values.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from tunefleet.backends._trial_memory import human_bytes
from tunefleet.result import (
    RESOURCES,
    RESOURCES_CPU_PERCENT,
    RESOURCES_GPU_PEAK_MB,
    RESOURCES_MEMORY_LIMIT_MB,
    RESOURCES_PEAK_RSS_MB,
)
from tunefleet.trial import FailureKind, StopCause, Trial, TrialStatus

VALUE_CHARS = 40  # one config value, nested dicts and lists included
ELLIPSIS = "…"

_WHY = {
    StopCause.COMPLETED: "completed",
    StopCause.DONE: "done (result said done)",
    StopCause.STOP_CRITERIA: "stop criteria",
    StopCause.STOPPER: "stopper ended the run",
    StopCause.INTERRUPTED: "interrupted",
    StopCause.FAIL_FAST: "fail_fast",
    StopCause.DRIVER_ERROR: "driver error",
    StopCause.NOT_RESUMED: "not resumed",
    StopCause.NOT_RESUMED_BY_SCHEDULER: "not resumed by scheduler",
    StopCause.PAUSED_BY_SCHEDULER: "paused by scheduler",
}


def short(value: Any, width: int = VALUE_CHARS) -> str:
    """`value` as text of at most `width` characters, ending in "…" when cut.

    Only about `width` characters are ever built, so a 1 MB string or a deep dict
    costs no more than a small one.
    """
    text = _render(value, width + 1)
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def _render(value: Any, budget: int) -> str:
    """`value` as text, stopping once about `budget` characters are written."""
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value[:budget]
    if isinstance(value, Mapping):
        items = ((f"{k}: ", v) for k, v in value.items())
        return _join("{", items, "}", budget)
    if isinstance(value, (list, tuple)):
        return _join("[", (("", v) for v in value), "]", budget)
    return str(value)[:budget]


def _join(open_: str, items: Any, close: str, budget: int) -> str:
    parts: list[str] = []
    used = len(open_)
    for prefix, item in items:
        if used >= budget:
            parts.append("")  # more follows: the text is cut here anyway
            break
        part = prefix + _render(item, budget - used - len(prefix))
        parts.append(part)
        used += len(part) + 2
    return open_ + ", ".join(parts) + close


def config_text(config: Mapping[str, Any], width: int = VALUE_CHARS) -> str:
    """``key=value, ...`` with each value cut to `width` (keys starting "__" left out)."""
    return ", ".join(
        f"{short(k, width)}={short(v, width)}"
        for k, v in config.items()
        if not str(k).startswith("__")
    )


def why_ended(trial: Trial) -> str:
    """Why a trial ended (or paused), from what the store records; "" while it runs.

    "stopped by AsyncHyperBandScheduler (rung 2 of 4) at iter 8" for a scheduler's stop
    (with the scheduler's `stop_note` when it gave one); the recorded text as it is for
    causes with a detail (the time budget); the failure kind for an error.
    """
    if trial.status is TrialStatus.ERROR:
        kind = trial.error.kind.value if trial.error is not None else "unknown cause"
        return f"error: {kind}"
    if trial.status in (TrialStatus.RUNNING, TrialStatus.PENDING):
        return ""
    reason = trial.stop_reason
    if reason is None:
        return "completed" if trial.status is TrialStatus.TERMINATED else ""
    cause = StopCause.cause_of(reason)
    if cause is StopCause.SCHEDULER:
        detail = str(reason)[len(StopCause.SCHEDULER.value) :].strip(" ()") or "scheduler"
        name, _, note = detail.partition(": ")
        note = f" ({note})" if note else ""
        return f"stopped by {name}{note} at iter {trial.iteration}"
    if cause is not None and cause in _WHY and str(reason) == cause.value:
        return _WHY[cause]
    return short(str(reason), 60)  # "time budget of 60s reached", or a stopper's own text


def command(*words: str) -> str:
    """A command line that pastes into a POSIX shell as it is: each word quoted."""
    return " ".join(shlex.quote(str(w)) for w in words)


def usage_of(trial: Trial) -> dict[str, float]:
    """The trial's resource usage as its last result has it (``result["resources"]``):
    ``cpu_percent``, ``peak_rss_mb``, ``gpu_peak_mb``, ``memory_limit_mb``, those known.

    A trial killed for memory has a newer peak (and the limit it hit) in its failure
    record than in its last result: that one is shown.
    """
    found = trial.last_result.get(RESOURCES)
    usage = {
        k: float(v)
        for k, v in (found.items() if isinstance(found, Mapping) else ())
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }
    error = trial.error if trial.status is TrialStatus.ERROR else None
    if error is not None and error.kind in (FailureKind.OOM, FailureKind.GPU_OOM):
        key = RESOURCES_PEAK_RSS_MB if error.kind is FailureKind.OOM else RESOURCES_GPU_PEAK_MB
        if error.peak_memory:
            usage[key] = max(usage.get(key, 0.0), error.peak_memory / (1 << 20))
        if error.memory_limit and error.kind is FailureKind.OOM:
            usage[RESOURCES_MEMORY_LIMIT_MB] = error.memory_limit / (1 << 20)
    return usage


def usage_text(usage: Mapping[str, float], key: str) -> str:
    """One usage value for a table: "87%", "1.50 GiB", "512 MiB / 1.00 GiB"; "-" unknown."""
    value = usage.get(key)
    if value is None:
        return "-"
    if key == RESOURCES_CPU_PERCENT:
        return f"{value:.0f}%"
    text = human_bytes(value * (1 << 20))
    limit = usage.get(RESOURCES_MEMORY_LIMIT_MB)
    if key == RESOURCES_PEAK_RSS_MB and limit:
        text += f" / {human_bytes(limit * (1 << 20))}"
    return text


def usage_columns(usages: Iterable[Mapping[str, float]]) -> list[tuple[str, str]]:
    """(title, key) of the usage columns worth a table's room: CPU% and PEAK RSS when any
    trial recorded its usage, GPU PEAK when any used a GPU."""
    found: set[str] = set()
    for usage in usages:
        found.update(usage)
    columns = [("CPU%", RESOURCES_CPU_PERCENT), ("PEAK RSS", RESOURCES_PEAK_RSS_MB)]
    if not found & {RESOURCES_CPU_PERCENT, RESOURCES_PEAK_RSS_MB}:
        columns = []
    if RESOURCES_GPU_PEAK_MB in found:
        columns.append(("GPU PEAK", RESOURCES_GPU_PEAK_MB))
    return columns


def usage_cell(trial: Trial) -> str:
    """The live table's resources cell: "87% 1.50 GiB" (CPU%, peak RSS); "-" unknown.

    The limit is left out (the column must fit at 80 columns); `tunefleet show` has it."""
    usage = usage_of(trial)
    if not usage:
        return "-"
    peak = usage.get(RESOURCES_PEAK_RSS_MB)
    rss = "-" if peak is None else human_bytes(peak * (1 << 20))  # narrow: no limit here
    return f"{usage_text(usage, RESOURCES_CPU_PERCENT)} {rss}"
