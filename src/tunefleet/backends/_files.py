"""Reading and writing small kernel files (/proc, /sys/fs/cgroup), for the driver's
memory limits and the trial's own peaks alike."""

from __future__ import annotations

import os
import threading


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def write_text(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


_FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR}


class HeldFile:
    """A kernel file read or written at every trial, through one descriptor kept open:
    one system call each time instead of an open, a read or write and a close (30-40 us
    a file on a cgroup v1 hierarchy, 1-2 us held). Opened at first use; `read` gives None
    and `write` raises OSError as `read_text` and `write_text` do."""

    def __init__(self, path: str, mode: str = "r") -> None:
        self.path = path
        self._flags = _FLAGS[mode] | os.O_CLOEXEC
        self._fd: int | None = None
        self._pid = 0  # the process that opened it: a forked child opens its own
        self._lock = threading.Lock()

    def _open(self) -> int:
        fd = self._fd
        if fd is not None and self._pid == os.getpid():
            return fd
        with self._lock:  # a report and the usage thread may both come first
            if self._fd is None or self._pid != os.getpid():
                self._fd = os.open(self.path, self._flags)  # a child's copy of the parent's
                self._pid = os.getpid()  # descriptor is left as it is: /proc/self was theirs
            return self._fd

    def read(self) -> str | None:
        try:
            return os.pread(self._open(), 65536, 0).decode()
        except OSError:
            return None

    def write(self, value: str) -> None:
        os.write(self._open(), value.encode())

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None
