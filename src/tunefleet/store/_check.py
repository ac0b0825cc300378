"""Before an experiment is resumed: is its database whole, and is no one else running it?

`check_database` refuses a database SQLite cannot read or that fails
``PRAGMA quick_check``, naming the file and, where SQLite names a page, the byte
offset of that page. `DriverLock` is an exclusive ``flock`` on
``<exp>/.tunefleet/driver.lock`` held while a driver runs the experiment; the
kernel releases it when the process dies, even by SIGKILL, so a crash never
leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import os
import re
import sqlite3
from pathlib import Path
from types import TracebackType

_PAGE = re.compile(r"[Pp]age (\d+)")


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


def check_database(path: Path) -> None:
    """Raise `CorruptStoreError` unless `path` is a readable, consistent SQLite database."""
    if not path.is_file():
        raise FileNotFoundError(f"no experiment database at {path}")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise CorruptStoreError(path, str(exc), 0) from exc
    try:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(20)")]
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed"
        raise CorruptStoreError(path, str(exc), 0) from exc
    finally:
        conn.close()
    if problems == ["ok"]:
        return
    detail = "; ".join(problems[:5])
    page = _PAGE.search(detail)
    offset = (int(page.group(1)) - 1) * page_size if page else None
    raise CorruptStoreError(path, detail, offset)


class DriverLock:
    """An exclusive lock on the experiment for the life of one driver process."""

    def __init__(self, experiment_path: str | os.PathLike[str]) -> None:
        self.path = Path(experiment_path, ".tunefleet", "driver.lock")
        self._fd: int | None = None

    def __enter__(self) -> DriverLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RuntimeError(
                f"The experiment at {self.path.parent.parent} is being run by process "
                f"{holder}; wait for it to end (or stop it) before resuming"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None
