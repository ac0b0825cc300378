"""`TuneError`, in a module of its own so that the modules below the tuner can raise it."""

from __future__ import annotations


class TuneError(Exception):
    """An experiment-level failure (e.g. trials failed and raise_on_failed_trial=True)."""


TuneError.__module__ = "tunefleet.tuner"  # where users import it from (its repr, pickles)
