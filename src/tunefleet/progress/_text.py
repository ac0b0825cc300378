"""Text for people, kept readable: values cut to a width, why a trial ended, and
commands quoted so that they paste into a shell.

The live table, the end-of-run summary and ``tunefleet show`` use these; the store,
``tunefleet show --full`` and the dashboard keep the full values.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from tunefleet.trial import StopCause, Trial, TrialStatus

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

    "stopped by ASHAScheduler at iter 4" for a scheduler's stop (the rung is not
    recorded, the iteration is); the recorded text as it is for causes with a detail
    (the time budget); the failure kind for an error.
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
        name = str(reason)[len(StopCause.SCHEDULER.value) :].strip(" ()") or "scheduler"
        return f"stopped by {name} at iter {trial.iteration}"
    if cause is not None and cause in _WHY and str(reason) == cause.value:
        return _WHY[cause]
    return short(str(reason), 60)  # "time budget of 60s reached", or a stopper's own text


def command(*words: str) -> str:
    """A command line that pastes into a POSIX shell as it is: each word quoted."""
    return " ".join(shlex.quote(str(w)) for w in words)
