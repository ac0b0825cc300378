"""Read back what PBT learned: the effective config schedule of a trial's final model.

A trial that exploited another took that trial's checkpoint, so its model's history
before the exploit is the source's history up to the copied checkpoint. Following
each trial's last exploit back gives the segments the final model was trained in.
"""

from __future__ import annotations

import os
from typing import Any


def pbt_schedule(
    experiment_path: str | os.PathLike[str], trial_id: str, key: str | None = None
) -> list[dict[str, Any]]:
    """The segments that trained `trial_id`'s final model, oldest first.

    Each is ``{"trial_id", "from_iteration", "to_iteration", "config"}`` (the
    trial whose run it was, the training_iteration range, the config used); with
    `key`, ``"config"`` is replaced by ``"value"``: that key's value (e.g. "lr").

    Example:
        >>> for seg in pbt_schedule(grid.experiment_path, best.metrics["trial_id"], "lr"):
        ...     print(seg["from_iteration"], seg["to_iteration"], seg["value"])  # doctest: +SKIP
    """
    from tunefleet.store import StoreReader

    with StoreReader(experiment_path) as reader:
        trials = {t.trial_id: t for t in reader.trials()}
        if trial_id not in trials:
            raise KeyError(f"no trial {trial_id!r} in {experiment_path}")
        exploits: dict[str, list[dict[str, Any]]] = {}
        for event in reader.events(kinds="exploit"):
            exploits.setdefault(event["trial_id"], []).append(event)
    end = trials[trial_id].iteration
    segments = _segments(trial_id, end, float("inf"), trials, exploits)
    if key is None:
        return segments
    return [
        {**{k: v for k, v in s.items() if k != "config"}, "value": s["config"].get(key)}
        for s in segments
    ]


def _segments(
    trial_id: str,
    until: int,
    before: float,
    trials: dict[str, Any],
    exploits: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    mine = exploits.get(trial_id, [])
    earlier = [e for e in mine if e["time"] < before]
    if not earlier:
        first = mine[0]["data"]["old_config"] if mine else trials[trial_id].config
        return [_segment(trial_id, 0, until, first)]
    last = earlier[-1]
    data = last["data"]
    start = int(data["iteration"])
    history = _segments(data["source"], start, last["time"], trials, exploits)
    return [*history, _segment(trial_id, start, until, data["new_config"])]


def _segment(trial_id: str, start: int, end: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"trial_id": trial_id, "from_iteration": start, "to_iteration": end, "config": config}
