"""Ray Tune's ``ray.tune.logger`` names: the per-trial loggers."""

from tunefleet.callbacks import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "TBXLoggerCallback"]
