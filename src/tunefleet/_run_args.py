"""`tune.run`'s keyword arguments as Ray Tune names them: the ones refused (with what to
write instead), the older checkpoint arguments turned into a `CheckpointConfig`, and
the `resume` forms."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import warnings
from collections.abc import Iterator
from typing import Any

from tunefleet.config import CheckpointConfig

RUN_ARGS = (
    "config",
    "num_samples",
    "resources_per_trial",
    "stop",
    "metric",
    "mode",
    "search_alg",
    "scheduler",
    "local_dir",
    "storage_path",
    "storage_filesystem",
    "name",
    "max_concurrent_trials",
    "fail_fast",
    "max_failures",
    "reuse_actors",
    "checkpoint_config",
    "checkpoint_freq",
    "checkpoint_at_end",
    "keep_checkpoints_num",
    "checkpoint_score_attr",
    "time_budget_s",
    "verbose",
    "progress_reporter",
    "callbacks",
    "raise_on_failed_trial",
    "trial_name_creator",
    "trial_dirname_creator",
    "sync_config",
    "log_to_file",
    "resume",
    "chdir_to_trial_dir",
)

# Ray Tune's tune.run arguments that tunefleet refuses, and what to write instead.
REFUSED_RUN_ARGS = {
    "restore": "restore=<checkpoint path> is not supported: load the checkpoint in the "
    "trainable (pass its path in config and use tune.Checkpoint.from_directory(path)), "
    "or continue an experiment with resume=True / tune.Tuner.restore(path, trainable)",
    "resume_config": "resume_config= is not supported: pass resume='LOCAL', 'AUTO', "
    "'ERRORED_ONLY', '...+ERRORED' or '...+RESTART_ERRORED', or use "
    "tune.Tuner.restore(path, trainable, resume_errored=..., restart_errored=...)",
    "export_formats": "export_formats= is not supported: save the model in the "
    "trainable's checkpoint (save_checkpoint, or tune.report(checkpoint=...))",
}


def chdir_argument(value: bool | None) -> bool:
    """Ray Tune's deprecated ``chdir_to_trial_dir=``: it warns; True if it asks trials to
    stay in the worker's working directory (False given)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(
            f"tune.run(chdir_to_trial_dir={value!r}): give True or False (deprecated, as in "
            "Ray Tune: set the environment variable RAY_CHDIR_TO_TRIAL_DIR=0 instead)"
        )
    warnings.warn(
        "tune.run(chdir_to_trial_dir=...) is deprecated, as in Ray Tune: set the environment "
        "variable RAY_CHDIR_TO_TRIAL_DIR=0 to keep trials in the working directory",
        DeprecationWarning,
        stacklevel=3,
    )
    return not value


@contextlib.contextmanager
def env_set(name: str, value: str | None) -> Iterator[None]:
    """Set the environment variable `name` to `value` for the block (None: leave it)."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before


def refuse_unknown(unknown: dict[str, Any]) -> None:
    """Ray's arguments tunefleet refuses say what to write instead; others are unknown."""
    for key in sorted(unknown):
        if key in REFUSED_RUN_ARGS:
            raise ValueError(f"tune.run(): {REFUSED_RUN_ARGS[key]}")
    if unknown:
        key = sorted(unknown)[0]
        close = difflib.get_close_matches(key, RUN_ARGS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(
            f"tune.run() got an unknown keyword argument {key!r}{hint} "
            f"(known: {', '.join(RUN_ARGS)})"
        )


def legacy_checkpoint_config(
    given: CheckpointConfig | None,
    *,
    checkpoint_freq: int,
    checkpoint_at_end: bool,
    keep_checkpoints_num: int | None,
    checkpoint_score_attr: str | None,
) -> CheckpointConfig:
    """`checkpoint_config` with tune.run's older checkpoint arguments filled in; one set
    both ways with different values is an error."""
    if given is not None and not isinstance(given, CheckpointConfig):
        raise TypeError(
            f"tune.run(checkpoint_config=...) takes a tune.CheckpointConfig, "
            f"not {type(given).__name__}"
        )
    config = dataclasses.replace(given) if given is not None else CheckpointConfig()
    legacy: dict[str, tuple[str, Any]] = {}  # field: (argument, value)
    if checkpoint_score_attr is not None:
        attr, order = checkpoint_score_attr, "max"
        if attr.startswith("min-"):
            attr, order = attr[4:], "min"
        arg = "checkpoint_score_attr"
        legacy["checkpoint_score_attribute"] = (arg, attr)
        legacy["checkpoint_score_order"] = (arg, order)
    if keep_checkpoints_num is not None:
        legacy["num_to_keep"] = ("keep_checkpoints_num", keep_checkpoints_num)
    if checkpoint_freq:
        legacy["checkpoint_frequency"] = ("checkpoint_freq", checkpoint_freq)
    if checkpoint_at_end:
        legacy["checkpoint_at_end"] = ("checkpoint_at_end", checkpoint_at_end)
    default = CheckpointConfig()
    for field_name, (arg, value) in legacy.items():
        current = getattr(config, field_name)
        if given is not None and current != getattr(default, field_name) and current != value:
            raise ValueError(
                f"tune.run(): {arg}= says {field_name}={value!r} but checkpoint_config has "
                f"{field_name}={current!r}; give it in checkpoint_config only"
            )
        setattr(config, field_name, value)
    if config.checkpoint_at_end is None:  # Ray's tune.run: no final save unless asked
        config.checkpoint_at_end = False  # (a Tuner's default differs: tuner.py)
    return config


def resume_flags(resume: bool | str | None) -> dict[str, bool] | None:
    if resume is None or resume is False:
        return None
    text = "LOCAL" if resume is True else str(resume).upper()
    base, _, suffix = text.partition("+")
    if base not in ("LOCAL", "AUTO", "ERRORED_ONLY") or suffix not in (
        "",
        "ERRORED",
        "ERRORED_ONLY",
        "RESTART_ERRORED",
    ):
        raise ValueError(
            f"tune.run(resume={resume!r}) is not valid: use False, True, 'LOCAL', 'AUTO' or "
            "'ERRORED_ONLY', optionally with '+ERRORED', '+ERRORED_ONLY' or '+RESTART_ERRORED'"
        )
    only_errored = "ERRORED_ONLY" in (base, suffix)
    return {
        "auto": base == "AUTO",
        "resume_unfinished": not only_errored,
        "resume_errored": only_errored or suffix == "ERRORED",
        "restart_errored": suffix == "RESTART_ERRORED",
    }
