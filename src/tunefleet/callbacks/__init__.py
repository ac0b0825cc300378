"""Callbacks: hooks into the experiment's events (loggers, progress, integrations)."""

from tunefleet.callbacks._base import Callback, LoggerCallback
from tunefleet.callbacks._files import CSVLoggerCallback, JsonLoggerCallback
from tunefleet.callbacks._list import CallbackList
from tunefleet.callbacks._mlflow import MLflowLoggerCallback, setup_mlflow
from tunefleet.callbacks._tensorboard import TBXLoggerCallback
from tunefleet.callbacks._wandb import WandbLoggerCallback, setup_wandb

__all__ = [
    "CSVLoggerCallback",
    "Callback",
    "CallbackList",
    "JsonLoggerCallback",
    "LoggerCallback",
    "MLflowLoggerCallback",
    "TBXLoggerCallback",
    "WandbLoggerCallback",
    "setup_mlflow",
    "setup_wandb",
]
