"""`ExperimentSpec`: what the controller needs to know about the experiment.

Plain data that `experiment.py` builds from the Tuner's configs (and a resume);
`tunefleet.engine.controller` re-exports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunefleet.engine.trial_resources import TrialResources
from tunefleet.trial import Trial


@dataclass
class ExperimentSpec:
    """What the controller needs to know about the experiment (plain data)."""

    name: str
    path: str
    trainable_name: str
    resources: dict[str, float]  # each trial's, unless `per_trial` says
    metric: str | list[str] | None = None  # a list: several objectives
    mode: str | list[str] | None = None
    num_samples: int = 1
    max_concurrent: int = 1
    time_budget_s: float | None = None
    max_failures: int = 0
    node_loss_counts: bool = False  # NODE_LOST uses up one of max_failures
    fail_fast: bool | str = False
    trial_timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None
    nan_policy: str = "worst"
    constraints: list[str] = field(default_factory=list)  # reported names, feasible <= 0
    elapsed_before_s: float = 0.0  # run time of earlier drivers of this experiment (resume)
    restart_from_scratch: set[str] = field(default_factory=set)  # resume: ignore checkpoints
    retry_base: dict[str, int] = field(default_factory=dict)  # resume: attempts already used
    stop_criteria: dict[str, float] = field(default_factory=dict)
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool = False
    trial_name_creator: Callable[[Trial], str] | None = None
    trial_dirname_creator: Callable[[Trial], str] | None = None
    id_prefix: str = "t"
    storage_url: str | None = None  # the experiment in remote storage: checkpoints go there
    storage_filesystem: Any = None  # the fsspec filesystem reaching it (for the trial side)
    log_files: tuple[str, str] = ("stdout.log", "stderr.log")  # RunConfig.log_to_file
    chdir_to_trial_dir: bool = True  # trials run in their folders (RAY_CHDIR_TO_TRIAL_DIR)
    per_trial: TrialResources | None = None  # resources from each trial's config, if they vary
