"""Waiting for worker processes to exit, woken by the exits themselves.

`subprocess.Popen.wait(timeout)` polls: it sleeps 0.5 ms, then twice as long each
time, up to 50 ms, so a worker that exits 10 ms after being told to is noticed up
to 20 ms late; at the end of every `fit()` that was 30-60 ms of sleeping. A process
file descriptor (``pidfd_open``, Linux 5.3) becomes readable when its process exits,
so one `poll` waits for all of them, for exactly as long as it takes.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Sequence
from typing import Protocol


class Process(Protocol):
    """What is waited on: a `subprocess.Popen`, or a worker forked by the zygote."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def wait_all(procs: Sequence[Process], timeout: float) -> None:
    """Until every process in `procs` has exited (and is reaped) or `timeout` seconds
    have passed."""
    end = time.monotonic() + timeout
    fds: dict[int, Process] = {}
    try:
        for proc in procs:
            if proc.poll() is None:  # not reaped: its pid is still its own
                fds[os.pidfd_open(proc.pid)] = proc
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        while fds and (left := end - time.monotonic()) > 0:
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                poller.unregister(fd)
                os.close(fd)
                fds.pop(fd).poll()  # reaps it
    except (AttributeError, OSError):  # no pidfd here: Popen's own (polling) wait
        _poll_all(procs, end)
    finally:
        for fd in fds:
            os.close(fd)


def _poll_all(procs: Sequence[Process], end: float) -> None:
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
