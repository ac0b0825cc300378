"""The process's one thread that sends trial sessions' batched results late.

A session batches reports that come faster than every 2 ms and sends the tail of a
batch at most `LINGER_S` after it, from this thread. One thread serves every session
of the process, started at its first use, instead of one per trial attempt: a worker
runs thousands of short trials, and a thread's start-up was a part of each one's cost.

Nearly every short trial asks for a linger (its second report is batched) and then
ends, sending its tail itself, well before the linger is up. So on Linux the thread
sleeps on a kernel timer (`_Timer`, a ``timerfd``) that the trial's own thread arms
when it asks and disarms when it sends the tail first: the linger thread wakes only
when a tail really waits, and a trial that ends first costs two system calls, not a
thread switch and a handover of the GIL. Where there is no ``timerfd``, the thread
is woken at each ask and sleeps `LINGER_S` (`_Timer` is None).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any, Protocol

LINGER_S = 0.005  # a batched tail is sent at most this late


class Lingerer(Protocol):
    def _linger_flush(self) -> None:
        """Send the batched tail, unless the session was closed since."""


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


_CLOCK_MONOTONIC = 1
_TFD_CLOEXEC = 0o2000000


class _Timer:
    """A one-shot kernel timer (Linux ``timerfd``): any thread arms or disarms it with
    one system call, and only a thread reading it wakes, only when it expires."""

    def __init__(self) -> None:
        libc: Any = ctypes.CDLL(None, use_errno=True)
        self._settime = libc.timerfd_settime
        self._gettime = libc.timerfd_gettime
        fd = int(libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_CLOEXEC))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        seconds, fraction = divmod(LINGER_S, 1.0)
        linger = _TimeSpec(int(seconds), int(fraction * 1e9))  # tv_nsec must stay < 1e9
        self._on = ctypes.byref(_ITimerSpec(it_value=linger))
        self._off = ctypes.byref(_ITimerSpec())

    def arm(self) -> None:
        """Expire `LINGER_S` from now."""
        self._settime(self.fd, 0, self._on, None)

    def disarm(self) -> None:
        """Not expire (an expiry not yet read is forgotten too)."""
        self._settime(self.fd, 0, self._off, None)

    def armed(self) -> bool:
        spec = _ITimerSpec()
        self._gettime(self.fd, ctypes.byref(spec))
        return bool(spec.it_value.tv_sec or spec.it_value.tv_nsec)

    def wait(self) -> None:
        """Until it expires (the GIL is let go meanwhile)."""
        os.read(self.fd, 8)


def _new_timer() -> _Timer | None:
    try:
        return _Timer()
    except (OSError, AttributeError):  # not Linux, or no timerfd: the thread sleeps instead
        return None


class _Lingering:
    """Sends the tails of the sessions that asked, a linger after the first ask."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()  # without a timer: set by each ask
        self._due: dict[int, Lingerer] = {}  # id -> a session with a tail to send
        self._thread: threading.Thread | None = None
        self._timer: _Timer | None = None
        self._pid = 0  # the process the thread runs in: a forked child starts its own

    def ask(self, session: Lingerer) -> None:
        """Send `session`'s tail `LINGER_S` from now (or sooner, with another's)."""
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._start()
            if id(session) in self._due:
                return  # asked already: the timer is set, or the thread is up
            first = not self._due
            self._due[id(session)] = session
            if self._timer is not None:
                if first:
                    self._timer.arm()
                return
        self._wake.set()

    def cancel(self, session: Lingerer) -> None:
        """`session` sent its tail itself: nothing to send for it (the timer is
        disarmed when no other session waits)."""
        with self._lock:
            if self._due.pop(id(session), None) is None or self._due:
                return
            if self._timer is not None and self._pid == os.getpid():
                self._timer.disarm()

    def _start(self) -> None:
        if self._pid != os.getpid():  # a forked child: what it has of its parent's is theirs
            if self._timer is not None:
                os.close(self._timer.fd)
            self._timer = None
            self._due.clear()  # the parent's sessions: never sent from here
            self._pid = os.getpid()
        if self._timer is None:
            self._timer = _new_timer()
        self._thread = threading.Thread(target=self._run, name="tunefleet-linger", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        timer = self._timer
        while True:
            if timer is not None:
                timer.wait()
            else:
                self._wake.wait()
                time.sleep(LINGER_S)
            with self._lock:
                self._wake.clear()
                due, self._due = self._due, {}
            for session in due.values():
                session._linger_flush()


LINGERING = _Lingering()
