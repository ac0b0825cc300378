"""MLflow under Ray's module name (``ray.air.integrations.mlflow``).

`MLflowLoggerCallback` (in the driver, a run per trial) and `setup_mlflow` (inside a
trainable); both are defined in `tunefleet.callbacks`. Extra: ``tunefleet[mlflow]``.
"""

from tunefleet.callbacks._mlflow import MLflowLoggerCallback, setup_mlflow

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]
