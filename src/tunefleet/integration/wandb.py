"""Weights & Biases under Ray's module name (``ray.air.integrations.wandb``).

`WandbLoggerCallback` (in the driver, a run per trial) and `setup_wandb` (inside a
trainable); both are defined in `tunefleet.callbacks`. Extra: ``tunefleet[wandb]``.
"""

from tunefleet.callbacks._wandb import WandbLoggerCallback, setup_wandb

__all__ = ["WandbLoggerCallback", "setup_wandb"]
