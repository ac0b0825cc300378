"""The rows of the states' `StateLog`s (`tunefleet._state_log`): each item written once.

`ExperimentStore.save_state` hands each log here; what it gained since the last save is
encoded and buffered, and written in the store's next transaction, with the state's
head. The cost of a save is what changed, however long the log is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from tunefleet.store._schema import decode_each, encode

_INSERT = "INSERT OR REPLACE INTO state_log (key, path, seq, value) VALUES (?, ?, ?, ?)"
_RESET = "DELETE FROM state_log WHERE key = ? AND path = ?"


class LogRows:
    """What each (state key, log path) holds on disk, and the rows not written yet."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._length: dict[tuple[str, str], int] = {}  # items buffered or written, per log
        self._resets: list[tuple[str, str]] = []
        self._rows: list[tuple[str, str, int, str]] = []

    @property
    def pending(self) -> bool:
        return bool(self._rows or self._resets)

    def save(self, key: str, path: str, log: list[Any]) -> None:
        """Buffer the items `log` gained since the last save (all of them if it shrank)."""
        where = (key, path)
        known = self._length.get(where)
        if known is None:  # a store reopened on a resumed experiment: what is on disk
            known = self._on_disk(key, path)
        if len(log) < known:  # rebuilt by its algorithm: written again in full
            self._resets.append(where)
            self._rows = [r for r in self._rows if (r[0], r[1]) != where]
            known = 0
        for seq in range(known, len(log)):
            self._rows.append((key, path, seq, encode(log[seq], state=True)))
        self._length[where] = len(log)

    def write(self) -> None:
        """Inside the store's transaction."""
        self._db.executemany(_RESET, self._resets)
        self._db.executemany(_INSERT, self._rows)

    def written(self) -> int:
        """The transaction committed: the bytes of the rows it wrote."""
        size = sum(len(row[3]) for row in self._rows)
        self._resets.clear()
        self._rows.clear()
        return size

    def read(self, key: str, path: str) -> list[Any]:
        """The log's items as written (after a flush)."""

        def rows(sql: str, params: tuple[Any, ...]) -> list[Any]:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.OperationalError:  # a database from before state logs
                return []

        return read_log(rows, key, path)

    def _on_disk(self, key: str, path: str) -> int:
        try:
            row = self._db.execute(
                "SELECT COUNT(*) FROM state_log WHERE key = ? AND path = ?", (key, path)
            ).fetchone()
        except sqlite3.OperationalError:  # a database from before state logs
            return 0
        return int(row[0])


def read_log(rows: Callable[[str, tuple[Any, ...]], list[Any]], key: str, path: str) -> list[Any]:
    """A log's items, in order, read with `rows(sql, params)`."""
    sql = "SELECT value FROM state_log WHERE key = ? AND path = ? ORDER BY seq"
    return decode_each([value for (value,) in rows(sql, (key, path))])
