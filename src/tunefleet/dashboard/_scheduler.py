"""The scheduler's view of an experiment: ASHA's rungs, PBT's lineage.

Derived only from what the store keeps: the scheduler's saved state
(``reader.state("scheduler")``), the trials, their results and the "exploit"
events. ASHA's state keeps each rung's scores (as logs of records since version 2,
replayed by `asha_view`) and its milestones; the state of an older experiment may
lack the milestones, and then a rung's milestone is estimated
from the iteration at which its members reported the score it holds.
"""

from __future__ import annotations

from typing import Any

from tunefleet._metrics import as_number, flatten, metric_value
from tunefleet.schedulers._asha_state import asha_view
from tunefleet.trial import StopCause, Trial, TrialStatus

_RUNNING = frozenset({TrialStatus.PENDING, TrialStatus.RUNNING, TrialStatus.PAUSED})


def scheduler_view(
    meta: dict[str, Any],
    state: dict[str, Any] | None,
    trials: list[Trial],
    history: dict[str, list[dict[str, Any]]],
    exploits: list[dict[str, Any]],
) -> dict[str, Any]:
    """``{"kind": "asha" | "pbt" | "other", "name": ..., ...}`` for the scheduler panel."""
    name = str(meta.get("scheduler") or "FIFOScheduler")
    if isinstance(state, dict) and isinstance(state.get("base"), dict):
        state = state["base"]  # ResourceChangingScheduler wraps another scheduler
    if exploits or "PopulationBased" in name or name == "PB2":
        return {"kind": "pbt", "name": name, **_pbt(trials, exploits)}
    if isinstance(state, dict) and {"records", "promotions", "pauses"} <= state.keys():
        state = {**state, **asha_view(state)}  # version 2: the rungs as logs of records
    if isinstance(state, dict) and {"rungs", "bracket", "promoted"} <= state.keys():
        return {"kind": "asha", "name": name, **_asha(state, trials, history)}
    return {"kind": "other", "name": name}


# -- ASHA ---------------------------------------------------------------------------------------
def _asha(
    state: dict[str, Any], trials: list[Trial], history: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    metric, mode = state.get("metric"), state.get("mode")
    several = isinstance(metric, list)
    sign = -1.0 if mode == "min" else 1.0
    by_id = {t.trial_id: t for t in trials}
    longest = max((t.iteration for t in trials), default=0)
    paused_at: dict[str, int] = state.get("paused_at") or {}
    promotion = bool(paused_at) or any(p for ps in state["promoted"] for p in ps)
    milestones = state.get("milestones")
    exact = isinstance(milestones, list) and len(milestones) == len(state["rungs"])
    brackets = []
    for b, rungs in enumerate(state["rungs"]):
        promoted = state["promoted"][b] if b < len(state["promoted"]) else []
        found: dict[str, int] = {}  # trial -> index of the result matched at the last rung
        out_rungs = []
        for k, rung in enumerate(rungs):
            next_rung = rungs[k + 1] if k + 1 < len(rungs) else {}
            entries, reached = [], []
            for trial_id, stored in rung.items():
                trial = by_id.get(trial_id)
                value = stored if several else sign * float(stored)
                if not several and isinstance(metric, str):
                    at = _matched(history.get(trial_id, []), metric, value, found, trial_id)
                    if at is not None:
                        reached.append(at)
                if promotion:
                    up = k < len(promoted) and trial_id in promoted[k]
                    waiting = paused_at.get(trial_id) == k
                else:
                    up, waiting = trial_id in next_rung, False
                entries.append(
                    {
                        "trial_id": trial_id,
                        "value": value,
                        "outcome": _outcome(trial, up=up, waiting=waiting, longest=longest),
                    }
                )
            if not several:
                entries.sort(key=lambda e: e["value"], reverse=mode == "max")
            out_rungs.append(
                {
                    "rung": k,
                    "at": _milestone(milestones, b, k) if exact else min(reached, default=None),
                    "exact": exact,
                    "entries": entries,
                    "promoted": sum(e["outcome"] == "promoted" for e in entries),
                    "stopped": sum(e["outcome"] == "stopped" for e in entries),
                }
            )
        brackets.append({"bracket": b, "rungs": out_rungs})
    time_attr = state.get("time_attr") if exact else "training_iteration"
    return {
        "metric": metric,
        "mode": mode,
        "promotion": promotion,
        "time_attr": time_attr,
        "brackets": brackets,
    }


def _milestone(milestones: Any, b: int, k: int) -> float | None:
    try:
        return as_number(milestones[b][k])
    except (IndexError, TypeError):
        return None


def _matched(
    results: list[dict[str, Any]],
    metric: str,
    value: float,
    found: dict[str, int],
    trial_id: str,
) -> float | None:
    """training_iteration of the first result after the last match that scored `value`."""
    start = found.get(trial_id, -1) + 1
    for i in range(start, len(results)):
        if metric_value(results[i], metric) == value:
            found[trial_id] = i
            return as_number(results[i].get("training_iteration"))
    return None


def _outcome(trial: Trial | None, *, up: bool, waiting: bool, longest: int) -> str:
    """What became of a trial at a rung: promoted, waiting, running, stopped, done, error.

    "stopped" is a trial the scheduler ended before the longest trial's length; one it
    ended as long as the longest reached the end (``max_t``), which is "done".
    """
    if up:
        return "promoted"
    if waiting:
        return "waiting"
    if trial is None:
        return "removed"
    if trial.status in _RUNNING:
        return "running"
    if trial.status is TrialStatus.ERROR:
        return "error"
    stopped_by_scheduler = StopCause.cause_of(trial.stop_reason) is StopCause.SCHEDULER
    if stopped_by_scheduler and trial.iteration < longest:
        return "stopped"
    return "done"


# -- PBT ----------------------------------------------------------------------------------------
def _pbt(trials: list[Trial], exploits: list[dict[str, Any]]) -> dict[str, Any]:
    """Each exploit with the config keys it changed, and each trial's run segments."""
    rows: list[dict[str, Any]] = []
    mutated: set[str] = set()
    mine: dict[str, list[dict[str, Any]]] = {}
    for event in exploits:
        data = event["data"] if isinstance(event["data"], dict) else {}
        old, new = flatten(data.get("old_config") or {}), flatten(data.get("new_config") or {})
        changes = {k: [old.get(k), new.get(k)] for k in sorted(old.keys() | new.keys())}
        changes = {k: v for k, v in changes.items() if v[0] != v[1]}
        mutated.update(changes)
        rows.append(
            {
                "seq": event["seq"],
                "time": event["time"],
                "trial_id": event["trial_id"],
                "source": data.get("source"),
                "iteration": data.get("iteration"),
                "at_iteration": data.get("at_iteration"),
                "changes": changes,
                "new_config": new,
            }
        )
        mine.setdefault(str(event["trial_id"]), []).append(rows[-1] | {"old_config": old})
    lanes = [_lane(t, mine.get(t.trial_id, [])) for t in trials]
    return {"exploits": rows, "lanes": lanes, "mutated": sorted(mutated)}


def _lane(trial: Trial, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The trial's run segments: ``from``/``to`` training_iteration and the config used."""
    segments = []
    start, source = 0, None
    config = events[0]["old_config"] if events else flatten(trial.config)
    for event in events:
        segments.append({"from": start, "to": event["at_iteration"], "config": config})
        segments[-1]["source"] = source
        start, source, config = event["iteration"], event["source"], event["new_config"]
    segments.append({"from": start, "to": trial.iteration, "config": config, "source": source})
    return {"trial_id": trial.trial_id, "status": trial.status.value, "segments": segments}
