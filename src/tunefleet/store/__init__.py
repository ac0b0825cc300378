"""The experiment store: one SQLite database per experiment, one writer, many readers.

Layout: ``<storage_path>/<experiment>/experiment.db`` and ``trials/<trial_id>/``.
Tables: append-only ``events``, ``results`` and ``checkpoints``; current-state
``trials``, ``meta`` and ``state`` (searcher/scheduler state). Every value is JSON
text, never a pickle, so a person (or ``sqlite3``) can read it.

The controller writes through `ExperimentStore` (buffered, one transaction per
`flush()`); the CLI, `ResultGrid` and dashboards read through `StoreReader`, which
opens the database read-only and never blocks the writer.
"""

from __future__ import annotations

from tunefleet.store._find import list_experiments, resolve_experiment
from tunefleet.store._reader import StoreReader
from tunefleet.store._schema import DB_FILENAME, SCHEMA_VERSION, default_storage_path
from tunefleet.store._writer import ExperimentStore

__all__ = [
    "DB_FILENAME",
    "SCHEMA_VERSION",
    "ExperimentStore",
    "StoreReader",
    "default_storage_path",
    "list_experiments",
    "resolve_experiment",
]
