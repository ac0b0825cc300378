"""Weights & Biases: one W&B run per trial, with its config, its metrics and its checkpoints.

`WandbLoggerCallback` keeps Ray Tune's name and arguments and, like the MLflow logger,
runs in the driver: each trial's run has the trial's name, and the trial's id as its
W&B id, so a trial that resumes continues its run. `setup_wandb` starts a run from
inside a trainable instead. Both need wandb (extra ``tunefleet[wandb]``). Configs and
metrics are redacted first, and an API key is used only to log in, never written or
logged. ``WANDB_MODE=offline`` keeps everything on disk for a later ``wandb sync``.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

from tunefleet._metrics import json_data
from tunefleet._redact import redact, remember
from tunefleet.callbacks._base import LoggerCallback
from tunefleet.callbacks._files import numeric_metrics
from tunefleet.storage.checkpoint import Checkpoint
from tunefleet.storage.paths import is_url
from tunefleet.trial import Trial

_SET_PER_TRIAL = ("id", "config", "reinit")  # chosen by the callback for each trial's run


def _wandb(what: str) -> Any:
    try:
        import wandb
    except ImportError as e:
        raise ImportError(f'{what} needs wandb: pip install "tunefleet[wandb]"') from e
    return wandb


def _api_key(api_key: str | None, api_key_file: str | None, where: str) -> str | None:
    """The key from `api_key` or the file, remembered as a secret (no log line shows it)."""
    if api_key is not None and api_key_file is not None:
        raise ValueError(f"{where}: give api_key or api_key_file, not both")
    if api_key_file is not None:
        path = os.path.expanduser(os.fspath(api_key_file))
        try:
            with open(path, encoding="utf-8") as f:
                api_key = f.read().strip()
        except OSError as e:
            raise ValueError(f"{where}: api_key_file={path!r} cannot be read: {e.strerror}") from e
        if not api_key:
            raise ValueError(f"{where}: api_key_file={path!r} is empty")
    if api_key is not None:
        if not isinstance(api_key, str) or not api_key:
            raise TypeError(f"{where}: api_key must be a non-empty string")
        remember([api_key])
    return api_key


def _init_kwargs(wandb: Any, kwargs: dict[str, Any], where: str, key: str | None) -> dict[str, Any]:
    """Check the extra `wandb.init` arguments; put the API key into its settings."""
    known = set(inspect.signature(wandb.init).parameters)
    for name in kwargs:
        if name not in known:
            raise TypeError(
                f"{where}: {name!r} is not an argument of wandb.init; use one of {sorted(known)}"
            )
        if name in _SET_PER_TRIAL:
            raise ValueError(f"{where}: {name!r} is set for each trial's run; leave it out")
    out = dict(kwargs)
    if key is not None:
        settings = out.get("settings")
        if settings is None:
            out["settings"] = wandb.Settings(api_key=key)
        elif isinstance(settings, dict):
            out["settings"] = {**settings, "api_key": key}
        else:
            out["settings"] = settings.model_copy(update={"api_key": key})
    return out


def _plain(config: dict[str, Any]) -> dict[str, Any]:
    """The redacted config as JSON data (W&B stores configs as JSON)."""
    data: dict[str, Any] = json_data(redact(config))
    return data


def _experiment_name(trial: Trial) -> str:
    return os.path.basename(os.path.dirname(os.path.dirname(trial.path)))


class WandbLoggerCallback(LoggerCallback):
    """Logs each trial as a Weights & Biases run.

    Args:
        project: the W&B project (default: ``$WANDB_PROJECT``, else the experiment's
            name).
        group: the runs' group (default: ``$WANDB_RUN_GROUP``, else the experiment's name).
        api_key_file: a file holding the API key.
        api_key: the API key (prefer `api_key_file` or ``wandb login``).
        excludes: result keys not to log (a nested key as ``"a/b"``, or its parent ``"a"``).
        log_config: also update the run's config from each result's trial config (it
            changes under PBT); the config is always logged when the run starts.
        upload_checkpoints: log each checkpoint as a W&B artifact of type ``model``.
        save_checkpoints: Ray Tune's older name for `upload_checkpoints`.
        upload_timeout: kept for Ray Tune's signature; unused (a run's finish waits
            for its uploads).
        **kwargs: more `wandb.init` arguments (``entity``, ``tags``, ``mode``, ``dir``
            (default: ``$WANDB_DIR``, else the trial's directory), ...).

    Example:
        >>> tune.RunConfig(callbacks=[WandbLoggerCallback(project="mnist")])  # doctest: +SKIP
    """

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        api_key_file: str | None = None,
        api_key: str | None = None,
        excludes: list[str] | None = None,
        log_config: bool = False,
        upload_checkpoints: bool = False,
        save_checkpoints: bool = False,
        upload_timeout: float = 1800,
        **kwargs: Any,
    ) -> None:
        where = "WandbLoggerCallback"
        del upload_timeout  # Ray's: W&B's own finish waits for the uploads here
        self._wandb = _wandb(where)
        if excludes is not None and (
            not isinstance(excludes, (list, tuple)) or not all(isinstance(k, str) for k in excludes)
        ):
            raise TypeError(f"{where}: excludes={excludes!r} must be a list of result keys")
        self._project = project or os.environ.get("WANDB_PROJECT")
        self._group = group or os.environ.get("WANDB_RUN_GROUP")
        self._excludes = tuple(excludes or ())
        self._log_config = bool(log_config)
        self._upload_checkpoints = bool(upload_checkpoints or save_checkpoints)
        key = _api_key(api_key, api_key_file, where)
        self._kwargs = _init_kwargs(self._wandb, kwargs, where, key)
        self._runs: dict[str, Any] = {}  # trial id -> W&B run
        self._configs: dict[str, str] = {}  # trial id -> the config last logged (JSON)

    def _run(self, trial: Trial) -> Any:
        run = self._runs.get(trial.trial_id)
        if run is None:
            experiment = _experiment_name(trial)
            config = _plain(trial.config)
            kwargs = {
                "project": self._project or experiment,
                "group": self._group or experiment,
                "name": trial.name,
                "dir": os.environ.get("WANDB_DIR") or trial.path,
                "resume": "allow",
                **self._kwargs,
            }
            os.makedirs(kwargs["dir"], exist_ok=True)
            run = self._wandb.init(id=trial.trial_id, config=config, reinit="create_new", **kwargs)
            run.define_metric("training_iteration")
            run.define_metric("*", step_metric="training_iteration")
            self._runs[trial.trial_id] = run
            self._configs[trial.trial_id] = json.dumps(config, sort_keys=True)
        return run

    def _excluded(self, key: str) -> bool:
        return any(key == name or key.startswith(f"{name}/") for name in self._excludes)

    def log_trial_start(self, trial: Trial) -> None:
        self._run(trial)

    def log_trial_restore(self, trial: Trial) -> None:
        self._run(trial)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        run = self._run(trial)
        if self._log_config:
            config = _plain(trial.config)
            text = json.dumps(config, sort_keys=True)
            if text != self._configs.get(trial.trial_id):
                run.config.update(config, allow_val_change=True)
                self._configs[trial.trial_id] = text
        numbers = {k: v for k, v in numeric_metrics(result).items() if not self._excluded(k)}
        numbers["training_iteration"] = int(result.get("training_iteration", 0))
        run.log(numbers)

    def on_checkpoint(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        checkpoint: Checkpoint,
        **info: Any,
    ) -> None:
        if not self._upload_checkpoints:
            return
        run = self._run(trial)
        artifact = self._wandb.Artifact(f"checkpoint_{trial.trial_id}", type="model")
        if is_url(checkpoint.path):
            artifact.add_reference(checkpoint.path)
        else:
            artifact.add_dir(checkpoint.path)
        run.log_artifact(artifact)

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        run = self._runs.pop(trial.trial_id, None)
        self._configs.pop(trial.trial_id, None)
        if run is None:
            return
        last = numeric_metrics(trial.last_result or {})
        run.summary.update({k: v for k, v in last.items() if not self._excluded(k)})
        run.finish(exit_code=1 if failed else 0)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial_id in list(self._runs):  # interrupted (Ctrl-C): resumable, not failed
            run = self._runs.pop(trial_id)
            run.mark_preempting()
            run.finish()
        self._configs.clear()
        if self._wandb.run is None:  # nobody else uses W&B here: stop its service process
            self._wandb.teardown()


def setup_wandb(
    config: dict[str, Any] | None = None,
    api_key: str | None = None,
    api_key_file: str | None = None,
    rank_zero_only: bool = True,
    **kwargs: Any,
) -> Any:
    """Start a W&B run for the current trial, from inside the trainable.

    The run's id and name are the trial's, its group the experiment's, its config
    `config` (redacted). Finish it before the trainable returns: use it as a context
    manager.

    Args:
        config: the trial's config, logged as the run's config.
        api_key: the API key (prefer `api_key_file` or ``wandb login``).
        api_key_file: a file holding the API key.
        rank_zero_only: kept for Ray Tune's signature (a tunefleet trial is one process).
        **kwargs: more `wandb.init` arguments (``project``: default ``$WANDB_PROJECT``,
            else the experiment's name; ``dir``: default ``$WANDB_DIR``, else the trial's
            directory).

    Returns:
        The `wandb` run.

    Example:
        >>> def train(config):  # doctest: +SKIP
        ...     with setup_wandb(config, project="mnist") as run:
        ...         run.log({"loss": 0.1})
    """
    from tunefleet.session import get_context

    where = "setup_wandb"
    wandb = _wandb(where)
    context = get_context()
    key = _api_key(api_key, api_key_file, where)
    extra = _init_kwargs(wandb, kwargs, where, key)
    defaults = {
        "project": os.environ.get("WANDB_PROJECT") or context.experiment_name,
        "group": os.environ.get("WANDB_RUN_GROUP") or context.experiment_name,
        "name": context.trial_name,
        "dir": os.environ.get("WANDB_DIR") or context.trial_dir,
        "resume": "allow",
    }
    init = {**defaults, **extra}
    os.makedirs(init["dir"], exist_ok=True)
    _forget_stopped_service(wandb)
    # a reused worker may still hold the previous trial's run
    run = wandb.init(
        id=context.trial_id, config=_plain(config or {}), reinit="finish_previous", **init
    )
    # Both run.finish() and leaving `with run:` end in Run._finish (wandb >= 0.19).
    name = "_finish" if callable(getattr(run, "_finish", None)) else "finish"
    finish = getattr(run, name)

    def finish_and_flush(*args: Any, **kwargs: Any) -> Any:
        # The worker ends every process a trial leaves behind when it returns, W&B's
        # service among them: stop the service now, so it writes out what it holds.
        out = finish(*args, **kwargs)
        if wandb.run is None:
            wandb.teardown()
        return out

    setattr(run, name, finish_and_flush)
    return run


def _forget_stopped_service(wandb: Any) -> None:
    """After each trial the worker ends the processes it left, W&B's service among them:
    a later trial in the same worker must start a new one, not talk to the dead one."""
    if wandb.run is None:
        try:
            wandb.teardown()  # forgets the service first, then tells it to stop
        except Exception:  # the dead service cannot answer: nothing to stop
            pass
