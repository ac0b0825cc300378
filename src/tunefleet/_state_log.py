"""Append-only parts of an algorithm's saved state, so saving it costs what changed.

A searcher, scheduler or stopper's `get_state()` is saved just before each commit
of the experiment, in its transaction (a resume continues from exactly there). Where
the state holds the run's history (a searcher's observations, a scheduler's rungs),
writing it whole each time makes a run quadratic in its trials. A `StateLog` in the
state (at any depth of nested dicts) tells the store that this list only grows at its
end, and that an item, once added, never changes: the store then writes only the
items added since its last save, as rows of its own, and reads the list back whole.

    def get_state(self):
        return {"seed": self.seed, "observations": self._observations}  # a StateLog

A list that is not a `StateLog` is saved whole, as before. A `StateLog` that got
shorter (the algorithm rebuilt it) is written again in full.
"""

from __future__ import annotations

from typing import Any

# A logged list's place in the saved head: ``{MARK: "observations"}`` (its path).
MARK = "$state_log"


class StateLog(list[Any]):
    """A list in a saved state that only grows at its end; its items never change."""


def split(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, StateLog]]:
    """`state` with each `StateLog` (in nested dicts) replaced by a marker, and the logs
    by their path (keys joined with "/"). Only the dicts on a log's path are copied."""
    logs: dict[str, StateLog] = {}
    return _split(state, "", logs), logs


def _split(node: dict[str, Any], prefix: str, logs: dict[str, StateLog]) -> dict[str, Any]:
    out: dict[str, Any] | None = None
    for key, value in node.items():
        if isinstance(value, StateLog):
            path = f"{prefix}{key}"
            logs[path] = value
            new: Any = {MARK: path}
        elif isinstance(value, dict):
            new = _split(value, f"{prefix}{key}/", logs)
            if new is value:
                continue
        else:
            continue
        if out is None:
            out = dict(node)
        out[key] = new
    return node if out is None else out


def join(head: Any, read: Any) -> Any:
    """The state `split` saved: each marker in `head` replaced by the `StateLog` that
    ``read(path)`` returns (the items, in order)."""
    if not isinstance(head, dict):
        return head
    if len(head) == 1 and isinstance(head.get(MARK), str):
        return StateLog(read(head[MARK]))
    return {
        key: join(value, read) if isinstance(value, dict) else value for key, value in head.items()
    }
