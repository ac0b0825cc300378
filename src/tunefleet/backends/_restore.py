"""Where an attempt restarts from, decided on the trial's side.

The driver names the checkpoints a trial may restart from (its newest, then the older
ones retention kept) and decides nothing by reading them: verifying a checkpoint
reads every byte (SHA-256), which would hold up every other trial's results while a
big one is read. The attempt checks them itself, newest first, restores from the
first that verifies, deletes the ones that do not and, if that is not the newest,
tells the driver with a `RESTORED` item before any result, so that the driver
rewinds the trial's results to it and records why the others were skipped.

A PBT exploit's copy of another trial's checkpoint is made here too
(`TrialLaunch.copy_from`): the driver only decides, and keeps the source until the
attempt has copied it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tunefleet.backends._base import RESTORED, TrialLaunch
from tunefleet.result import TRAINING_ITERATION
from tunefleet.storage.checkpoint import (
    delete_checkpoints,
    latest_valid,
    persist_checkpoint,
    remove_temporaries,
)
from tunefleet.storage.remote import register_filesystem


def restore_point(launch: TrialLaunch) -> tuple[TrialLaunch, dict[str, Any] | None]:
    """The attempt as it runs (from the newest checkpoint that verifies), and the item
    that tells the driver, when it restarts from another one than the driver named.

    A restart also removes what a killed writer left in the trial's local checkpoints
    folder (no other attempt of the trial runs now); remote storage's temporaries are
    the driver's (its deletes there wait for the remote database).
    """
    if launch.epoch > 1:
        remove_temporaries(launch.trial_dir)
    if not launch.checkpoint:
        return launch, None
    if launch.storage_dir and launch.storage_filesystem is not None:  # its credentials
        register_filesystem(launch.storage_dir, launch.storage_filesystem)
    if launch.copy_from:  # a PBT exploit: the source's checkpoint, copied (and hashed) here
        home = launch.storage_dir or launch.trial_dir
        copied = persist_checkpoint(
            launch.copy_from, home, launch.iteration, source_filesystem=launch.storage_filesystem
        )
        assert copied == launch.checkpoint, (copied, launch.checkpoint)
        return dataclasses.replace(launch, copy_from=None), None
    candidates = [(launch.checkpoint, launch.iteration, launch.time_total), *launch.fallbacks]
    chosen, skipped = latest_valid([path for path, _, _ in candidates])
    # Not usable: gone before anything is written, for this attempt may write those names
    # again (the driver records why, and that they are gone, when it hears of them).
    delete_checkpoints([path for path, _ in skipped])
    if not skipped:
        return dataclasses.replace(launch, fallbacks=()), None
    iteration, time_total = 0, 0.0  # none verified: from the start
    for path, it, total in candidates:
        if path == chosen:
            iteration, time_total = it, total
    restored = dataclasses.replace(
        launch, checkpoint=chosen, iteration=iteration, time_total=time_total, fallbacks=()
    )
    item = {
        TRAINING_ITERATION: iteration,
        RESTORED: {
            "checkpoint": chosen,
            "iteration": iteration,
            "time_total_s": time_total,
            "skipped": [[path, reason] for path, reason in skipped],
        },
    }
    return restored, item
