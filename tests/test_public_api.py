"""The public surface: pinned exports, a light import, Ray Tune's names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import tunefleet as tune

EXPECTED = {
    "CLIReporter",
    "JupyterNotebookReporter",
    "ProgressReporter",
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "FailureKind",
    "FailureRecord",
    "PlacementGroupFactory",
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
}


def test_exports_are_pinned() -> None:
    assert set(tune.__all__) == EXPECTED
    for name in tune.__all__:
        assert getattr(tune, name) is not None, name


def test_import_is_light() -> None:
    code = (
        "import sys, tunefleet; "
        "heavy = [m for m in ('pandas', 'numpy', 'torch', 'ray', 'sqlite3') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    # most names are imported on first use (PEP 562): each must still be found, by
    # attribute and by `from tunefleet import ...`, and be listed by dir()
    code = (
        "import tunefleet as tune; "
        "missing = [n for n in tune.__all__ if getattr(tune, n, None) is None]; "
        "from tunefleet import Tuner, TuneConfig, uniform, Trainable; "
        "print(','.join(missing), set(tune.__all__) <= set(dir(tune)), "
        "Tuner is tune.Tuner, uniform.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "tunefleet.space._functions"], out.stdout


def test_a_worker_starts_without_the_drivers_modules() -> None:
    # a trial's worker imports its entry point and `tunefleet` (to unpickle the trainable):
    # neither may pull in the tuner, the engine, the store or psutil, each tens of
    # milliseconds at every worker's start
    code = (
        "import sys, tunefleet, tunefleet.backends.local._worker; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(("
        "'tunefleet.tuner', 'tunefleet.engine', 'tunefleet.store', 'tunefleet.progress', "
        "'tunefleet.backends.local._backend', 'tunefleet.space', 'psutil', 'sqlite3')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_subpackages_export_their_names() -> None:
    from tunefleet import schedulers, search

    assert {"FIFOScheduler", "TrialScheduler", "Decision"} <= set(schedulers.__all__)
    assert {"Searcher", "BasicVariantGenerator", "FINISHED"} <= set(search.__all__)


def test_ray_tune_submodules_are_attributes_loaded_on_first_use() -> None:
    # `from ray import tune` users write tune.search.X, tune.schedulers.X, ...
    code = (
        "import sys, tunefleet as tune; "
        "before = 'tunefleet.search' in sys.modules or 'tunefleet.schedulers' in sys.modules; "
        "names = [tune.search.BasicVariantGenerator, tune.schedulers.ASHAScheduler, "
        "tune.stopper.MaximumIterationStopper, tune.logger.CSVLoggerCallback, "
        "tune.callbacks.Callback, tune.stoppers.TimeoutStopper]; "
        "print(before, all(n.__name__ for n in names), 'tunefleet.search' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    try:
        tune.searchh  # noqa: B018
    except AttributeError as exc:
        assert "searchh" in str(exc)
    else:
        raise AssertionError("tune.searchh should not exist")


def test_ray_result_keys_name_what_every_result_holds(tmp_path: Path) -> None:
    from tunefleet import result as keys

    def train(config: dict[str, Any]) -> None:
        tune.report({"loss": 1.0})

    grid = tune.Tuner(
        train,
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    metrics = grid[0].metrics or {}
    # A request a result may carry, the key a returned number is reported under, the
    # totals of increments the trainable reports, and the names of the loggers' files
    # (EXPR_*): none is in every result. AUTO_RESULT_KEYS is a tuple of keys, not a key.
    occasional = {"SHOULD_CHECKPOINT", "DEFAULT_METRIC", "AUTO_RESULT_KEYS"} | {
        name for name in keys.__all__ if name.startswith(("TIMESTEPS_", "EPISODES_", "EXPR_"))
    }
    for name in set(keys.__all__) - occasional:
        assert getattr(keys, name) in metrics, name
    assert metrics[keys.TRAINING_ITERATION] == 1
    assert metrics[keys.DONE] is True  # the last result of a trial that finished, as in Ray
