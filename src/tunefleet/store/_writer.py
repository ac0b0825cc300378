"""The writer side of the experiment database: the controller's only way to persist.

Every call only appends to an in-memory buffer (its cost does not depend on how
many trials or results exist); `flush()` writes the whole buffer in one
transaction. Trials are serialized at flush time, so updating one trial many
times in a step costs a single row write.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tunefleet import _collector
from tunefleet._redact import redact_text
from tunefleet._state_log import join, split
from tunefleet.store._log_rows import LogRows
from tunefleet.store._schema import (
    DB_FILENAME,
    SCHEMA,
    SCHEMA_VERSION,
    TRIALS_DIRNAME,
    decode,
    decode_each,
    decode_many,
    encode,
)
from tunefleet.trial import Trial

logger = logging.getLogger("tunefleet")

_UPSERT_TRIAL = (
    "INSERT INTO trials (trial_id, idx, name, status, data, updated) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (trial_id) DO UPDATE SET idx = excluded.idx, name = excluded.name, "
    "status = excluded.status, data = excluded.data, updated = excluded.updated"
)
_INSERT_CHECKPOINT = (
    "INSERT INTO checkpoints (trial_id, iteration, path, metrics, time, deleted) "
    "VALUES (?, ?, ?, ?, ?, 0)"
)
_DELETE_CHECKPOINT = "UPDATE checkpoints SET deleted = 1 WHERE path = ? AND deleted = 0"
_UPSERT_META = (
    "INSERT INTO meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
_UPSERT_STATE = (
    "INSERT INTO state (key, value, updated) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated = excluded.updated"
)


class StoreWriteError(OSError):
    """The store could not commit; what it had buffered is kept for the next flush."""

    def __init__(self, db_path: Path, cause: sqlite3.Error, results: int, events: int) -> None:
        super().__init__(
            f"The experiment store {db_path} could not write {results} result(s) and "
            f"{events} event(s): {cause}. What it recorded before is intact; free space "
            "(or end what locks it) and resume the experiment: the trials go on from their "
            "last recorded checkpoints and redo what was not recorded."
        )
        self.db_path = db_path
        self.cause = str(cause)
        self.sqlite_errorcode = int(getattr(cause, "sqlite_errorcode", 0))


class ExperimentStore:
    """One experiment's SQLite database, opened for writing by its single writer.

    Creates the directory, the database and its schema if missing; reopening an
    existing experiment (resume) keeps everything and appends after it.

    Args:
        experiment_path: the experiment directory (``<storage>/<name>``).

    Example:
        >>> import tempfile
        >>> store = ExperimentStore(tempfile.mkdtemp())
        >>> store.write_meta({"metric": "loss", "mode": "min"})
        >>> store.close()  # flushes
    """

    def __init__(self, experiment_path: str | os.PathLike[str]) -> None:
        self.path = Path(experiment_path).expanduser()
        (self.path / TRIALS_DIRNAME).mkdir(parents=True, exist_ok=True)
        self.db_path = self.path / DB_FILENAME
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.db_path, isolation_level=None, timeout=30.0
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(SCHEMA)
        self._meta: dict[str, str] = {}
        self._state: dict[str, tuple[str, float]] = {}
        self._dirty: dict[str, Trial] = {}
        self._events: list[tuple[float, str | None, str, str | None]] = []
        self._results: list[tuple[str, int | None, float, str]] = []
        # In the order they happened: a path deleted and then written again (a rewind, a
        # PBT exploit) must keep its new record.
        self._checkpoint_ops: list[tuple[str, tuple[Any, ...]]] = []
        self._written_state: dict[str, str] = {}  # what each state key holds on disk
        self._logs = LogRows(self._db)  # the states' StateLogs, written by what they gained
        # Bytes of algorithm state committed so far (heads and log rows): a run's state
        # costs per step what changed, not what it holds (tests and benchmarks read it).
        self.state_bytes_written = 0
        self._check_version()

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            self._db.execute(_UPSERT_META, ("schema_version", encode(SCHEMA_VERSION)))
            return
        found = decode(row[0])
        if not isinstance(found, int) or found > SCHEMA_VERSION:
            self._db.close()
            self._conn = None
            raise RuntimeError(
                f"{self.db_path} has schema version {found!r}, newer than this tunefleet "
                f"understands ({SCHEMA_VERSION}); upgrade tunefleet to write to it"
            )

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"the experiment store at {self.path} is closed")
        return self._conn

    # -- buffered writes ------------------------------------------------------------------
    def write_meta(self, meta: dict[str, Any]) -> None:
        """Set (insert or replace) each key of `meta`; other keys are kept."""
        for key, value in meta.items():
            self._meta[str(key)] = encode(value)

    def add_trial(self, trial: Trial) -> None:
        """Record a new trial (its row and an ``added`` event)."""
        self._dirty[trial.trial_id] = trial
        data = {"index": trial.index, "name": trial.name, "config": trial.config}
        self._events.append((time.time(), trial.trial_id, "added", encode(data)))

    def update_trial(self, trial: Trial) -> None:
        """Remember `trial`; its state at the next `flush()` is what gets written."""
        self._dirty[trial.trial_id] = trial

    def add_event(
        self, trial_id: str | None, kind: str, data: dict[str, Any] | None = None
    ) -> None:
        """Append an event (``started``, ``failed``, ``paused``...) to the log."""
        text = None if data is None else encode(data)
        self._events.append((time.time(), trial_id, kind, text))

    def add_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Append one reported result (encoded now, so later changes to it do not leak in)."""
        self._results.append(
            (trial_id, _iteration(result.get("training_iteration")), time.time(), encode(result))
        )

    def add_checkpoint(
        self, trial_id: str, iteration: int, path: str, metrics: dict[str, Any]
    ) -> None:
        """Record a checkpoint persisted at `path` with the metrics it was saved with."""
        row = (trial_id, int(iteration), path, encode(metrics), time.time())
        self._checkpoint_ops.append(("add", row))

    def mark_checkpoint_deleted(self, path: str) -> None:
        """Record that the checkpoint at `path` was removed from disk (retention)."""
        self._checkpoint_ops.append(("delete", (path,)))

    def save_state(self, key: str, state: dict[str, Any]) -> None:
        """Keep the JSON-able state of a searcher, scheduler or stopper under `key`.

        Saved before each commit; a state equal to what is already on disk costs no write, and
        a `StateLog` in it costs only the items it gained (`tunefleet._state_log`).
        """
        head, logs = split(state)
        encoded = encode(head, state=True)  # read back exactly: see redact_state
        if self._written_state.get(key) != encoded:
            self._state[key] = (encoded, time.time())
        for path, log in logs.items():
            self._logs.save(key, path, log)

    def rewind_results(self, trial_id: str, after_iteration: int) -> int:
        """Forget the trial's results after `after_iteration`; return how many remain.

        A retried or resumed trial repeats the iterations after its checkpoint; their
        first recording is removed, so each iteration is recorded once. Flushes first,
        then deletes in its own transaction (relaunches are rare). The caller records
        an event saying so.
        """
        self.flush()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "DELETE FROM results WHERE trial_id = ? AND iteration > ?",
                (trial_id, after_iteration),
            )
            row = db.execute(
                "SELECT COUNT(*) FROM results WHERE trial_id = ?", (trial_id,)
            ).fetchone()
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return int(row[0])

    # -- the transaction --------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything buffered since the last flush in one transaction.

        If the write fails (disk full, database locked by another process), the
        transaction is rolled back and the buffer kept for the next flush.
        """
        if not (
            self._meta
            or self._state
            or self._logs.pending
            or self._dirty
            or self._events
            or self._results
            or self._checkpoint_ops
        ):
            return
        db = self._db
        now = time.time()
        trials = [  # safety: a name from trial_name_creator may hold a secret (_redact.py)
            (t.trial_id, t.index, redact_text(t.name), t.status.value, encode(t.to_json()), now)
            for t in self._dirty.values()
        ]
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(_UPSERT_META, self._meta.items())
            db.executemany(_UPSERT_TRIAL, trials)
            db.executemany(
                "INSERT INTO events (time, trial_id, kind, data) VALUES (?, ?, ?, ?)", self._events
            )
            db.executemany(
                "INSERT INTO results (trial_id, iteration, time, data) VALUES (?, ?, ?, ?)",
                self._results,
            )
            for op, row in self._checkpoint_ops:
                # A checkpoint written at a path replaces the path's earlier record (its
                # directory was written again), so a trial never lists one folder twice.
                db.execute(_DELETE_CHECKPOINT, (row[2],) if op == "add" else row)
                if op == "add":
                    db.execute(_INSERT_CHECKPOINT, row)
            db.executemany(_UPSERT_STATE, ((k, v, t) for k, (v, t) in self._state.items()))
            self._logs.write()
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise StoreWriteError(
                    self.db_path, exc, len(self._results), len(self._events)
                ) from exc
            raise
        self._written_state.update((k, v) for k, (v, _) in self._state.items())
        self.state_bytes_written += sum(len(v) for v, _ in self._state.values())
        self.state_bytes_written += self._logs.written()
        self._meta.clear()
        self._state.clear()
        self._dirty.clear()
        self._events.clear()
        self._results.clear()
        self._checkpoint_ops.clear()

    def close(self) -> None:
        """Flush and close; closing twice is harmless."""
        if self._conn is None:
            return
        try:
            self.flush()
        finally:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ExperimentStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads for resume -----------------------------------------------------------------
    def load_trials(self) -> list[Trial]:
        """Every trial recorded so far, by index (what the controller resumes from)."""
        self.flush()
        rows = self._db.execute("SELECT trial_id, data FROM trials ORDER BY idx, rowid")
        trials: list[Trial] = []
        while chunk := rows.fetchmany(TRIAL_ROWS_AT_ONCE):
            trials.extend(trials_from_rows(self.db_path, chunk))
        return trials

    def load_meta(self) -> dict[str, Any]:
        """All meta keys with their values."""
        self.flush()
        return {k: decode(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    def load_state(self, key: str) -> dict[str, Any] | None:
        """What `save_state(key, ...)` last saved, or None."""
        self.flush()
        row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return _as_dict(join(decode(row[0]), lambda path: self._logs.read(key, path)))

    def checkpoints_of(self, trial_id: str) -> list[tuple[str, int, dict[str, Any]]]:
        """The trial's kept checkpoints, newest first: (path, iteration, result)."""
        self.flush()
        rows = self._db.execute(
            "SELECT path, iteration, metrics FROM checkpoints "
            "WHERE trial_id = ? AND deleted = 0 ORDER BY iteration DESC, rowid DESC",
            (trial_id,),
        )
        return [(path, int(it or 0), _as_dict(decode(m)) or {}) for path, it, m in rows]

    @_collector.paused()  # every kept checkpoint's metrics (a resume)
    def kept_checkpoints(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every kept checkpoint, oldest first: (trial_id, path, result) (resume)."""
        self.flush()
        rows = self._db.execute(
            "SELECT trial_id, path, metrics FROM checkpoints WHERE deleted = 0 "
            "ORDER BY trial_id, iteration, rowid"
        ).fetchall()
        metrics = decode_each([m for _, _, m in rows])
        return [
            (tid, path, _as_dict(m) or {}) for (tid, path, _), m in zip(rows, metrics, strict=True)
        ]

    def __repr__(self) -> str:
        return f"ExperimentStore({str(self.path)!r})"


TRIAL_ROWS_AT_ONCE = 512  # trial rows parsed together (`trials_from_rows`)


def trial_from_row(db: Path, trial_id: str, data: str) -> Trial:
    """A `Trial` from its stored JSON, with a clear error when it cannot be read."""
    try:
        record = decode(data)
    except ValueError as exc:
        raise _unreadable(db, trial_id, exc) from exc
    return trial_from_record(db, trial_id, record, intern_keys=True)


def trials_from_rows(db: Path, rows: list[tuple[str, str]]) -> list[Trial]:
    """`trial_from_row` of each ``(trial_id, data)``, their JSON parsed at once
    (`decode_many`), which also makes each key one string for all of them."""
    records = decode_many([data for _, data in rows])
    if records is None:  # one of them is not JSON: its own error
        return [trial_from_row(db, trial_id, data) for trial_id, data in rows]
    return [
        trial_from_record(db, tid, rec, intern_keys=False)
        for (tid, _), rec in zip(rows, records, strict=True)
    ]


def trial_from_record(db: Path, trial_id: str, record: Any, *, intern_keys: bool) -> Trial:
    """A `Trial` from its decoded record, with a clear error when it is not one.

    `intern_keys`: intern the keys of its config, resources and last result (a record
    decoded alone): every trial repeats the same metric names, and decoding makes a new
    string for each (about 60 bytes apiece, most of a finished trial's memory at
    100,000 trials). Records decoded together (`decode_many`) share them already.
    """
    try:
        if isinstance(record, dict):
            if intern_keys:
                for key in ("config", "resources", "last_result"):
                    record[key] = shared_keys(record.get(key))
            last = record.get("last_result")
            if isinstance(last, dict) and last.get("trial_id") == record.get("trial_id"):
                last["trial_id"] = record["trial_id"]  # one string, not two equal ones
            name = record.get("trainable_name")
            if isinstance(name, str):
                record["trainable_name"] = sys.intern(name)
        return Trial.from_json(record)
    except (TypeError, ValueError, KeyError) as exc:
        raise _unreadable(db, trial_id, exc) from exc


def _unreadable(db: Path, trial_id: str, exc: Exception) -> ValueError:
    return ValueError(f"trial {trial_id!r} in {db}: its stored record is unreadable: {exc}")


def shared_keys(value: Any, depth: int = 0) -> Any:
    """`value` with the string keys of its dicts (nested ones too) interned."""
    if not isinstance(value, dict) or depth > 16:
        return value
    return {
        sys.intern(k) if type(k) is str else k: shared_keys(v, depth + 1) for k, v in value.items()
    }


def _as_dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _iteration(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None
