"""Is an experiment database whole? Checks that read its files and never write them.

Every reader (`StoreReader`, hence the CLI, `ResultGrid`, the dashboard) and
`check_database` (before a resume) look at the files first: an empty file, one
that is not SQLite, one shorter than its header says, or a database without
tunefleet's tables is a `CorruptStoreError` naming the file and the byte offset.
A write-ahead log (``experiment.db-wal``) whose header is not valid is ignored
by SQLite, which loses what it holds: a reader warns (`StoreWarning`) and reads
the database file alone, opened ``immutable`` so that SQLite neither replays,
resets nor creates any file; a resume refuses it, since the writer would
overwrite it.
"""

from __future__ import annotations

import os
import re
import sqlite3
import warnings
from pathlib import Path
from typing import Literal

_MAGIC = b"SQLite format 3\x00"
_WAL_MAGICS = (0x377F0682, 0x377F0683)
_WAL_VERSION = 3007000
_PAGE = re.compile(r"[Pp]age (\d+)")
TABLES = ("meta", "state", "trials", "events", "results", "checkpoints")


class CorruptStoreError(RuntimeError):
    """The experiment database cannot be trusted; nothing was written to it."""

    def __init__(self, path: Path, detail: str, offset: int | None = None) -> None:
        where = f" at byte offset {offset}" if offset is not None else ""
        super().__init__(
            f"The experiment database {path} is damaged{where}: {detail}. tunefleet will not "
            "resume it or write to it. Keep a copy of the file; its readable part may be "
            "recovered with `sqlite3 experiment.db .recover`."
        )
        self.path = path
        self.offset = offset


class StoreWarning(RuntimeWarning):
    """Part of an experiment database cannot be read; what can be read is shown."""


def check_files(path: Path, *, resuming: bool = False) -> bool:
    """Raise `CorruptStoreError` unless `path` looks like a whole SQLite database.

    Returns True when its write-ahead log is to be left out (its header is not
    valid; a `StoreWarning` says so). With `resuming`, such a log is an error.
    """
    size = path.stat().st_size
    if size == 0 and not resuming and being_created(path):
        return False  # the driver is creating it: no data yet, which the reader shows
    if size == 0:
        raise CorruptStoreError(path, "the file is empty (0 bytes), it holds no database", 0)
    with path.open("rb") as f:
        head = f.read(100)
    if not head.startswith(_MAGIC):
        raise CorruptStoreError(path, f"it is not an SQLite database (it begins {head[:16]!r})", 0)
    if len(head) < 100:
        raise CorruptStoreError(
            path, f"the file is truncated: {size} bytes, less than its 100-byte header", size
        )
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise CorruptStoreError(path, f"its header gives an impossible page size {page_size}", 16)
    pages = int.from_bytes(head[28:32], "big")
    wal = Path(f"{path}-wal")
    problem = wal_problem(wal)
    # A valid log holds pages a checkpoint has not copied (or, on a full disk, could not
    # finish copying) into the file: SQLite reads them from the log, so a short file
    # beside a valid log is not truncated.
    logged = problem is None and wal.is_file() and wal.stat().st_size > 32
    if head[24:28] == head[92:96] and size < pages * page_size and not logged:
        raise CorruptStoreError(
            path,
            f"the file is truncated: it ends at {size} bytes, but its header says it holds "
            f"{pages} pages of {page_size} bytes ({pages * page_size} bytes)",
            size,
        )
    if problem is None:
        return False
    if resuming:
        raise CorruptStoreError(
            wal,
            f"it is not a valid write-ahead log ({problem}); resuming would make SQLite "
            "overwrite it, losing what it holds",
            0,
        )
    warnings.warn(
        StoreWarning(
            f"{wal} is not a valid write-ahead log ({problem}): SQLite ignores it, so any "
            f"results it holds that were not yet copied into {path.name} are lost to this "
            "reading; reading the database file alone (the log is left as it is: keep a copy)"
        ),
        stacklevel=3,
    )
    return True


def wal_problem(wal: Path) -> str | None:
    """What is wrong with the header of write-ahead log `wal` (None: absent, empty or valid)."""
    try:
        with wal.open("rb") as f:
            head = f.read(32)
    except FileNotFoundError:
        return None
    if not head:
        return None
    if len(head) < 32:
        return f"{len(head)} bytes, less than its 32-byte header"
    magic = int.from_bytes(head[:4], "big")
    if magic not in _WAL_MAGICS:
        return f"it begins {head[:4]!r}, not a write-ahead log's magic number"
    if int.from_bytes(head[4:8], "big") != _WAL_VERSION:
        return "its header gives an unknown format version"
    order: Literal["big", "little"] = "big" if magic & 1 else "little"
    s0 = s1 = 0
    for i in range(0, 24, 8):
        s0 = (s0 + int.from_bytes(head[i : i + 4], order) + s1) & 0xFFFFFFFF
        s1 = (s1 + int.from_bytes(head[i + 4 : i + 8], order) + s0) & 0xFFFFFFFF
    if (s0, s1) != (int.from_bytes(head[24:28], "big"), int.from_bytes(head[28:32], "big")):
        return "its header checksum is wrong"
    return None


def being_created(path: Path) -> bool:
    """Whether a live driver holds the experiment's lock (it creates the database in it).

    Read from ``/proc/locks`` (the lock is an ``flock``), so nothing is locked or
    written; where that cannot be read, whether the process the lock file names runs.
    """
    lock = path.parent / ".tunefleet" / "driver.lock"
    try:
        st = lock.stat()
    except OSError:
        return False  # no driver ever ran here
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            held = f.read()
    except OSError:
        try:
            os.kill(int(lock.read_text().split()[0]), 0)
        except (OSError, ValueError, IndexError):
            return False
        return True
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any("FLOCK" in line and key in line.split() for line in held.splitlines())


def has_log(path: Path) -> bool:
    """Whether a non-empty write-ahead log lies next to database `path`."""
    wal = Path(f"{path}-wal")
    return wal.is_file() and wal.stat().st_size > 0


def open_immutable(path: Path) -> sqlite3.Connection:
    """`path` opened so that SQLite reads the file alone and writes or creates nothing."""
    return sqlite3.connect(path.as_uri() + "?mode=ro&immutable=1", uri=True, isolation_level=None)


def check_tables(conn: sqlite3.Connection, path: Path) -> None:
    """Raise `CorruptStoreError` unless the database holds every table tunefleet writes."""
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.DatabaseError as exc:
        raise corrupt(conn, path, exc) from exc
    names = {str(row[0]) for row in rows}
    missing = [name for name in TABLES if name not in names]
    if len(missing) == len(TABLES) and not names and being_created(path):
        return  # the driver is creating the schema (in one transaction): no data yet
    if len(missing) == len(TABLES):
        found = f" (its tables: {', '.join(sorted(names))})" if names else " (it has no tables)"
        raise CorruptStoreError(
            path,
            "it holds none of tunefleet's tables: it was not made by tunefleet, or its "
            f"tables were dropped{found}",
        )
    if missing:
        raise CorruptStoreError(path, f"tunefleet's tables {', '.join(missing)} are missing")


def corrupt(conn: sqlite3.Connection, path: Path, exc: sqlite3.DatabaseError) -> CorruptStoreError:
    """The `CorruptStoreError` for an error SQLite raised reading `path` (offset where known)."""
    try:
        problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    except sqlite3.DatabaseError:  # not even its schema, which begins on page 1, is readable
        return CorruptStoreError(path, f"{exc} (its schema cannot be read)", 0)
    detail = "; ".join([str(exc), *problems[:5]]) if problems != ["ok"] else str(exc)
    return CorruptStoreError(path, detail, page_offset(detail, page_size))


def page_offset(detail: str, page_size: int) -> int | None:
    """The byte offset of the first page SQLite's message names, or None."""
    page = _PAGE.search(detail)
    return (int(page.group(1)) - 1) * page_size if page else None
