"""Where an attempt restarts from, decided on the trial's side.

The driver names the checkpoints a trial may restart from (its newest, then the older
ones retention kept) and decides nothing by reading them: verifying a checkpoint
reads every byte (SHA-256), which would hold up every other trial's results while a
big one is read. The attempt checks them itself, newest first, restores from the
first that verifies and, if that is not the newest, tells the driver with a
`RESTORED` item before any result, so that the driver rewinds the trial's results
to it and records why the others were skipped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tunefleet.backends._base import RESTORED, TrialLaunch
from tunefleet.result import TRAINING_ITERATION
from tunefleet.storage.checkpoint import latest_valid, remove_temporaries
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
    candidates = [(launch.checkpoint, launch.iteration, launch.time_total), *launch.fallbacks]
    chosen, skipped = latest_valid([path for path, _, _ in candidates])
    iteration, time_total = 0, 0.0
    for path, it, total in candidates:
        if path == chosen:
            iteration, time_total = it, total
    if not skipped:
        return dataclasses.replace(launch, fallbacks=()), None
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
