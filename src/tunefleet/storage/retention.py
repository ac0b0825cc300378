"""Checkpoint retention: which checkpoints `CheckpointConfig` drops, and deleting them.

Re-exported by `tunefleet.storage.checkpoint`; see docs/checkpoints.md ("Retention").
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from typing import Any

from tunefleet._metrics import metric_value
from tunefleet.storage._format import CHECKPOINT_NAME
from tunefleet.storage.remote import filesystem_for

logger = logging.getLogger("tunefleet")


def delete_checkpoints(paths: Iterable[str]) -> list[tuple[str, str]]:
    """Delete checkpoint folders; return ``(path, reason)`` for each that failed. Never raises.

    A local folder is first renamed to a hidden name, so an interrupted delete never
    leaves a partial checkpoint under a checkpoint's name. Only folders named
    ``checkpoint_NNNNNN`` are deleted; a path that is already gone is not a failure.
    A remote one loses its manifest first, and is deleted once the experiment's
    remote database no longer refers to it (see `remote.DeferredDeletes`).
    """
    failures: list[tuple[str, str]] = []
    for path in paths:
        try:
            if not CHECKPOINT_NAME.fullmatch(os.path.basename(os.path.normpath(path))):
                failures.append((path, "not a checkpoint folder (checkpoint_NNNNNN); not deleted"))
                continue
            refused = filesystem_for(path).delete(path)
            if refused is not None:
                failures.append((path, refused))
        except Exception as exc:  # a retention delete must never take the driver down
            failures.append((path, f"{type(exc).__name__}: {exc}"))
    return failures


class CheckpointKeeper:
    """Applies `CheckpointConfig` retention: keep the N best (or latest N), and always the latest.

    The keeper only decides: `add` returns the paths that fall out, and the caller
    deletes them with `delete_checkpoints` once the store has recorded the new
    checkpoint (so a crash in between never leaves the store pointing at nothing).

    Args:
        num_to_keep: how many checkpoints per trial to keep; None keeps all. The
            latest is kept besides the N best, so N+1 may remain.
        score_attribute: metric that ranks checkpoints; None keeps the latest N.
            Results without it, or with a non-finite value, rank last.
        score_order: "max" or "min".

    Example:
        >>> k = CheckpointKeeper(1, "acc", "max")
        >>> k.add("t1", "c1", {"acc": 0.9}), k.add("t1", "c2", {"acc": 0.5})
        ([], [])
        >>> k.add("t1", "c3", {"acc": 0.7})
        ['c2']
    """

    def __init__(
        self,
        num_to_keep: int | None = None,
        score_attribute: str | None = None,
        score_order: str = "max",
    ) -> None:
        if num_to_keep is not None and num_to_keep < 1:
            raise ValueError(f"num_to_keep={num_to_keep!r} must be a positive integer or None")
        if score_order not in ("max", "min"):
            raise ValueError(f"score_order={score_order!r} must be 'max' or 'min'")
        self.num_to_keep = num_to_keep
        self.score_attribute = score_attribute
        self.sign = 1.0 if score_order == "max" else -1.0
        self._kept: dict[str, list[tuple[float, int, str]]] = {}  # oldest first
        self._paths: set[str] = set()  # every kept path, for `is_kept`
        self._counter = 0

    @classmethod
    def from_config(cls, config: Any) -> CheckpointKeeper:
        """From a `tune.CheckpointConfig`."""
        return cls(
            config.num_to_keep, config.checkpoint_score_attribute, config.checkpoint_score_order
        )

    def add(self, trial_id: str, path: str, result: dict[str, Any]) -> list[str]:
        """Record a new checkpoint; return the paths that retention drops (deletes nothing)."""
        self._counter += 1
        kept = [k for k in self._kept.get(trial_id, []) if k[2] != path]
        kept.append((self._score(result), self._counter, path))
        self._paths.add(path)
        if self.num_to_keep is None or len(kept) <= self.num_to_keep:
            self._kept[trial_id] = kept
            return []
        latest = kept[-1]
        best = sorted(kept, key=lambda k: (k[0], k[1]), reverse=True)[: self.num_to_keep]
        keep = {id(k) for k in best} | {id(latest)}
        self._kept[trial_id] = [k for k in kept if id(k) in keep]
        dropped = [k[2] for k in kept if id(k) not in keep]
        self._paths.difference_update(dropped)
        return dropped

    def is_kept(self, path: str) -> bool:
        """Whether `path` is a kept checkpoint now (a name can be written again after a
        rewind or a PBT exploit: a deletion queued for the old one must then not run)."""
        return path in self._paths

    def kept(self, trial_id: str) -> list[str]:
        """The trial's kept checkpoints, newest first (for `latest_valid`)."""
        return [k[2] for k in reversed(self._kept.get(trial_id, []))]

    def forget(self, trial_id: str, path: str) -> None:
        """Stop tracking a checkpoint (e.g. one that failed verification); deletes nothing."""
        self._kept[trial_id] = [k for k in self._kept.get(trial_id, []) if k[2] != path]
        self._paths.discard(path)

    def discard(self, path: str) -> None:
        """Delete a checkpoint that arrived after its trial was stopped (never recorded).

        A path that is kept for some trial is left alone: a stale attempt may have
        written under the same name as the current attempt's recorded checkpoint.
        """
        if self.is_kept(path):
            logger.debug("not discarding %s: it is a kept checkpoint", path)
            return
        for failed, reason in delete_checkpoints([path]):
            logger.warning("could not delete checkpoint %s: %s", failed, reason)

    def _score(self, result: dict[str, Any]) -> float:
        if self.score_attribute is None:
            return float(self._counter)
        score = metric_value(result, self.score_attribute)
        if score is None or not math.isfinite(score):
            return -math.inf
        return self.sign * score
