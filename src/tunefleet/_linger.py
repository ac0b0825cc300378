"""The process's one thread that sends trial sessions' batched results late.

A session batches reports that come faster than every 2 ms and sends the tail of a
batch at most `LINGER_S` after it, from this thread. One thread serves every session
of the process, started at its first use, instead of one per trial attempt: a worker
runs thousands of short trials, and a thread's start-up was a part of each one's cost.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

LINGER_S = 0.005  # a batched tail is sent at most this late


class Lingerer(Protocol):
    def _linger_flush(self) -> None:
        """Send the batched tail, unless the session was closed since."""


class _Lingering:
    """Sends the tails of the sessions that asked, a linger after their last ask."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._due: dict[int, Lingerer] = {}  # id -> a session with a tail to send
        self._thread: threading.Thread | None = None
        self._pid = 0  # the process the thread runs in: a forked child starts its own

    def ask(self, session: Lingerer) -> None:
        """Send `session`'s tail `LINGER_S` from now (or sooner, with another's)."""
        with self._lock:
            if id(session) in self._due:
                return  # asked already: the thread is up and will send it
            self._due[id(session)] = session
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="tunefleet-linger", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(LINGER_S)
            with self._lock:
                self._wake.clear()
                due, self._due = self._due, {}
            for session in due.values():
                session._linger_flush()


LINGERING = _Lingering()
