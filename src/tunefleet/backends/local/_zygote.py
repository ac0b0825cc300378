"""Worker processes forked from a process that has already imported the worker's code.

Starting a worker as a fresh interpreter costs 50-100 ms of CPU (the interpreter, then
tunefleet's worker modules and cloudpickle). Where a worker is made for each trial (a
class trainable: ``reuse_actors`` is off by default, as in Ray Tune), that was most of a
short trial's cost. The local backend instead starts one *zygote* per experiment:
``python -m tunefleet.backends.local._worker --zygote FD TRAINABLE_FILE``, which imports
the worker's modules and then waits. Each worker is forked from it in a few ms and runs
exactly the code a started worker runs (`_worker.run`). The trainable is loaded in the
worker, never in the zygote, so each worker imports the user's module afresh, and no
thread exists in the zygote at any fork.

The zygote is its workers' parent: it reaps them and tells the driver each one's exit
code, which `ForkedProcess` (what the backend holds instead of a `subprocess.Popen`)
reads. The driver sees a worker's exit through a pidfd, as for the processes it starts.

Anything the zygote cannot do (no ``fork`` or pidfd on this platform, the zygote died, a
request failed) makes the backend start the worker as a fresh interpreter, as it always
did. ``TUNEFLEET_WORKER_START=spawn`` asks for that every time.
"""

from __future__ import annotations

import gc
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, Any

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
START_ENV = "TUNEFLEET_WORKER_START"  # "fork" (the default where it works) or "spawn"
_MAX_REQUEST = 1 << 20  # bytes: a request (what a worker's environment changes, as JSON)


def wanted() -> bool:
    """Whether workers should be forked from a zygote here (Linux, not turned off)."""
    how = os.environ.get(START_ENV, "").strip().lower() or "fork"
    if how not in ("fork", "spawn"):
        raise ValueError(
            f"{START_ENV}={how!r} is not valid: give 'fork' (workers forked from a process "
            "that has imported tunefleet, the default on Linux) or 'spawn' (each worker a "
            "fresh interpreter)"
        )
    return how == "fork" and sys.platform.startswith("linux") and hasattr(os, "pidfd_open")


# -- the driver's side -------------------------------------------------------------------


def worker_env() -> dict[str, str]:
    """The environment of a worker process: the driver's, and where to import from."""
    env = dict(os.environ)
    # absolute: trials run in their own folders, where "" would mean something else
    env["TUNEFLEET_SYS_PATH"] = json.dumps([os.path.abspath(p) for p in sys.path])
    # the worker must import this very tunefleet, installed or not
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return env


def start_worker(
    zygote: Zygote | None,
    channel: socket.socket,
    env: dict[str, str],
    trainable_file: str,
    log: IO[bytes],
) -> subprocess.Popen[bytes] | ForkedProcess:
    """A worker process on `channel`: forked by `zygote` if it can, else a fresh
    interpreter in a session of its own."""
    forked = None if zygote is None else zygote.fork(channel, env)
    if forked is not None:
        return forked
    return _start([], channel.fileno(), trainable_file, env, log)


def _start(
    flags: list[str], fd: int, trainable_file: str, env: dict[str, str], log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """``python -m tunefleet.backends.local._worker [FLAGS] FD TRAINABLE_FILE`` (a worker,
    or with ``--zygote`` the zygote) in a session of its own (a Ctrl-C in the driver's
    terminal is not its), holding `fd`, its output in `log`."""
    return subprocess.Popen(
        [sys.executable, "-m", "tunefleet.backends.local._worker", *flags, str(fd), trainable_file],
        pass_fds=(fd,),
        start_new_session=True,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )


class ForkedProcess:
    """A worker the zygote forked: the part of `subprocess.Popen` the backend uses (`pid`,
    `returncode`, `poll`, `wait`), its exit code as the zygote reports it."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return self.returncode


class Zygote:
    """The driver's handle on its zygote: `fork(...)` makes a worker, or returns None.

    Args:
        trainable_file: shown in the zygote's (so every forked worker's) command line.
        log: where the zygote's and its workers' output goes (the workers' log).
        env: the zygote's environment (each worker is given its own).
    """

    def __init__(self, trainable_file: str, log: IO[bytes], env: dict[str, str]) -> None:
        self._env = dict(env)  # the zygote's: a request sends what differs from it
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._codes: dict[int, int] = {}  # exit codes reported, not yet asked for
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = _start(["--zygote"], theirs.fileno(), trainable_file, env, log)
        except OSError:
            ours.close()
        else:
            self._sock = ours
        finally:
            theirs.close()

    def fork(self, channel: socket.socket, env: dict[str, str]) -> ForkedProcess | None:
        """A new worker on `channel` (its end of the driver's socket pair), with `env` as
        its environment and the driver's working directory as its own; None if the
        zygote could not make one (then the caller starts the worker itself)."""
        if self._sock is None:
            return None
        base = self._env
        changed = {k: v for k, v in env.items() if base.get(k) != v}
        removed = [k for k in base if k not in env]
        request = json.dumps({"env": changed, "unset": removed, "cwd": os.getcwd()}).encode()
        reply: dict[str, Any] = {}
        try:
            socket.send_fds(self._sock, [request], [channel.fileno()])
            while "pid" not in reply and "error" not in reply:
                reply = self._receive(None) or {"error": "the zygote is gone"}
        except (OSError, ValueError) as exc:
            reply = {"error": str(exc)}
        pid = reply.get("pid")
        if not isinstance(pid, int):
            self._give_up()  # every later worker is started instead
            return None
        return ForkedProcess(pid, self)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """Worker `pid`'s exit code, waiting up to `timeout` seconds (None: for as long as
        it takes) for the zygote to report it; None if it has not exited by then."""
        end = None if timeout is None else time.monotonic() + timeout
        while pid not in self._codes:
            if self._sock is None:  # the zygote died: its workers' codes are lost
                return self._lost(pid, end)
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                if self._receive(left) is None and left is not None and left <= 0:
                    return None
            except (OSError, ValueError):
                self._give_up()
        return self._codes.pop(pid)

    def _receive(self, timeout: float | None) -> dict[str, Any] | None:
        """The zygote's next message (exit codes are kept); None if none came in time.

        Raises:
            OSError: the zygote is gone (its end of the line closed).
        """
        assert self._sock is not None
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return None
        data = self._sock.recv(4096)
        if not data:
            raise OSError("the zygote's line closed")
        message: dict[str, Any] = json.loads(data)
        if "exit" in message:
            self._codes[int(message["exit"])] = int(message["code"])
        return message

    def _lost(self, pid: int, end: float | None) -> int | None:
        """Without the zygote, a worker's exit is still seen (a pidfd), not its code: -9
        (SIGKILL) stands for it, the likeliest end of a worker that outlived its zygote."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return -9
        try:
            left = None if end is None else max(0.0, end - time.monotonic())
            return -9 if select.select([fd], [], [], left)[0] else None
        finally:
            os.close(fd)

    def _give_up(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        """End the zygote, after its workers (they are its children: it reaps them).

        It holds nothing but its imports, so it is killed rather than asked: an
        interpreter's orderly exit would cost the end of `fit()` 10-20 ms."""
        self._give_up()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


# -- the zygote's side -------------------------------------------------------------------


def serve(
    control_fd: int,
    run_worker: Callable[[int, str], None],
    trainable_file: str,
    warm: Callable[[], None] | None = None,
) -> None:
    """The zygote's loop: fork a worker for each request, report each worker's exit code,
    until the driver closes the line.

    `run_worker(fd, trainable_file)` is what a worker runs (`_worker.run`); it is
    imported before the first request, which is the point of a zygote. `warm()` imports
    what workers need later on (not to start): it runs once the first workers are
    forked and no request waits, so it never delays the experiment's first trials.
    """
    control = socket.socket(fileno=control_fd)
    os.set_inheritable(control_fd, False)
    poller = select.poll()
    poller.register(control_fd, select.POLLIN)
    children: dict[int, int] = {}  # pidfd -> pid of a worker
    while True:
        events = poller.poll(0 if warm is not None and children else None)
        if not events and warm is not None:
            warm()
            warm = None
            # what is imported is shared with every worker until written to: kept out of
            # the collector's passes, which write to every object they visit
            gc.freeze()
            continue
        for fd, _event in events:
            if fd != control_fd:
                pid = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                reply: dict[str, Any] = {"exit": pid, "code": os.waitstatus_to_exitcode(status)}
            else:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(control, _MAX_REQUEST, 1)
                except OSError:
                    return
                if not data:
                    return  # the driver is gone, or done
                try:
                    pid = _fork_worker(fds, json.loads(data), run_worker, trainable_file)
                except Exception as exc:  # told to the driver, which starts the worker
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                else:
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = pid
                    poller.register(pidfd, select.POLLIN)
                    reply = {"pid": pid}
                finally:
                    for received in fds:
                        os.close(received)
            try:
                control.send(json.dumps(reply).encode())
            except OSError:
                return


def _fork_worker(
    fds: list[int],
    request: dict[str, Any],
    run_worker: Callable[[int, str], None],
    trainable_file: str,
) -> int:
    """Fork a worker on the channel in `fds`; its pid."""
    if len(fds) != 1:
        raise ValueError(f"a request must carry one channel, not {len(fds)}")
    pid = os.fork()
    if pid == 0:
        _become_worker(fds[0], request, run_worker, trainable_file)
    return pid


def _become_worker(
    channel: int,
    request: dict[str, Any],
    run_worker: Callable[[int, str], None],
    trainable_file: str,
) -> None:
    """In the forked worker: what `subprocess.Popen` gave a started worker (its own
    session, the environment, the working directory, no other descriptor than its
    standard streams and its channel), then the worker's code; never returns."""
    code = 1
    try:
        os.closerange(3, channel)  # the zygote's line, its other workers' pidfds
        os.closerange(channel + 1, os.sysconf("SC_OPEN_MAX"))
        os.setsid()
        for name in request["unset"]:  # the zygote's environment, made the driver's now
            os.environ.pop(name, None)
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv[1:] = [str(channel), trainable_file]
        run_worker(channel, trainable_file)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _end(code)


def _end(code: int) -> None:
    """Leave as an interpreter would (its threads joined, exit handlers run, output
    flushed), without unwinding into the zygote's loop."""
    try:
        import atexit
        import threading

        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at exit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)
