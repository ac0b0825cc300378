"""Callbacks: hooks into the experiment's events (loggers, progress, integrations)."""

from tunefleet.callbacks._base import Callback

__all__ = ["Callback"]
