"""Where a trial runs again from: its newest valid checkpoint, or a PBT exploit's copy.

Functions over one trial, the store and retention (`CheckpointKeeper`); the
controller decides when they run and deletes the checkpoints they hand back after
its next commit.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from tunefleet.schedulers._base import Exploit
from tunefleet.storage.checkpoint import (
    CheckpointKeeper,
    latest_valid,
    persist_checkpoint,
    remove_temporaries,
)
from tunefleet.store import ExperimentStore
from tunefleet.trial import StopCause, Trial

logger = logging.getLogger("tunefleet")


def checkpoint_home(trial_path: str, experiment_path: str, storage_url: str | None) -> str:
    """Where the trial's checkpoints go: its folder, or its folder in remote storage."""
    if storage_url is None:
        return trial_path
    rel = os.path.relpath(trial_path, experiment_path).replace(os.sep, "/")
    return f"{storage_url}/{rel}"


def met_before_restart(trial: Trial, stop_criteria: dict[str, float]) -> StopCause | None:
    """Why `trial` must not run again from its restart point, or None.

    Its result at the checkpoint it would restart from already meets a `stop`
    criterion or was its last (``done``): running it would add a step past the end.
    """
    result = trial.last_result if trial.latest_checkpoint else None
    if not result:
        return None
    if result.get("done"):
        return StopCause.DONE
    for key, bound in stop_criteria.items():
        value = result.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= bound:
            return StopCause.STOP_CRITERIA
    return None


def restart_point(
    trial: Trial, store: ExperimentStore, keeper: CheckpointKeeper, *, from_scratch: bool
) -> list[str]:
    """Set the trial's newest valid checkpoint and rewind its results to it.

    `from_scratch`: ignore its checkpoints (resume). Returns the checkpoints found
    unusable, to delete after the next commit.
    """
    kept = store.checkpoints_of(trial.trial_id)
    if from_scratch:
        kept = []
    remove_temporaries(trial.path)  # what a killed writer left; no attempt runs now
    chosen, skipped = latest_valid([path for path, _, _ in kept])
    for path, reason in skipped:
        keeper.forget(trial.trial_id, path)
        logger.warning(
            "Trial %s: checkpoint %s is not usable (%s); using an older one",
            trial.trial_id,
            path,
            reason,
        )
        store.add_event(trial.trial_id, "checkpoint_invalid", {"path": path, "why": reason})
        store.mark_checkpoint_deleted(path)
    iteration, result = 0, None
    for path, it, metrics in kept:
        if path == chosen:
            iteration, result = it, metrics
    trial.latest_checkpoint = chosen
    trial.checkpoint_iteration = iteration
    trial.checkpoint_time_total = float((result or {}).get("time_total_s", 0.0))
    if trial.iteration > iteration:
        trial.num_results = store.rewind_results(trial.trial_id, iteration)
        trial.last_result = result or {}
        store.add_event(
            trial.trial_id, "rewound", {"to_iteration": iteration, "checkpoint": chosen}
        )
    return [path for path, _ in skipped]


def copy_for_exploit(
    trial: Trial,
    source: Trial,
    exploit: Exploit,
    home: str,
    store: ExperimentStore,
    keeper: CheckpointKeeper,
) -> tuple[str, list[str]]:
    """Give the paused trial a copy of the source's checkpoint (in `home`) and the new config.

    Returns the copy (the trial restarts from exactly it) and the checkpoints
    retention dropped, to delete after the next commit.
    """
    assert source.latest_checkpoint is not None
    copied = persist_checkpoint(source.latest_checkpoint, home, source.checkpoint_iteration)
    # The metrics the source's checkpoint was saved with (its last result may be later):
    # retention scores the copy by them, and best_checkpoints lists them.
    saved = {path: metrics for path, _, metrics in store.checkpoints_of(source.trial_id)}
    result: dict[str, Any] = dict(saved.get(source.latest_checkpoint) or source.last_result or {})
    store.add_event(
        trial.trial_id,
        "exploit",
        {
            "source": source.trial_id,
            "source_checkpoint": source.latest_checkpoint,
            "iteration": source.checkpoint_iteration,
            "at_iteration": trial.iteration,
            "old_config": trial.config,
            "new_config": exploit.new_config,
        },
    )
    trial.config = exploit.new_config
    trial.latest_checkpoint = copied
    trial.checkpoint_iteration = source.checkpoint_iteration
    trial.checkpoint_time_total = source.checkpoint_time_total
    store.add_checkpoint(trial.trial_id, source.checkpoint_iteration, copied, result)
    dropped = keeper.add(trial.trial_id, copied, result)
    for path in dropped:
        store.mark_checkpoint_deleted(path)
    return copied, dropped
