"""Read-only access to an experiment database, while it runs or after.

The database is opened with ``mode=ro``: a reader never writes, never holds a
transaction between calls, and so never blocks the writer (SQLite's WAL mode
lets readers see the last committed state while a write is in progress). A
database that is empty, not SQLite, truncated or without tunefleet's tables is
a `CorruptStoreError` when the reader opens it (checked without writing, see
`_integrity`); a write-ahead log that is not valid is a `StoreWarning`.

If an experiment directory was moved or copied, the absolute paths recorded in
it (trial directories, checkpoints) are mapped into its new location.
"""

from __future__ import annotations

import difflib
import itertools
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from tunefleet import _collector
from tunefleet._metrics import lookup
from tunefleet._state_log import join
from tunefleet.store._integrity import (
    CorruptStoreError,
    check_files,
    check_tables,
    corrupt,
    has_log,
    open_immutable,
)
from tunefleet.store._json_sql import as_sql, extract_sql, from_json_text, number_sql
from tunefleet.store._log_rows import read_log
from tunefleet.store._schema import TRIALS_DIRNAME, db_path, decode, decode_each
from tunefleet.store._writer import TRIAL_ROWS_AT_ONCE, trial_from_row, trials_from_rows
from tunefleet.trial import Trial

_TRIALS_SEGMENT = os.sep + TRIALS_DIRNAME + os.sep
_ARROW = sqlite3.sqlite_version_info >= (3, 38, 0)  # JSON's "->" operator
_CHUNK = 500  # ids in one "IN (...)": far below SQLite's limit on parameters


class StoreReader:
    """Reads one experiment's database; safe to use while the experiment runs.

    Args:
        experiment_path: the experiment directory, or its ``experiment.db``.

    Raises:
        FileNotFoundError: there is no experiment database there.
        CorruptStoreError: the database is damaged (empty, not SQLite, truncated, no
            tunefleet tables); a query that finds a damaged page raises it too.

    Example:
        >>> with StoreReader(path) as reader:  # doctest: +SKIP
        ...     for trial in reader.trials():
        ...         print(trial.trial_id, trial.status.value, len(reader.results(trial.trial_id)))
    """

    def __init__(self, experiment_path: str | os.PathLike[str]) -> None:
        self.db_path = db_path(experiment_path).resolve()
        self.path = self.db_path.parent
        if not self.db_path.is_file():
            raise FileNotFoundError(f"No experiment database at {self.db_path}")
        self._conn: sqlite3.Connection | None = _open_checked(self.db_path)
        self._root = str(self.path)

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"the reader of {self.db_path} is closed")
        return self._conn

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        return list(self._each_row(sql, params, chunk=0))

    def _each_row(self, sql: str, params: Iterable[Any] = (), chunk: int = 512) -> Iterator[Any]:
        """The rows of `sql`, `chunk` at a time (0: all at once), so that a big table's
        text (every trial's JSON at 100,000 trials) is never in memory all at once."""
        try:
            cursor = self._db.execute(sql, tuple(params))
            if not chunk:
                yield from cursor.fetchall()
                return
            while rows := cursor.fetchmany(chunk):
                yield from rows
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # the writer is still creating the schema
                return
            if "malformed" not in str(exc) and "not a database" not in str(exc):
                raise  # locked, busy, I/O: not a damaged database
            raise corrupt(self._db, self.db_path, exc) from exc
        except sqlite3.DatabaseError as exc:  # "database disk image is malformed"
            raise corrupt(self._db, self.db_path, exc) from exc

    # -- experiment-level ---------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        """All meta keys (name, metric, mode, status, ...) with their values."""
        return {key: decode(value) for key, value in self._rows("SELECT key, value FROM meta")}

    @_collector.paused()
    def state(self, key: str) -> dict[str, Any] | None:
        """The saved state under `key` (``searcher``, ``scheduler``...), or None."""
        rows = self._rows("SELECT value FROM state WHERE key = ?", (key,))
        value = decode(rows[0][0]) if rows else None
        if not isinstance(value, dict):
            return None
        joined: dict[str, Any] = join(value, lambda path: read_log(self._rows, key, path))
        return joined

    def last_update(self) -> float | None:
        """Time of the latest recorded write (trial update, event or result), or None."""
        rows = self._rows(
            "SELECT MAX(t) FROM (SELECT MAX(updated) AS t FROM trials "
            "UNION ALL SELECT MAX(time) FROM events UNION ALL SELECT MAX(time) FROM results)"
        )
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    def last_write(self) -> float | None:
        """`last_update` without reading every result: the newest result and event rows
        (rows are appended in time order), so a big experiment answers at once."""
        rows = self._rows(
            "SELECT MAX(t) FROM (SELECT MAX(updated) AS t FROM trials "
            "UNION ALL SELECT * FROM (SELECT time FROM events ORDER BY seq DESC LIMIT 1) "
            "UNION ALL SELECT * FROM (SELECT time FROM results ORDER BY rowid DESC LIMIT 1))"
        )
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    # -- trials ---------------------------------------------------------------------------
    @_collector.paused()
    def trials(
        self,
        each: Callable[[Trial], Trial] | None = None,
        instead: Callable[[str], Trial | None] | None = None,
    ) -> list[Trial]:
        """Every trial, in index order, in its latest flushed state (`each`: applied to
        each trial as it is read, before the next chunk of rows is). `instead`: a trial id -> a
        record to take as it is, undecoded (the run's own, `ExperimentAnalysis._of_run`),
        or None to read the stored one."""
        if instead is None:
            rows = self._each_row("SELECT trial_id, data FROM trials ORDER BY idx, rowid")
            return self._read_trials(rows, each)
        # the ids first: the rows of the trials taken instead are not even read
        order = self.trial_ids()
        found: dict[str, Trial] = {}
        missing = []
        for tid in order:
            taken = instead(tid)
            if taken is None:
                missing.append(tid)
            else:
                found[tid] = taken
        found.update((t.trial_id, t) for t in self._read_trials(self._rows_of(missing), each))
        return [found[tid] for tid in order if tid in found]

    def _rows_of(self, trial_ids: list[str]) -> Iterator[tuple[str, str]]:
        """``(trial id, data)`` of these trials, a chunk of ids per query."""
        for at in range(0, len(trial_ids), _CHUNK):
            chunk = trial_ids[at : at + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            yield from self._rows(
                f"SELECT trial_id, data FROM trials WHERE trial_id IN ({marks})", chunk
            )

    def _read_trials(
        self, rows: Iterator[tuple[str, str]], each: Callable[[Trial], Trial] | None
    ) -> list[Trial]:
        """The trials of ``(trial_id, data)`` rows, a chunk parsed at once, `each` applied
        to each before the next chunk is read."""
        trials: list[Trial] = []
        while chunk := list(itertools.islice(rows, TRIAL_ROWS_AT_ONCE)):
            for trial in trials_from_rows(self.db_path, chunk):
                trial = self._relocate(trial)
                trials.append(each(trial) if each is not None else trial)
        return trials

    @_collector.paused()
    def trials_reusing(self, known: dict[str, tuple[Any, Trial]]) -> list[Trial]:
        """`trials`, decoding only the trials whose row changed since `known` was filled.

        Args:
            known: trial id -> (row stamp, trial), from an earlier call on the same
                experiment (start with ``{}``); updated in place.
        """
        stamps = self._rows(
            "SELECT trial_id, updated, length(data) FROM trials ORDER BY idx, rowid"
        )
        order = [tid for tid, *_ in stamps]
        changed = [
            (tid, (t, n)) for tid, t, n in stamps if tid not in known or known[tid][0] != (t, n)
        ]
        now = dict(changed)
        for tid, data in self._rows_of([tid for tid, _ in changed]):
            known[tid] = (now[tid], self._relocate(trial_from_row(self.db_path, tid, data)))
        for gone in set(known) - set(order):
            del known[gone]
        return [known[tid][1] for tid in order if tid in known]

    def trial(self, trial_id: str) -> Trial:
        """One trial by id.

        Raises:
            KeyError: no such trial (the message lists a few that exist).
        """
        rows = self._rows("SELECT data FROM trials WHERE trial_id = ?", (trial_id,))
        if not rows:
            raise KeyError(self._unknown(trial_id))
        return self._relocate(trial_from_row(self.db_path, trial_id, rows[0][0]))

    def trial_ids(self) -> list[str]:
        """The ids of all trials, in index order."""
        return [r[0] for r in self._rows("SELECT trial_id FROM trials ORDER BY idx, rowid")]

    def _unknown(self, trial_id: str) -> str:
        ids = self.trial_ids()
        if not ids:
            return f"No trial {trial_id!r} in {self.path}: the experiment has no trials yet"
        close = difflib.get_close_matches(trial_id, ids, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = ", ".join(ids[:5]) + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")
        return f"No trial {trial_id!r} in {self.path}{hint} (trials: {shown})"

    def _require(self, trial_id: str) -> None:
        if not self._rows("SELECT 1 FROM trials WHERE trial_id = ?", (trial_id,)):
            raise KeyError(self._unknown(trial_id))

    # -- results and checkpoints --------------------------------------------------------
    def results(self, trial_id: str) -> list[dict[str, Any]]:
        """Every result the trial reported, in the order reported.

        Iterations repeat only after a PBT exploit (the trial continues from the
        source's checkpoint); a retried or resumed trial's repeated iterations are
        rewound, so they appear once.

        Raises:
            KeyError: no such trial.
        """
        rows = self._rows("SELECT data FROM results WHERE trial_id = ? ORDER BY rowid", (trial_id,))
        if not rows:
            self._require(trial_id)
        return decode_each([r[0] for r in rows])

    def all_results(self) -> dict[str, list[dict[str, Any]]]:
        """Results of every trial (trial id -> results in the order reported), in trial order."""
        out: dict[str, list[dict[str, Any]]] = {tid: [] for tid in self.trial_ids()}
        rows = self._rows("SELECT trial_id, data FROM results ORDER BY trial_id, rowid")
        results = decode_each([data for _, data in rows])
        for (trial_id, _), result in zip(rows, results, strict=True):
            out.setdefault(trial_id, []).append(result)
        return out

    def result_ranges(
        self, keys: list[str]
    ) -> dict[str, tuple[int, list[tuple[float | None, float | None]]]] | None:
        """Per trial, in one aggregate query: how many of its results SQLite cannot parse
        (holding ``NaN`` or ``Infinity``: read those with `result_values`) and, over the
        others, the lowest and highest number under each of `keys` (None: no number).

        Returns None when SQLite is older than 3.38 or a key has a double quote or a
        backslash: then use `result_values`.
        """
        if not _ARROW or any('"' in key or "\\" in key for key in keys):
            return None
        reads = [number_sql(key) for key in keys]
        inner = ", ".join(f"{r} AS v{i}" for i, r in enumerate(reads))
        outer = ", ".join(f"MIN(v{i}), MAX(v{i})" for i in range(len(keys)))
        sql = (
            f"SELECT trial_id, SUM(bad){', ' + outer if keys else ''} FROM "
            f"(SELECT trial_id, NOT json_valid(data) AS bad{', ' + inner if keys else ''} "
            "FROM results) GROUP BY trial_id"
        )
        out: dict[str, tuple[int, list[tuple[float | None, float | None]]]] = {}
        for row in self._rows(sql):
            pairs = [(row[2 + 2 * i], row[3 + 2 * i]) for i in range(len(keys))]
            out[row[0]] = (int(row[1] or 0), pairs)
        return out

    def result_values(
        self, keys: list[str], trial_ids: list[str] | None = None
    ) -> Iterator[tuple[str, list[Any]]]:
        """Stream ``(trial_id, [value of each key])`` per result, by trial then as reported.

        Only the `keys` are read out of each result (in SQL, with ``json_extract``), one
        row at a time, so a million results cost no memory. A key is a result key or a
        "/"-joined path into nested dicts, read as `tunefleet._metrics.lookup` does. A
        number is an int or a float; a missing key or a null is None; anything else (a
        boolean, a string, an object, a list) is its JSON text, e.g. ``"true"``. A result
        SQLite cannot parse (one holding ``NaN`` or ``Infinity``) is decoded in Python,
        with the same answers; so is every result when SQLite is older than 3.38.

        Args:
            keys: the keys to read.
            trial_ids: only these trials (None: every trial).
        """
        # a key SQLite's JSON paths cannot spell is read in Python, from every result
        in_sql = _ARROW and bool(keys) and not any('"' in key or "\\" in key for key in keys)
        columns = ", ".join(extract_sql(key) for key in keys) if in_sql else ""
        raw = "CASE WHEN json_valid(data) THEN NULL ELSE data END, " + columns
        select = "SELECT trial_id, " + (raw if in_sql else "data") + " FROM results"
        if trial_ids is None:
            yield from self._values(select + " ORDER BY trial_id, rowid", [], keys, in_sql)
            return
        wanted = sorted(set(trial_ids))
        for at in range(0, len(wanted), _CHUNK):  # in id order, a bounded IN (...) each
            chunk = wanted[at : at + _CHUNK]
            sql = f"{select} WHERE trial_id IN ({', '.join('?' * len(chunk))})"
            yield from self._values(sql + " ORDER BY trial_id, rowid", chunk, keys, in_sql)

    def _values(
        self, sql: str, params: list[Any], keys: list[str], in_sql: bool
    ) -> Iterator[tuple[str, list[Any]]]:
        try:
            for row in self._db.execute(sql, params):
                if in_sql and row[1] is None:
                    yield row[0], [from_json_text(v) for v in row[2:]]
                else:
                    result = decode(row[1])
                    yield row[0], [as_sql(lookup(result, key)) for key in keys]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return
            if "malformed" not in str(exc) and "not a database" not in str(exc):
                raise
            raise corrupt(self._db, self.db_path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise corrupt(self._db, self.db_path, exc) from exc

    def checkpoints(
        self, trial_id: str, include_deleted: bool = False
    ) -> list[tuple[int, str, dict[str, Any]]]:
        """The trial's checkpoints as ``(iteration, path, metrics)``, oldest first.

        Args:
            trial_id: the trial.
            include_deleted: also list checkpoints removed by retention.

        Raises:
            KeyError: no such trial.
        """
        where = "" if include_deleted else " AND deleted = 0"
        rows = self._rows(
            "SELECT iteration, path, metrics FROM checkpoints WHERE trial_id = ?"
            + where
            + " ORDER BY iteration, rowid",
            (trial_id,),
        )
        if not rows:
            self._require(trial_id)
        return [(int(it), self._move(path), decode(metrics)) for it, path, metrics in rows]

    def all_checkpoints(
        self, include_deleted: bool = False, *, every_trial: bool = True
    ) -> dict[str, list[tuple[int, str, dict[str, Any]]]]:
        """`checkpoints` of every trial at once (trial id -> list), in trial order;
        `every_trial=False` leaves out the trials without one (no empty list per trial)."""
        out: dict[str, list[tuple[int, str, dict[str, Any]]]] = (
            {t: [] for t in self.trial_ids()} if every_trial else {}
        )
        for trial_id, rows in self.all_checkpoint_rows(include_deleted).items():
            out[trial_id] = [(it, path, decode(metrics)) for it, path, metrics in rows]
        return out

    def all_checkpoint_rows(
        self, include_deleted: bool = False
    ) -> dict[str, list[tuple[int, str, str]]]:
        """`all_checkpoints` of the trials that have one, their metrics left as the stored
        JSON text (`decode` reads it), so that holding every trial's costs a string each."""
        out: dict[str, list[tuple[int, str, str]]] = {}
        where = "" if include_deleted else " WHERE deleted = 0"
        rows = self._each_row(
            "SELECT trial_id, iteration, path, metrics FROM checkpoints"
            + where
            + " ORDER BY trial_id, iteration, rowid"
        )
        for trial_id, it, path, metrics in rows:
            out.setdefault(trial_id, []).append((int(it), self._move(path), metrics))
        return out

    # -- events -------------------------------------------------------------------------------
    def events(
        self, trial_id: str | None = None, kinds: str | Iterable[str] | None = None
    ) -> list[dict[str, Any]]:
        """The event log in order, as dicts ``{seq, time, trial_id, kind, data}``.

        Args:
            trial_id: only this trial's events (None: all, including experiment events).
            kinds: only events of this kind or these kinds (``"failed"``, ``"started"``...).
        """
        clauses: list[str] = []
        params: list[Any] = []
        if trial_id is not None:
            clauses.append("trial_id = ?")
            params.append(trial_id)
        if kinds is not None:
            wanted = [kinds] if isinstance(kinds, str) else list(kinds)
            clauses.append(f"kind IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._rows(
            f"SELECT seq, time, trial_id, kind, data FROM events{where} ORDER BY seq", params
        )
        return [
            {"seq": seq, "time": t, "trial_id": tid, "kind": kind, "data": decode(data)}
            for seq, t, tid, kind, data in rows
        ]

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection; closing twice is harmless."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StoreReader({str(self.path)!r})"

    # -- moved experiments ------------------------------------------------------------------
    def _move(self, path: str) -> str:
        """`path` as recorded, or inside this directory if the experiment was moved."""
        if not path or path.startswith(self._root + os.sep) or "://" in path:
            return path  # here, or in remote storage (a URL)
        cut = path.rfind(_TRIALS_SEGMENT)
        if cut < 0:
            return path
        moved = self._root + path[cut:]
        return moved if os.path.exists(moved) else path

    def _relocate(self, trial: Trial) -> Trial:
        trial.path = self._move(trial.path)
        if trial.latest_checkpoint:
            trial.latest_checkpoint = self._move(trial.latest_checkpoint)
        if trial.error is not None and trial.error.checkpoint:
            trial.error.checkpoint = self._move(trial.error.checkpoint)
        return trial


def _open_checked(path: Path) -> sqlite3.Connection:
    """`path` opened read-only after `check_files` and `check_tables` found it whole."""
    ignore_log = check_files(path)
    if ignore_log or not has_log(path):  # the file alone is the database: read it as is
        conn = open_immutable(path)
        try:
            check_tables(conn, path)
        except CorruptStoreError:
            conn.close()
            raise
        if ignore_log:
            return conn  # mode=ro would make SQLite reset the log it cannot read
        conn.close()
    conn = _connect_read_only(path)
    try:
        check_tables(conn, path)
    except CorruptStoreError:
        conn.close()
        raise
    return conn


def _connect_read_only(path: Path) -> sqlite3.Connection:
    uri = path.as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10.0)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        conn.close()
        if Path(str(path) + "-wal").exists():
            raise
        # A finished experiment in a directory we cannot write to (no -shm can be made):
        # with no write-ahead log left, the file alone is the whole database.
        conn = sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None)
    return conn
