"""Ray Tune's ``ray.tune.logger`` names: the per-trial file loggers."""

from tunefleet.callbacks import CSVLoggerCallback, JsonLoggerCallback

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback"]
