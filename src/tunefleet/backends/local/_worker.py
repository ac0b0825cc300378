"""The worker process: loads the trainable once, then runs trials one after another.

Started as ``python -m tunefleet.backends.local._worker FD TRAINABLE_FILE`` in a
new session (its own process group), with FD one end of a socket pair to the
driver. Messages are tuples:

driver -> worker: ("start", launch_dict) | ("stop", trial_id, epoch)
                  | ("decision", trial_id, epoch, decision) | ("exit",)
worker -> driver: ("ready", pid) | ("setup_failed", failure_dict)
                  | ("results", trial_id, epoch, [(metrics, checkpoint_path), ...])
                  | ("finished", trial_id, epoch, how, checkpoint_path)
                  | ("failed", trial_id, epoch, failure_dict)
"""

from __future__ import annotations

import glob
import inspect
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from tunefleet import session as session_mod
from tunefleet._redact import reveal, scrub_failure
from tunefleet.backends.local import _memory
from tunefleet.backends.local._trainable_file import KEY_ENV
from tunefleet.session import StopTrial, TrialSession, TuneContext
from tunefleet.trial import FailureKind, FailureRecord


class _Worker:
    def __init__(self, conn: Connection, trainable_file: str) -> None:
        self.conn = conn
        self.trainable_file = trainable_file
        self.inner: Any = None
        self.params: dict[str, Any] = {}
        self.instance: Any = None  # a kept class-trainable instance (reuse_actors)
        self.experiment_name = ""
        self.reuse = True
        self.current: tuple[str, int] | None = None
        self.pending: list[tuple[Any, ...]] = []  # messages read ahead while polling

    def load(self, key: bytes) -> None:
        from tunefleet.backends.local._trainable_file import read_trainable_file
        from tunefleet.trainable import unwrap

        payload = read_trainable_file(self.trainable_file, key)  # verified before unpickling
        self.inner, _, self.params = unwrap(payload["trainable"])
        self.experiment_name = payload["experiment_name"]
        self.reuse = payload["reuse_actors"]

    # -- messages ------------------------------------------------------------------
    def send(self, msg: tuple[Any, ...]) -> None:
        self.conn.send(msg)

    def _send_results(self, batch: list[tuple[dict[str, Any], str | None]]) -> None:
        assert self.current is not None
        self.conn.send(("results", self.current[0], self.current[1], batch))

    def _poll_control(self, block: bool) -> str | None:
        """Read control messages for the running trial; return STOP/PAUSE/CONTINUE."""
        while block or self.conn.poll(0):
            msg = self.conn.recv()
            kind = msg[0]
            if kind == "exit":
                self.pending.append(msg)
                return "STOP"
            if kind == "start":
                self.pending.append(msg)
                continue
            if self.current is None or (msg[1], msg[2]) != self.current:
                continue  # for an older trial or attempt
            if kind == "stop":
                return "STOP"
            if kind == "decision":
                decision: str = msg[3]
                if decision != "CONTINUE" or block:
                    return decision
        return None

    def next_message(self) -> tuple[Any, ...]:
        if self.pending:
            return self.pending.pop(0)
        msg: tuple[Any, ...] = self.conn.recv()
        return msg

    # -- trials --------------------------------------------------------------------
    def run_trial(self, launch: dict[str, Any]) -> None:
        trial_id, epoch = launch["trial_id"], launch["epoch"]
        self.current = (trial_id, epoch)
        os.makedirs(launch["trial_dir"], exist_ok=True)
        restore_out = _redirect_output(launch["trial_dir"])
        os.environ["TUNEFLEET_TRIAL_ID"] = trial_id
        context = TuneContext(
            trial_id=trial_id,
            trial_name=launch["name"],
            trial_dir=launch["trial_dir"],
            experiment_name=self.experiment_name,
            attempt=launch["attempt"],
            resources=launch["resources"],
        )
        session = TrialSession(
            context=context,
            send=self._send_results,
            poll_control=self._poll_control,
            checkpoint=launch["checkpoint"],
            iteration=launch["iteration"],
            time_total=launch["time_total"],
            sync=launch["sync"],
            stop_criteria=launch["stop_criteria"],
            storage_dir=launch.get("storage_dir"),
            storage_filesystem=launch.get("storage_filesystem"),
        )
        session_mod._set_session(session)
        final_checkpoint: str | None = None
        outcome: tuple[Any, ...]
        _memory.reset_peaks()
        undo_limit = _memory.limit_address_space(launch.get("rlimit_as"))  # "rlimit" mechanism
        try:
            if inspect.isclass(self.inner):
                self._run_class(launch, session)
            else:
                self.inner(reveal(launch["config"]), **self.params)  # tune.Secret unwrapped
            outcome = ("finished", trial_id, epoch, "returned", final_checkpoint)
        except StopTrial as stop:
            how = "paused" if stop.pause else "stopped"
            try:
                if inspect.isclass(self.inner) and (launch["checkpoint_at_end"] or stop.pause):
                    final_checkpoint = self._save_class_checkpoint(session, launch)
                outcome = ("finished", trial_id, epoch, how, final_checkpoint)
            except Exception as exc:  # e.g. CheckpointWriteError (disk full): fail, named
                failure = _failure_from_exception(exc, launch, session)
                outcome = ("failed", trial_id, epoch, failure.to_json())
                self._drop_instance()
        except BaseException as exc:
            undo_limit()  # room to build the failure record
            failure = _failure_from_exception(exc, launch, session)
            outcome = ("failed", trial_id, epoch, failure.to_json())
            self._drop_instance()
        finally:
            undo_limit()
            session.close()
            session_mod._set_session(None)
            sys.stdout.flush()
            sys.stderr.flush()
            _kill_children()
            restore_out()
            self.current = None
        self.send(outcome)

    def _run_class(self, launch: dict[str, Any], session: TrialSession) -> None:
        config = reveal(launch["config"])  # tune.Secret unwrapped
        if self.instance is not None and not (self.reuse and self.instance.reset_config(config)):
            self._drop_instance()
        if self.instance is None:
            self.instance = self.inner(config, **self.params)
        if session.checkpoint is not None:
            with session.checkpoint.as_directory() as directory:  # a remote one is downloaded
                _load_class_checkpoint(self.instance, directory)
        freq = launch["checkpoint_freq"]
        while True:
            result = self.instance.step()
            if not isinstance(result, dict):
                raise TypeError(
                    f"{type(self.instance).__name__}.step() must return a dict of metrics, "
                    f"not {type(result).__name__}"
                )
            done = bool(result.get("done", False))
            iteration = session.iteration + 1
            want = (freq and iteration % freq == 0) or (done and launch["checkpoint_at_end"])
            checkpoint = None
            tmp = None
            if want:
                tmp = tempfile.mkdtemp(prefix=".ckpt_", dir=launch["trial_dir"])
                _save_class_state(self.instance, tmp)
                from tunefleet.storage.checkpoint import Checkpoint

                checkpoint = Checkpoint(tmp)
            try:
                session.report(result, checkpoint)
            finally:
                if tmp:
                    shutil.rmtree(tmp, ignore_errors=True)
            if done:
                return None

    def _save_class_checkpoint(self, session: TrialSession, launch: dict[str, Any]) -> str | None:

        if self.instance is None:
            return None
        tmp = tempfile.mkdtemp(prefix=".ckpt_", dir=launch["trial_dir"])
        try:
            _save_class_state(self.instance, tmp)
            return session.persist(tmp, session.iteration)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _drop_instance(self) -> None:
        if self.instance is not None:
            try:
                self.instance.cleanup()
            finally:
                self.instance = None

    def serve(self) -> None:
        while True:
            try:
                msg = self.next_message()
            except EOFError:
                return
            if msg[0] == "start":
                self.run_trial(msg[1])
            elif msg[0] == "exit":
                self._drop_instance()
                return


def _save_class_state(instance: Any, directory: str) -> None:
    import json

    extra = instance.save_checkpoint(directory)
    if isinstance(extra, dict):
        with open(os.path.join(directory, ".tunefleet_state.json"), "w") as f:
            json.dump(extra, f)


def _load_class_checkpoint(instance: Any, directory: str) -> None:
    import json

    state_file = os.path.join(directory, ".tunefleet_state.json")
    if os.path.exists(state_file):
        with open(state_file) as f:
            instance.load_checkpoint(json.load(f))
    else:
        instance.load_checkpoint(directory)


def _failure_from_exception(
    exc: BaseException, launch: dict[str, Any], session: TrialSession
) -> FailureRecord:
    kind = FailureKind.EXCEPTION
    name = type(exc).__name__
    message = str(exc)
    if isinstance(exc, SystemExit):
        message = f"the trainable called sys.exit({exc.code!r})"
    crash = _program_crash(exc, launch, session)
    if crash is not None:
        return scrub_failure(crash, launch["config"])
    failure = FailureRecord(
        kind=kind,
        message=message,
        traceback="".join(traceback.format_exception(exc)),
        exception_type=f"{type(exc).__module__}.{name}"
        if type(exc).__module__ != "builtins"
        else name,
        attempt=launch["attempt"],
        iteration=session.iteration,
        checkpoint=launch["checkpoint"],
    )
    _memory.memory_failure(exc, failure)  # OOM (MemoryError) or GPU_OOM, with the peak
    return scrub_failure(failure, launch["config"])  # the trial's secrets stay in its process


def _program_crash(
    exc: BaseException, launch: dict[str, Any], session: TrialSession
) -> FailureRecord | None:
    """The failure of a program run by the trial (`tunefleet run`) that exited non-zero
    or was killed: a CRASH with its exit code or signal and its stderr, no traceback
    (the trial's own stack says nothing about the program)."""
    if type(exc).__name__ != "ScriptError" or not type(exc).__module__.startswith("tunefleet"):
        return None
    exit_code, signame = getattr(exc, "exit_code", None), getattr(exc, "signal", None)
    if exit_code is None and signame is None:
        return None  # it broke the report protocol: an EXCEPTION with the message
    return FailureRecord(
        kind=FailureKind.CRASH,
        message=str(getattr(exc, "summary", exc)),
        exit_code=exit_code,
        signal=signame,
        stderr_tail=getattr(exc, "stderr_tail", None),
        attempt=launch["attempt"],
        iteration=session.iteration,
        checkpoint=launch["checkpoint"],
    )


def _redirect_output(trial_dir: str) -> Any:
    """Point fds 1 and 2 (and children's) at the trial's log files; return the undo."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    out = os.open(os.path.join(trial_dir, "stdout.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    err = os.open(os.path.join(trial_dir, "stderr.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])

    return restore


def _become_subreaper() -> None:
    """Orphans of a trial's processes are re-parented to this worker, so it can reap them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def _kill_children() -> None:
    """No process a trial started outlives it, even when the worker is reused.

    Orphans (double forks, daemons in a session of their own) were re-parented to
    this worker, a subreaper, so the tree holds them too. The tree is killed again
    until it is empty: a process may fork while its parent is being killed.
    """
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        tree, stack = [], _children(os.getpid())
        while stack:
            pid = stack.pop()
            tree.append(pid)
            stack.extend(_children(pid))
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:  # reap what died (zombies are still listed as children)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        if not _children(os.getpid()):
            return
        time.sleep(0.01)


def _die_with_the_driver() -> None:
    """If the driver dies (even by SIGKILL), kill this worker's whole process group.

    A trial in a long step would otherwise run on, orphaned, and write into a trial
    directory that a resumed driver is about to use again.
    """
    import threading

    driver = os.getppid()

    def watch() -> None:
        while os.getppid() == driver:
            time.sleep(0.5)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="tunefleet-driver-watch", daemon=True).start()


def main() -> None:
    _die_with_the_driver()
    fd = int(sys.argv[1])
    os.set_inheritable(fd, False)  # processes a trial starts must not hold the driver's line
    # the key that verifies the trainable file: kept from trials and their children
    try:
        key = bytes.fromhex(os.environ.pop(KEY_ENV, ""))
    except ValueError:
        key = b""  # the load below refuses the file and says why
    extra_path = os.environ.pop("TUNEFLEET_SYS_PATH", None)
    if extra_path:
        import json

        sys.path[:0] = [p for p in json.loads(extra_path) if p not in sys.path]
    _become_subreaper()
    conn = Connection(fd)
    worker = _Worker(conn, sys.argv[2])
    try:
        worker.load(key)
    except BaseException as exc:
        failure = FailureRecord(
            kind=FailureKind.EXCEPTION,
            message=f"could not load the trainable in the worker: {exc}",
            traceback="".join(traceback.format_exception(exc)),
            exception_type=type(exc).__name__,
        )
        conn.send(("setup_failed", failure.to_json()))
        return
    conn.send(("ready", os.getpid()))
    worker.serve()


if __name__ == "__main__":
    main()
