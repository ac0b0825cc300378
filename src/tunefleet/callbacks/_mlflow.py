"""MLflow: one run per trial, with its params, its metrics per step and its checkpoint.

`MLflowLoggerCallback` keeps Ray Tune's name and arguments. It needs MLflow (extra
``tunefleet[mlflow]``: mlflow-skinny). The tracking store is any MLflow tracking URI:
a server, or ``sqlite:///mlflow.db`` on one machine.
"""

from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any

from tunefleet._metrics import flatten
from tunefleet._redact import redact
from tunefleet.callbacks._base import LoggerCallback
from tunefleet.callbacks._files import numeric_metrics
from tunefleet.trial import Trial

_PARAM_MAX = 6000  # MLflow's limit on a param value's length


class MLflowLoggerCallback(LoggerCallback):
    """Logs each trial as an MLflow run.

    Args:
        tracking_uri: where MLflow records runs (default: MLflow's own, e.g.
            ``$MLFLOW_TRACKING_URI``).
        registry_uri: MLflow's model registry, if not the tracking URI.
        experiment_name: the MLflow experiment (default: ``$MLFLOW_EXPERIMENT_NAME``,
            else the tunefleet experiment's name); created if it does not exist.
        tags: tags set on every run (each run also gets ``trial_id``).
        tracking_token: set as ``MLFLOW_TRACKING_TOKEN`` for an authenticated server.
        save_artifact: upload each trial's latest checkpoint as the artifact
            ``checkpoint`` when the trial ends.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        registry_uri: str | None = None,
        experiment_name: str | None = None,
        tags: dict[str, str] | None = None,
        tracking_token: str | None = None,
        save_artifact: bool = False,
    ) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise ImportError(
                'MLflowLoggerCallback needs MLflow: pip install "tunefleet[mlflow]"'
            ) from e
        if tracking_token:
            os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
        self._client = MlflowClient(tracking_uri=tracking_uri, registry_uri=registry_uri)
        self._experiment_name = experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        self._experiment_id: str | None = None
        self._tags = dict(tags or {})
        self._save_artifact = save_artifact
        self._runs: dict[str, str] = {}  # trial id -> MLflow run id

    def _experiment(self, trial: Trial) -> str:
        if self._experiment_id is None:
            name = self._experiment_name or os.path.basename(
                os.path.dirname(os.path.dirname(trial.path))
            )
            found = self._client.get_experiment_by_name(name)
            self._experiment_id = (
                found.experiment_id if found else self._client.create_experiment(name)
            )
        return self._experiment_id

    def _run(self, trial: Trial) -> str:
        run_id = self._runs.get(trial.trial_id)
        if run_id is None:
            tags = {**self._tags, "trial_id": trial.trial_id}
            run = self._client.create_run(self._experiment(trial), run_name=trial.name, tags=tags)
            run_id = self._runs[trial.trial_id] = run.info.run_id
            for key, value in flatten(redact(trial.config)).items():
                self._client.log_param(run_id, key, str(value)[:_PARAM_MAX])
        return run_id

    def log_trial_start(self, trial: Trial) -> None:
        self._run(trial)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        run_id = self._run(trial)
        step = int(result.get("training_iteration", 0))
        stamp = int(float(result.get("timestamp") or time.time()) * 1000)
        metrics = [Metric(k, v, stamp, step) for k, v in numeric_metrics(result).items()]
        if metrics:
            self._client.log_batch(run_id, metrics=metrics)

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        run_id = self._runs.pop(trial.trial_id, None)
        if run_id is None:
            return
        checkpoint = trial.latest_checkpoint
        if self._save_artifact and checkpoint and os.path.isdir(checkpoint):
            self._client.log_artifacts(run_id, checkpoint, artifact_path="checkpoint")
        self._client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial_id in list(self._runs):  # interrupted (Ctrl-C): resumable, not failed
            self._client.set_terminated(self._runs.pop(trial_id), status="KILLED")


# Ray's older form kept its settings under config["mlflow"]; these keys are read there.
_LEGACY_KEYS = (
    "tracking_uri",
    "registry_uri",
    "experiment_id",
    "experiment_name",
    "tracking_token",
    "artifact_location",
    "run_name",
    "create_experiment_if_not_exists",
    "tags",
)


def setup_mlflow(
    config: dict[str, Any] | None = None,
    tracking_uri: str | None = None,
    registry_uri: str | None = None,
    experiment_id: str | None = None,
    experiment_name: str | None = None,
    tracking_token: str | None = None,
    artifact_location: str | None = None,
    run_name: str | None = None,
    create_experiment_if_not_exists: bool = False,
    tags: dict[str, Any] | None = None,
    rank_zero_only: bool = True,
) -> ModuleType:
    """Start an MLflow run for the current trial, from inside the trainable.

    As Ray's ``setup_mlflow``: the experiment is `experiment_id` if it exists, else
    `experiment_name` (default ``$MLFLOW_EXPERIMENT_NAME``, else the trial's name),
    created only with ``create_experiment_if_not_exists=True``. The run is named
    `run_name` (default: the experiment's name), tagged with `tags`, and `config`
    (flattened, redacted, without an ``"mlflow"`` entry) is logged as its params.

    Args:
        config: the trial's config, logged as params. A ``config["mlflow"]`` dict
            (Ray's older form) gives defaults for the arguments below.
        tracking_uri: where MLflow records runs (a server, ``sqlite:///mlflow.db``,
            ``file:./mlruns``); default MLflow's own (``$MLFLOW_TRACKING_URI``).
        registry_uri: MLflow's model registry, if not the tracking URI.
        experiment_id: an existing experiment (default ``$MLFLOW_EXPERIMENT_ID``).
        experiment_name: the experiment's name, when no id is given or found.
        tracking_token: set as ``MLFLOW_TRACKING_TOKEN`` for an authenticated server.
        artifact_location: where a created experiment keeps its artifacts.
        run_name: the run's name.
        create_experiment_if_not_exists: create the named experiment if missing.
        tags: tags set on the run.
        rank_zero_only: kept for Ray's signature (a tunefleet trial is one process).

    Returns:
        The ``mlflow`` module, with this trial's run active: ``mlflow.log_metric(...)``.

    Raises:
        ValueError: no experiment with the id or name exists and none may be created.

    Example:
        >>> def train(config):  # doctest: +SKIP
        ...     mlflow = setup_mlflow(config, experiment_name="mnist", tracking_uri=uri)
        ...     mlflow.log_metric("loss", 0.1)
    """
    try:
        import mlflow
    except ImportError as e:
        raise ImportError('setup_mlflow needs MLflow: pip install "tunefleet[mlflow]"') from e
    if config is not None and not isinstance(config, dict):
        raise TypeError(f"setup_mlflow: config must be a dict, not {type(config).__name__}")
    params = dict(config or {})
    given: dict[str, Any] = {
        "tracking_uri": tracking_uri,
        "registry_uri": registry_uri,
        "experiment_id": experiment_id,
        "experiment_name": experiment_name,
        "tracking_token": tracking_token,
        "artifact_location": artifact_location,
        "run_name": run_name,
        "create_experiment_if_not_exists": create_experiment_if_not_exists or None,
        "tags": tags,
    }
    legacy = params.pop("mlflow", None)
    if isinstance(legacy, dict):
        for key in _LEGACY_KEYS:
            if given[key] is None and legacy.get(key) is not None:
                given[key] = legacy[key]
    trial_name = _trial_name()
    if given["tracking_token"]:
        os.environ["MLFLOW_TRACKING_TOKEN"] = str(given["tracking_token"])
    if given["tracking_uri"] is not None:
        mlflow.set_tracking_uri(given["tracking_uri"])
    if given["registry_uri"] is not None:
        mlflow.set_registry_uri(given["registry_uri"])
    name = given["experiment_name"] or os.environ.get("MLFLOW_EXPERIMENT_NAME") or trial_name
    found = _experiment_id(
        mlflow,
        given["experiment_id"] or os.environ.get("MLFLOW_EXPERIMENT_ID"),
        name,
        bool(given["create_experiment_if_not_exists"]),
        given["artifact_location"],
    )
    if mlflow.active_run() is not None:  # left by an earlier trial in this worker
        mlflow.end_run()
    mlflow.start_run(
        experiment_id=found,
        run_name=given["run_name"] or name,
        tags={str(k): str(v) for k, v in (given["tags"] or {}).items()} or None,
    )
    flat = {key: str(value)[:_PARAM_MAX] for key, value in flatten(redact(params)).items()}
    if flat:
        mlflow.log_params(flat)
    return mlflow


def _trial_name() -> str | None:
    from tunefleet.session import get_context

    try:
        return get_context().trial_name
    except RuntimeError:  # called outside a trial: Ray allows it, with no defaults
        return None


def _experiment_id(
    mlflow: Any, wanted_id: str | None, name: str | None, create: bool, artifacts: str | None
) -> str:
    from mlflow.exceptions import MlflowException

    if wanted_id is not None:
        try:
            return str(mlflow.get_experiment(wanted_id).experiment_id)
        except MlflowException:
            pass  # no such id: look the name up, as Ray does
    if name is not None:
        experiment = mlflow.get_experiment_by_name(name)
        if experiment is not None:
            return str(experiment.experiment_id)
        if create:
            return str(mlflow.create_experiment(name, artifact_location=artifacts))
    raise ValueError(
        f"setup_mlflow: no MLflow experiment with experiment_id={wanted_id!r} or "
        f"experiment_name={name!r} exists; create it first, or pass "
        "create_experiment_if_not_exists=True (with an experiment_name)"
    )
