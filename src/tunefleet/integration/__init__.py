"""Report-and-checkpoint callbacks for training frameworks, under Ray Tune's module names.

Each module imports its framework only when it is itself imported, so ``import
tunefleet`` stays light; a missing framework raises ImportError naming the extra to
install. A Ray Tune script changes its imports only::

    from tunefleet.integration.lightning import TuneReportCheckpointCallback
    from tunefleet.integration.pytorch_lightning import TuneReportCheckpointCallback
    from tunefleet.integration.keras import TuneReportCheckpointCallback
    from tunefleet.integration.xgboost import TuneReportCheckpointCallback
    from tunefleet.integration.lightgbm import TuneReportCheckpointCallback
    from tunefleet.integration.huggingface import TuneReportCheckpointCallback

Each callback reports through `tunefleet.report` from inside a trial, so it runs in
the trainable, in the trial's worker process.
"""

__all__: list[str] = []
