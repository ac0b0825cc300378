"""ASHA's saved state (version 2): a constant head and logs of what happened.

Each log is a `StateLog` (a save writes only its new records), replayed in order:

- ``records``: ``[bracket, rung, trial, value]`` when a trial's value is recorded at
  a rung (a vector with several objectives; a rewrite keeps the trial's place), and
  ``[bracket, rung, trial]`` when it is taken out (a trial that failed, promotion form);
- ``promotions``: ``[bracket, rung, trial]``, a trial promoted past the rung;
- ``joins``: ``[trial, bracket]``, the bracket a trial joined;
- ``pauses``: ``[trial, rung]``, a trial paused at a rung, and ``[trial]`` when it no
  longer waits there.

The dashboard reads the rungs with `asha_view`.
"""

from __future__ import annotations

from typing import Any

from tunefleet._state_log import StateLog

STATE_VERSION = 2  # 2: the rungs etc. as logs of records (a version 1 state still loads)
LOGS = ("records", "promotions", "joins", "pauses")


def new_logs() -> dict[str, StateLog]:
    return {key: StateLog() for key in LOGS}


def asha_view(state: dict[str, Any], milestones: list[list[float]] | None = None) -> dict[str, Any]:
    """The rungs (bracket -> rung -> {trial: value}), the promoted trials (bracket ->
    rung -> [trial]), each trial's bracket and level, and the paused trials' rungs, of
    a version 2 state (its logs replayed in order); `milestones` default to the
    state's."""
    shape = milestones if milestones is not None else state.get("milestones") or []
    sizes = [len(ms) for ms in shape]
    for b, k, *_ in [*state["records"], *state["promotions"]]:  # milestones missing
        sizes += [0] * (b + 1 - len(sizes))
        sizes[b] = max(sizes[b], k + 1)
    rungs: list[list[dict[str, Any]]] = [[{} for _ in range(n)] for n in sizes]
    promoted: list[list[list[str]]] = [[[] for _ in range(n)] for n in sizes]
    for record in state["records"]:
        b, k, trial_id = record[:3]
        if len(record) > 3:
            rungs[b][k][trial_id] = record[3]
        else:
            rungs[b][k].pop(trial_id, None)
    level: dict[str, int] = {}
    bracket: dict[str, int] = {}
    for trial_id, b in state["joins"]:
        bracket.setdefault(trial_id, b)
        level.setdefault(trial_id, 0)
    for b, k, trial_id in state["promotions"]:
        promoted[b][k].append(trial_id)
        level[trial_id] = k + 1
    paused_at: dict[str, int] = {}
    for pause in state["pauses"]:
        if len(pause) > 1:
            paused_at[pause[0]] = pause[1]
        else:
            paused_at.pop(pause[0], None)
    return {
        "rungs": rungs,
        "promoted": promoted,
        "bracket": bracket,
        "level": level,
        "paused_at": paused_at,
    }


def from_version_1(state: dict[str, Any]) -> dict[str, Any]:
    """A version 1 state (dicts and lists whole) as the logs that rebuild it."""
    records = [
        [b, k, i, v]
        for b, rs in enumerate(state["rungs"])
        for k, r in enumerate(rs)
        for i, v in r.items()
    ]
    promotions = [
        [b, k, i] for b, ps in enumerate(state["promoted"]) for k, p in enumerate(ps) for i in p
    ]
    joins = [[i, b] for i, b in state["bracket"].items()]
    version, internal, gauss = state["rng"]
    return {
        **state,
        "records": records,
        "promotions": promotions,
        "joins": joins,
        "pauses": [[i, k] for i, k in state["paused_at"].items()],
        "rng": {"state": [version, internal, gauss], "draws": 0},
    }
