"""tunefleet: hyperparameter tuning with Ray Tune's API, fast, isolated and durable.

    import tunefleet as tune

    tuner = tune.Tuner(train, param_space={"lr": tune.loguniform(1e-4, 1e-1)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=20))
    results = tuner.fit()

Importing this package is light: pandas, torch and ray are loaded only when used.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tunefleet._redact import RedactingFilter, Secret
from tunefleet._version import __version__
from tunefleet.session import TuneContext, get_checkpoint, get_context, report

if TYPE_CHECKING:
    from tunefleet._experiments import Experiment, run_experiments
    from tunefleet._registry import register_trainable
    from tunefleet.callbacks import Callback
    from tunefleet.config import (
        CheckpointConfig,
        FailureConfig,
        RunConfig,
        SyncConfig,
        TuneConfig,
    )
    from tunefleet.progress.reporters import (
        CLIReporter,
        JupyterNotebookReporter,
        ProgressReporter,
    )
    from tunefleet.resources import PlacementGroupFactory
    from tunefleet.results import ExperimentAnalysis, Result, ResultGrid, TrialError
    from tunefleet.space import (
        choice,
        grid_search,
        lograndint,
        loguniform,
        qlograndint,
        qloguniform,
        qrandint,
        qrandn,
        quniform,
        randint,
        randn,
        sample_from,
        uniform,
    )
    from tunefleet.stoppers import Stopper
    from tunefleet.storage.checkpoint import Checkpoint
    from tunefleet.trainable import Trainable, with_parameters, with_resources
    from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus
    from tunefleet.tuner import TuneError, Tuner, run

logging.getLogger("tunefleet").addHandler(logging.NullHandler())
logging.getLogger("tunefleet").addFilter(RedactingFilter())  # no secret in a log line

# Everything a trial's worker does not need is imported on first use (PEP 562), so that
# a worker, which imports this package to run the trainable, starts without the driver's
# modules (the tuner, the engine, the reporters): tens of milliseconds at every start.
_LAZY = {
    "Experiment": "tunefleet._experiments",
    "run_experiments": "tunefleet._experiments",
    "register_trainable": "tunefleet._registry",
    "Callback": "tunefleet.callbacks",
    "CheckpointConfig": "tunefleet.config",
    "FailureConfig": "tunefleet.config",
    "RunConfig": "tunefleet.config",
    "SyncConfig": "tunefleet.config",
    "TuneConfig": "tunefleet.config",
    "CLIReporter": "tunefleet.progress.reporters",
    "JupyterNotebookReporter": "tunefleet.progress.reporters",
    "ProgressReporter": "tunefleet.progress.reporters",
    "PlacementGroupFactory": "tunefleet.resources",
    "ResultGrid": "tunefleet.results",
    "Result": "tunefleet.results",
    "ExperimentAnalysis": "tunefleet.results",
    "TrialError": "tunefleet.results",
    **dict.fromkeys(
        (
            "choice",
            "grid_search",
            "lograndint",
            "loguniform",
            "qlograndint",
            "qloguniform",
            "qrandint",
            "qrandn",
            "quniform",
            "randint",
            "randn",
            "sample_from",
            "uniform",
        ),
        "tunefleet.space",
    ),
    "Stopper": "tunefleet.stoppers",
    "Checkpoint": "tunefleet.storage.checkpoint",
    "Trainable": "tunefleet.trainable",
    "with_parameters": "tunefleet.trainable",
    "with_resources": "tunefleet.trainable",
    "FailureKind": "tunefleet.trial",
    "FailureRecord": "tunefleet.trial",
    "Trial": "tunefleet.trial",
    "TrialStatus": "tunefleet.trial",
    "TuneError": "tunefleet.tuner",
    "Tuner": "tunefleet.tuner",
    "run": "tunefleet.tuner",
}


# Ray Tune's sub-modules, reached as attributes (`tune.search.OptunaSearch`) as after
# `from ray import tune`; each is imported on first use, so `import tunefleet` stays light.
_SUBMODULES = frozenset(
    {"search", "schedulers", "stopper", "stoppers", "logger", "callbacks", "integration", "utils"}
)


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"tunefleet.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunefleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)


__all__ = [
    "CLIReporter",
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "FailureKind",
    "FailureRecord",
    "JupyterNotebookReporter",
    "PlacementGroupFactory",
    "ProgressReporter",
    "Result",
    "ResultGrid",
    "RunConfig",
    "Secret",
    "Stopper",
    "SyncConfig",
    "Trainable",
    "Trial",
    "TrialError",
    "TrialStatus",
    "TuneConfig",
    "TuneContext",
    "TuneError",
    "Tuner",
    "__version__",
    "choice",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "register_trainable",
    "report",
    "run",
    "run_experiments",
    "sample_from",
    "uniform",
    "with_parameters",
    "with_resources",
]
