"""MLflow: one run per trial, with its params, its metrics per step and its checkpoint.

`MLflowLoggerCallback` keeps Ray Tune's name and arguments. It needs MLflow (extra
``tunefleet[mlflow]``: mlflow-skinny). The tracking store is any MLflow tracking URI:
a server, or ``sqlite:///mlflow.db`` on one machine.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tunefleet._metrics import flatten
from tunefleet._redact import redact
from tunefleet.callbacks._files import TrialEndCallback, numeric_metrics
from tunefleet.trial import Trial

_PARAM_MAX = 6000  # MLflow's limit on a param value's length


class MLflowLoggerCallback(TrialEndCallback):
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

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._run(trial)

    def on_trial_result(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        result: dict[str, Any],
        **info: Any,
    ) -> None:
        from mlflow.entities import Metric

        run_id = self._run(trial)
        step = int(result.get("training_iteration", 0))
        stamp = int(float(result.get("timestamp") or time.time()) * 1000)
        metrics = [Metric(k, v, stamp, step) for k, v in numeric_metrics(result).items()]
        if metrics:
            self._client.log_batch(run_id, metrics=metrics)

    def _trial_ended(self, trial: Trial, failed: bool) -> None:
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
