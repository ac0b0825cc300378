"""A new trial's record, and what the backend is told to start one attempt of a trial.

Functions over the experiment's `ExperimentSpec` and one trial; the controller
decides when a trial is added and when it runs.
"""

from __future__ import annotations

import os
from typing import Any

from tunefleet.backends._base import TrialLaunch
from tunefleet.engine.controller_util import Waits
from tunefleet.engine.experiment_spec import ExperimentSpec
from tunefleet.storage.paths import safe_child, trial_dirname
from tunefleet.trial import Trial


def new_trial(spec: ExperimentSpec, trial_id: str, index: int, config: dict[str, Any]) -> Trial:
    """The record of a suggested config: its name and folder (the user's creators first),
    its resources (`spec.per_trial` refuses ones that are not valid or never fit)."""
    trial = Trial(
        trial_id=trial_id,
        index=index,
        name=f"{spec.trainable_name}_{trial_id}",
        config=config,
        # one dict shared by every trial (never changed in place; a resize assigns a new one)
        resources=spec.per_trial.of(trial_id, config) if spec.per_trial else spec.resources,
        path="",
        trainable_name=spec.trainable_name,
    )
    if spec.trial_name_creator is not None:
        trial.name = str(spec.trial_name_creator(trial))
    dirname = trial_id
    if spec.trial_dirname_creator is not None:
        dirname = trial_dirname(spec.trial_dirname_creator(trial), trial_id, config)
    trial.path = safe_child(spec.path, os.path.join("trials", dirname))
    return trial


def trial_launch(
    trial: Trial,
    spec: ExperimentSpec,
    waits: Waits,
    storage_dir: str | None,
    make_dir: bool,
    **restart: Any,
) -> TrialLaunch:
    """The next attempt of `trial` (its epoch already counted), from its latest checkpoint.

    `waits`: which of its results wait for the scheduler's decision.
    `storage_dir`: where its checkpoints go in remote storage (None: its folder).
    `make_dir`: make the trial's folder now (as Ray Tune does: on_trial_start callbacks
    open files there), not leave it to the backend's worker (a `mkdir` is 0.1-0.3 ms of
    the driver's CPU on an ext4 disk: a fifth of its time per short trial).
    `restart`: the older checkpoints to fall back to (`fallbacks`) or the one to copy
    (`copy_from`).
    """
    restored = bool(trial.latest_checkpoint)
    per_trial = spec.per_trial
    placement = per_trial.placement(trial.trial_id, trial.config) if per_trial else None
    if make_dir:
        os.makedirs(trial.path, exist_ok=True)
    return TrialLaunch(
        trial_id=trial.trial_id,
        epoch=trial.epoch,
        name=trial.name,
        config=trial.config,
        resources=trial.resources,
        placement=placement,
        trial_dir=trial.path,
        attempt=trial.attempt,
        checkpoint=trial.latest_checkpoint,
        iteration=trial.checkpoint_iteration if restored else 0,
        time_total=trial.checkpoint_time_total if restored else 0.0,
        sync=waits.sync,
        decide_at=waits.points,
        stop_criteria=spec.stop_criteria,
        checkpoint_freq=spec.checkpoint_frequency,
        checkpoint_at_end=spec.checkpoint_at_end,
        timeout_s=spec.trial_timeout_s,
        heartbeat_s=spec.heartbeat_timeout_s,
        storage_dir=storage_dir,
        storage_filesystem=spec.storage_filesystem,
        log_files=spec.log_files,
        chdir=spec.chdir_to_trial_dir,
        **restart,
    )
