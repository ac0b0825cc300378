"""Reading and writing small kernel files (/proc, /sys/fs/cgroup), for the driver's
memory limits and the trial's own peaks alike."""

from __future__ import annotations


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def write_text(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)
