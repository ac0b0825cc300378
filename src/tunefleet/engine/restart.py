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

from tunefleet.backends._base import RESTORED
from tunefleet.schedulers._base import Exploit
from tunefleet.storage.checkpoint import (
    CheckpointKeeper,
    checkpoint_path,
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
    trial: Trial, store: ExperimentStore, *, from_scratch: bool
) -> tuple[tuple[str, int, float], ...]:
    """Set the trial's newest checkpoint as its restart point and rewind its results to it.

    Reads no checkpoint: the attempt verifies it (`backends._restore`), falls back to
    the older ones returned here (newest first, as ``(path, iteration, time_total)``)
    and says so (`restored`). `from_scratch`: ignore its checkpoints (resume).
    """
    kept = [] if from_scratch else store.checkpoints_of(trial.trial_id)
    points = [
        (path, iteration, float((metrics or {}).get("time_total_s", 0.0)))
        for path, iteration, metrics in kept
    ]
    path, iteration, result = kept[0] if kept else (None, 0, None)
    rewind_to(trial, store, path, iteration, result)
    return tuple(points[1:])


def restored(
    trial: Trial, item: dict[str, Any], store: ExperimentStore, keeper: CheckpointKeeper
) -> bool:
    """Whether `item` says that the attempt restarted from an older checkpoint than it
    was given (`RESTORED`), the newer ones failing to verify (and deleted by it); if so,
    rewind the trial to it and record why. Else it is a result."""
    info = item.get(RESTORED)
    if info is None:
        return False
    for path, reason in info["skipped"]:
        keeper.forget(trial.trial_id, path)
        logger.warning(
            "Trial %s: checkpoint %s is not usable (%s); using an older one",
            trial.trial_id,
            path,
            reason,
        )
        store.add_event(trial.trial_id, "checkpoint_invalid", {"path": path, "why": reason})
        store.mark_checkpoint_deleted(path)
    chosen, iteration = info["checkpoint"], int(info["iteration"])
    saved = {path: metrics for path, _, metrics in store.checkpoints_of(trial.trial_id)}
    rewind_to(trial, store, chosen, iteration, saved.get(chosen) if chosen else None)
    return True


def record_checkpoint(
    trial: Trial,
    path: str,
    result: dict[str, Any],
    store: ExperimentStore,
    keeper: CheckpointKeeper,
) -> list[str]:
    """The trial saved a checkpoint at `path` with `result`: it restarts from there from
    now on. Returns the checkpoints retention drops, to delete after the next commit."""
    trial.latest_checkpoint = path
    trial.checkpoint_iteration = int(result.get("training_iteration", trial.iteration))
    trial.checkpoint_time_total = float(result.get("time_total_s", 0.0))
    return _keep(trial.trial_id, trial.checkpoint_iteration, path, result, store, keeper)


def _keep(
    trial_id: str,
    iteration: int,
    path: str,
    result: dict[str, Any],
    store: ExperimentStore,
    keeper: CheckpointKeeper,
) -> list[str]:
    """Record the trial's checkpoint at `path` in the store and in retention; returns
    the checkpoints retention drops (marked deleted in the store, to delete later)."""
    store.add_checkpoint(trial_id, iteration, path, result)
    dropped = keeper.add(trial_id, path, result)
    for old in dropped:
        store.mark_checkpoint_deleted(old)
    return dropped


def rewind_to(
    trial: Trial,
    store: ExperimentStore,
    checkpoint: str | None,
    iteration: int,
    result: dict[str, Any] | None,
) -> None:
    """The trial restarts from `checkpoint` (saved at `iteration` with `result`; None:
    from the start): the results after it are dropped from the store."""
    trial.latest_checkpoint = checkpoint
    trial.checkpoint_iteration = iteration
    trial.checkpoint_time_total = float((result or {}).get("time_total_s", 0.0))
    if trial.iteration > iteration:
        trial.num_results = store.rewind_results(trial.trial_id, iteration)
        trial.last_result = result or {}
        store.add_event(
            trial.trial_id, "rewound", {"to_iteration": iteration, "checkpoint": checkpoint}
        )


def copy_for_exploit(
    trial: Trial,
    source: Trial,
    exploit: Exploit,
    home: str,
    store: ExperimentStore,
    keeper: CheckpointKeeper,
) -> tuple[str, str, list[str]]:
    """Give the paused trial the source's checkpoint (a copy in `home`) and the new config.

    Copies nothing: the trial's next attempt makes the copy (`TrialLaunch.copy_from`)
    and restarts from exactly it. Returns the copy's path, the source's checkpoint (to
    keep until then) and the checkpoints retention dropped, to delete after the next
    commit.
    """
    assert source.latest_checkpoint is not None
    copied = checkpoint_path(home, source.checkpoint_iteration)
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
    dropped = _keep(trial.trial_id, source.checkpoint_iteration, copied, result, store, keeper)
    return copied, source.latest_checkpoint, dropped
