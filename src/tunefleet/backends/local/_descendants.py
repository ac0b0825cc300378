"""Killing everything a worker started once its driver is gone.

A worker is a child subreaper, so a trial's orphans, daemons that left its session
with ``setsid`` included, are re-parented to it and stay in its process tree. Where
the driver gave the worker a cgroup of its own (a memory limit, ``_memory_limits.py``)
that cgroup holds every process the worker started, wherever it was re-parented.
"""

from __future__ import annotations

import os
import signal
import time

from tunefleet.backends._files import read_text, write_text
from tunefleet.backends.local._memory_limits import own_cgroup_dir


def kill_descendants(timeout: float = 5.0) -> None:
    """SIGKILL this process's descendants, again and again until none is left alive
    (a process may fork while its parent is being killed), at most `timeout` seconds."""
    import psutil  # only here: a worker starts without it

    me = psutil.Process()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for proc in me.children(recursive=True):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    proc.send_signal(signal.SIGKILL)  # psutil checks the pid was not reused
                    alive.append(proc)
            except psutil.Error:
                continue
        if not alive:
            return
        psutil.wait_procs(alive, timeout=0.1)


def kill_own_cgroup() -> None:
    """SIGKILL every process in this worker's own cgroup (this process last, on cgroup v2).

    Only a cgroup the driver made for this worker (``worker-<pid>-<n>``) is emptied: a
    worker without one shares the driver's cgroup, whose other processes are not its own.
    """
    mine = f"worker-{os.getpid()}-"
    for version in (1, 2):
        path = own_cgroup_dir(version)
        if path is None or not os.path.basename(path).startswith(mine):
            continue
        for _ in range(10):  # a process may fork while the others are being killed
            pids = [int(p) for p in (read_text(os.path.join(path, "cgroup.procs")) or "").split()]
            others = [pid for pid in pids if pid != os.getpid()]
            if not others:
                break
            for pid in others:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
        if version == 2 and os.path.exists(os.path.join(path, "cgroup.kill")):
            try:
                write_text(os.path.join(path, "cgroup.kill"), "1")  # this worker too
            except OSError:
                pass
