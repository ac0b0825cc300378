"""Before an experiment is resumed: is its database whole, and is no one else running it?

`check_database` refuses a database SQLite cannot read or that fails
``PRAGMA quick_check``, naming the file and, where SQLite names a page, the byte
offset of that page. `DriverLock` is an exclusive ``flock`` on
``<exp>/.tunefleet/driver.lock`` held while a driver runs the experiment; the
kernel releases it when the process dies, even by SIGKILL, so a crash never
leaves a stale lock. The lock file names the driver (host, pid, process start
time), so `driver_alive` can tell, without writing anything, whether an experiment
recorded "running" still has a driver or was interrupted (`shown_status`).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import socket
import sqlite3
import time
from pathlib import Path
from types import TracebackType

from tunefleet.store._integrity import CorruptStoreError as CorruptStoreError  # re-exported
from tunefleet.store._integrity import (
    check_files,
    check_tables,
    has_log,
    open_immutable,
    page_offset,
)


def check_database(path: Path) -> None:
    """Raise `CorruptStoreError` unless `path` is a readable, consistent SQLite database.

    It reads and never writes: with no write-ahead log beside it the file is opened
    ``immutable`` (SQLite creates no ``-wal``/``-shm``), and a log that is not valid
    is refused rather than let the writer overwrite it.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no experiment database at {path}")
    check_files(path, resuming=True)
    try:
        if has_log(path):
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        else:
            conn = open_immutable(path)
    except sqlite3.Error as exc:
        raise CorruptStoreError(path, str(exc), 0) from exc
    try:
        check_tables(conn, path)
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(20)")]
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed"
        raise CorruptStoreError(path, str(exc), 0) from exc
    finally:
        conn.close()
    if problems == ["ok"]:
        return
    detail = "; ".join(problems[:5])
    raise CorruptStoreError(path, detail, page_offset(detail, page_size))


class DriverLock:
    """An exclusive lock on the experiment for the life of one driver process."""

    def __init__(self, experiment_path: str | os.PathLike[str]) -> None:
        self.path = Path(experiment_path, ".tunefleet", "driver.lock")
        self._fd: int | None = None

    def __enter__(self) -> DriverLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _lock_exclusive(fd):
            holder = os.pread(fd, 256, 0).decode(errors="replace").split()
            os.close(fd)
            raise RuntimeError(
                f"The experiment at {self.path.parent.parent} is being run by process "
                f"{holder[0] if holder else 'another process'}; wait for it to end (or stop "
                "it) before resuming"
            ) from None
        pid = os.getpid()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{pid} {_start_time(pid)!r} {socket.gethostname()}\n".encode(), 0)
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


#: what `shown_status` calls an experiment recorded "running" whose driver is gone
INTERRUPTED = "interrupted"
_LOCK_RETRY_S = 1.0  # `driver_alive` holds a shared lock for microseconds at a time


def _lock_exclusive(fd: int) -> bool:
    """Take the driver's lock; a reader's brief shared lock (`driver_alive`) only delays it."""
    deadline = time.monotonic() + _LOCK_RETRY_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None if it is not running
    (no such process, or a zombie: dead, not yet waited for)."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except (psutil.Error, OSError):
        return None


def driver_alive(experiment_path: str | os.PathLike[str]) -> bool | None:
    """Whether a live driver runs the experiment: True, False, or None if it cannot tell.

    The driver's flock answers where flock means something: held, a driver runs. Where
    it was not held, the process the lock file names still counts as the driver if it
    runs on this host with the start time recorded (flock is not kept on some remote
    file systems); a reused pid has another start time. Nothing is written: the lock
    file is opened read-only and a shared lock taken on it is released at once. None:
    no lock file (no driver ever ran here), or it cannot be opened.
    """
    path = Path(experiment_path, ".tunefleet", "driver.lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:  # flock not supported here: the pid alone must tell
            pass
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
        fields = os.pread(fd, 256, 0).decode(errors="replace").split()
    finally:
        os.close(fd)
    return _named_driver_runs(fields)


def _named_driver_runs(fields: list[str]) -> bool:
    """Whether the lock file's ``pid start_time host`` names a process running now."""
    if len(fields) < 3 or fields[2] != socket.gethostname():
        return False  # an old lock file (pid only), or another host's: its flock answered
    try:
        pid, started = int(fields[0]), float(fields[1])
    except ValueError:
        return False
    now = _start_time(pid) if pid > 0 else None
    return now is not None and abs(now - started) < 0.01


def shown_status(experiment_path: str | os.PathLike[str], recorded: object) -> str | None:
    """The status to show for an experiment whose meta records `recorded` (None: none):
    "running" becomes `INTERRUPTED` when no live driver runs it (killed, machine lost)."""
    if recorded is None:
        return None
    if recorded == "running" and driver_alive(experiment_path) is False:
        return INTERRUPTED
    return str(recorded)


def resume_hint(name: str, storage: str | None = None) -> str:
    """The command that continues an interrupted experiment, quoted to paste into a
    shell (SCRIPT.py stands for the file that defines the trainable)."""
    words = ["tunefleet", "resume", name, "--script", "SCRIPT.py"]
    words += ["--storage", storage] if storage else []
    line = " ".join(shlex.quote(w) for w in words)
    return f"{line}  # SCRIPT.py: the file that defines the trainable"
