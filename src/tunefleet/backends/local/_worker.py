"""A local worker process: loads the trainable once, then runs the trial loop (``_loop.py``).

Started as ``python -m tunefleet.backends.local._worker FD TRAINABLE_FILE`` in a
new session (its own process group), with FD one end of a socket pair to the
driver; or forked, in a new session too, from a zygote started as ``... _worker
--zygote FD TRAINABLE_FILE`` (``_zygote.py``), which runs `run` in each worker. The
driver first sends, over that socket, the key that verifies the trainable file (never
in the environment or the arguments, which ``/proc`` shows). The worker sends `Ready`
once the trainable is loaded (`SetupFailed` if it cannot be), then serves the loop's
messages (``_protocol.py``) until told to exit.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection

from tunefleet.backends._loop import TrialLoop
from tunefleet.backends._protocol import Ready, SetupFailed, WorkerSetup, send
from tunefleet.backends.local._descendants import kill_descendants, kill_own_cgroup
from tunefleet.backends.local._trainable_file import read_trainable_file
from tunefleet.trial import FailureKind, FailureRecord


def load(trainable_file: str, key: bytes, conn: Connection) -> TrialLoop:
    """The trial loop of the trainable in `trainable_file` (verified before unpickling)."""
    setup: WorkerSetup = read_trainable_file(trainable_file, key)
    # the trainable's folder (the experiment's .tunefleet) holds the worker's spare folder
    return TrialLoop(conn, setup, spare_home=os.path.dirname(os.path.abspath(trainable_file)))


def _become_subreaper() -> None:
    """Orphans of a trial's processes are re-parented to this worker, so it can reap them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _die_with_the_driver(driver: int) -> None:
    """If the driver (pid `driver`) dies, even by SIGKILL, kill every process this worker
    started, then its whole process group.

    A trial in a long step would otherwise run on, orphaned, and write into a trial
    directory that a resumed driver is about to use again. Its descendants that left
    the group (daemons: ``setsid``) are killed through the process tree (this worker
    is their subreaper) and, where it has one of its own, its cgroup. The driver's exit
    wakes the watch through a pidfd; where there is none, the watch checks every 0.5 s
    that this worker's parent (the driver, or the zygote that forked it, which exits when
    the driver does) is still alive.
    """
    import threading

    parent = os.getppid()  # the driver, or the zygote (which dies with the driver)

    def watch() -> None:
        try:
            pidfd = os.pidfd_open(driver)
        except ProcessLookupError:  # gone already
            pidfd = None
        except (AttributeError, OSError):  # no pidfd here
            while os.getppid() == parent:
                time.sleep(0.5)
            pidfd = None
        if pidfd is not None:
            select.select([pidfd], [], [])  # readable once the driver has exited
        kill_descendants()
        kill_own_cgroup()
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="tunefleet-driver-watch", daemon=True).start()


def run(fd: int, trainable_file: str, driver: int) -> None:
    """Be a worker on channel `fd` to the driver (pid `driver`): load the trainable in
    `trainable_file`, then serve the trial loop until told to exit."""
    # a crash while loading the trainable (a C extension its module imports) leaves
    # the Python stack in this worker's output, which a failed start-up shows
    faulthandler.enable(file=sys.stderr, all_threads=False)
    _die_with_the_driver(driver)
    os.set_inheritable(fd, False)  # processes a trial starts must not hold the driver's line
    conn = Connection(fd)
    try:
        key = conn.recv_bytes(1024)  # the driver sends it first; the load verifies it
    except (EOFError, OSError):
        return  # the driver is gone
    extra_path = os.environ.pop("TUNEFLEET_SYS_PATH", None)
    if extra_path:
        import json

        sys.path[:0] = [p for p in json.loads(extra_path) if p not in sys.path]
    _become_subreaper()
    try:
        loop = load(trainable_file, key, conn)
    except BaseException as exc:
        failure = FailureRecord(
            kind=FailureKind.EXCEPTION,
            message=f"could not load the trainable in the worker: {exc}",
            traceback="".join(traceback.format_exception(exc)),
            exception_type=type(exc).__name__,
        )
        send(conn, SetupFailed(failure))
        return
    send(conn, Ready(os.getpid()))
    loop.serve()


def _warm() -> None:
    """What every worker imports later (the Trainable class, the resource sampler's
    psutil): imported in the zygote once it is idle, not in each worker."""
    import psutil  # noqa: F401

    import tunefleet.trainable  # noqa: F401


def main() -> None:
    if sys.argv[1] == "--zygote":  # workers are forked from this process (_zygote.py)
        import cloudpickle  # noqa: F401  # what loads the trainable: once, here

        from tunefleet.backends.local import _zygote

        driver = os.getppid()
        _zygote.serve(int(sys.argv[2]), lambda fd, path: run(fd, path, driver), sys.argv[3], _warm)
        return
    run(int(sys.argv[1]), sys.argv[2], os.getppid())


if __name__ == "__main__":
    main()
