"""The trial side: the loop that runs trials in a worker, the same code in a local worker
process and in a Ray actor.

It imports the trainable once, then runs one trial after another as the backend's
messages say (``_protocol.py``): function and class trainables, ``report()`` turned
into result messages (batched by the session), stop and pause at the next report,
checkpoints of class trainables, and a failure record for whatever the trial raised.
Each trial's stdout and stderr go to its own log files, and no process it started
outlives it.
"""

from __future__ import annotations

import faulthandler
import glob
import inspect
import numbers
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from tunefleet import session as session_mod
from tunefleet._redact import reveal, scrub_failure
from tunefleet.backends import _trial_memory, _usage
from tunefleet.backends._base import CHECKPOINT_ONLY, FinishHow, TrialLaunch
from tunefleet.backends._protocol import (
    Decide,
    Exit,
    ResultItem,
    Save,
    Start,
    Stop,
    ToWorker,
    TrialFailed,
    TrialFinished,
    TrialMessage,
    TrialResults,
    WorkerSetup,
    send,
    send_together,
)
from tunefleet.backends._restore import restore_point
from tunefleet.backends._spare import SpareFolder, open_log, point_output_at
from tunefleet.result import DEFAULT_METRIC, SHOULD_CHECKPOINT, TRAINING_ITERATION
from tunefleet.session import StopTrial, TrialSession, TuneContext
from tunefleet.trial import FailureKind, FailureRecord


class TrialLoop:
    """Runs trials one after another on one channel to the backend.

    Args:
        channel: the connection to the backend: `Start`, `Stop`, `Decide` and `Exit`
            come in; `TrialResults`, `TrialFinished` and `TrialFailed` go out.
        setup: the trainable (imported here, once) and what its trials are told.
    """

    def __init__(
        self, channel: Connection, setup: WorkerSetup, spare_home: str | None = None
    ) -> None:
        from tunefleet.trainable import placement_of, unwrap

        self._channel = channel
        # one poller for the life of the loop: Connection.poll(0) builds a selector per call,
        # and a trial polls for the driver's word after every report
        self._control = select.poll()
        self._control.register(channel.fileno(), select.POLLIN)
        self._inner, _, self._params = unwrap(setup.trainable)
        self._placement = placement_of(setup.trainable)  # its trials' bundles, if given
        self._experiment_name = setup.experiment_name
        self._reuse = setup.reuse_actors
        self._instance: Any = None  # a kept class-trainable instance (reuse_actors)
        self._current: tuple[str, int] | None = None  # (trial_id, epoch) running now
        self._pending: list[ToWorker] = []  # messages read ahead while a trial ran
        self._save_asked = False  # the driver asked for a checkpoint (should_checkpoint)
        self._saved_at: int | None = None  # the iteration of the attempt's newest checkpoint
        self._outbox: list[TrialMessage] | None = None  # held while a trial ends
        # the next trial's folder, made while waiting for it (`_spare.py`; local workers
        # that are reused: one that is not runs no next trial)
        self._spare = SpareFolder(spare_home) if spare_home is not None and self._reuse else None
        self._log_files: tuple[str, str] | None = None  # the last trial's, for the spare

    def serve(self) -> None:
        """Run trials until told to exit or the channel closes."""
        while True:
            try:
                msg = self._next_message()
            except EOFError:
                break
            if isinstance(msg, Start):
                self.run_trial(msg)
            elif isinstance(msg, Exit):
                self._drop_instance()
                break
        if self._spare is not None:
            self._spare.discard()

    # -- messages ------------------------------------------------------------------
    def _next_message(self) -> ToWorker:
        if self._pending:
            return self._pending.pop(0)
        if self._spare is not None and self._log_files is not None:
            self._spare.prepare(self._log_files)  # while the driver chooses the next trial
        msg: ToWorker = self._channel.recv()
        return msg

    def _send(self, msg: TrialMessage) -> None:
        send(self._channel, msg)

    def _send_results(self, batch: list[ResultItem]) -> None:
        assert self._current is not None
        msg = TrialResults(self._current[0], self._current[1], batch)
        if self._outbox is not None:  # the trial is ending: sent with its end
            self._outbox.append(msg)
        else:
            send(self._channel, msg)

    def _poll_control(self, block: bool) -> str | None:
        """Read control messages for the running trial; return STOP/PAUSE/CONTINUE."""
        while block or self._control.poll(0):
            msg: ToWorker = self._channel.recv()
            if isinstance(msg, (Start, Exit)):
                self._pending.append(msg)  # for after this trial
                if isinstance(msg, Exit):
                    return "STOP"
                continue
            if (msg.trial_id, msg.epoch) != self._current:
                continue  # for an older trial or attempt
            if isinstance(msg, Stop):
                return "STOP"
            if isinstance(msg, Save):
                self._save_asked = True  # carried out by a class trainable after its step
                continue
            if isinstance(msg, Decide) and (msg.decision != "CONTINUE" or block):
                return msg.decision
        return None

    # -- trials --------------------------------------------------------------------
    def run_trial(self, start: Start) -> None:
        """Run one attempt to its end and send how it ended."""
        unreadable: Exception | None = None
        try:  # its checkpoints are verified here, not in the driver
            launch, restored = restore_point(start.launch)
        except Exception as exc:  # their storage cannot be read: the attempt fails, named
            launch, restored, unreadable = start.launch, None, exc
        trial_id, epoch = launch.trial_id, launch.epoch
        self._current = (trial_id, epoch)
        if restored is not None:  # before any result: the driver rewinds to it
            self._send_results([(restored, None)])
        self._save_asked = False
        self._saved_at = launch.iteration if launch.checkpoint else None
        self._log_files = launch.log_files
        spare = self._spare.take(launch.trial_dir, launch.log_files) if self._spare else None
        if spare is not None:  # the folder made while waiting, renamed into place
            restore_out = spare
        else:
            os.makedirs(launch.trial_dir, exist_ok=True)
            restore_out = _redirect_output(launch.trial_dir, launch.log_files)
        # a fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) writes the Python stack to
        # fd 2, now this trial's stderr log, so its failure record's stderr tail shows where
        faulthandler.enable(file=2, all_threads=False)
        restore_cwd = _enter_trial_dir(launch) if launch.chdir else _nothing
        os.environ["TUNEFLEET_TRIAL_ID"] = trial_id
        context = TuneContext(
            trial_id=trial_id,
            trial_name=launch.name,
            trial_dir=launch.trial_dir,
            experiment_name=self._experiment_name,
            attempt=launch.attempt,
            resources=dict(launch.resources),
            gpu_ids=tuple(start.gpu_ids),
            placement=launch.placement or self._placement,
        )
        _trial_memory.reset_peaks()
        usage = _usage.UsageSampler(launch.resources.get("memory")).start()
        session = TrialSession(
            context=context,
            send=self._send_results,
            poll_control=self._poll_control,
            checkpoint=launch.checkpoint,
            iteration=launch.iteration,
            time_total=launch.time_total,
            sync=launch.sync,
            stop_criteria=launch.stop_criteria,
            decide_at=launch.decide_at,
            storage_dir=launch.storage_dir,
            storage_filesystem=launch.storage_filesystem,
            usage=usage.fill,
        )
        session_mod._set_session(session)
        outcome: TrialMessage
        undo_limit = _trial_memory.limit_address_space(start.rlimit_as)  # "rlimit" mechanism
        try:
            if unreadable is not None:
                raise unreadable
            if inspect.isclass(self._inner):
                self._run_class(launch, session)
            else:
                output = self._inner(reveal(launch.config), **self._params)  # Secret unwrapped
                _report_output(output, self._inner, session)
            outcome = TrialFinished(trial_id, epoch, FinishHow.RETURNED, None)
        except StopTrial as stop:
            how = FinishHow.PAUSED if stop.pause else FinishHow.STOPPED
            try:
                final_checkpoint = None
                wanted = launch.checkpoint_at_end or stop.pause or self._save_asked
                if inspect.isclass(self._inner) and wanted:
                    final_checkpoint = self._save_class_checkpoint(session, launch)
                outcome = TrialFinished(trial_id, epoch, how, final_checkpoint)
            except Exception as exc:  # e.g. CheckpointWriteError (disk full): fail, named
                failure = _failure_from_exception(exc, launch, session)
                outcome = TrialFailed(trial_id, epoch, failure)
                self._drop_instance()
        except BaseException as exc:
            undo_limit()  # room to build the failure record
            outcome = TrialFailed(trial_id, epoch, _failure_from_exception(exc, launch, session))
            self._drop_instance()
        finally:
            if not self._reuse:  # as in Ray Tune: cleanup() when the trial ends
                _quietly(self._drop_instance)
            undo_limit()
            usage.stop()
            # the checkpoint persisted in the background is sent before the trial's end
            late = session.settle()
            if late is not None and isinstance(outcome, TrialFinished):
                failure = _failure_from_exception(late, launch, session)
                outcome = TrialFailed(trial_id, epoch, failure)
            self._outbox = []  # its last results go out with its end, in one write
            session.close()
            session_mod._set_session(None)
            sys.stdout.flush()
            sys.stderr.flush()
            if _has_children():  # killing them may take a while: its results go first
                self._send_outbox()
            _kill_children()
            restore_cwd()
            restore_out()
            self._current = None
        self._send_outbox(outcome)

    def _send_outbox(self, *last: TrialMessage) -> None:
        """Send what the ending trial held back, and `last`, in one write."""
        held, self._outbox = self._outbox or [], None
        if held or last:
            send_together(self._channel, [*held, *last])

    def _run_class(self, launch: TrialLaunch, session: TrialSession) -> None:
        config = reveal(launch.config)  # tune.Secret unwrapped
        if self._instance is not None and not (self._reuse and self._instance._reset(config)):
            self._drop_instance()
        if self._instance is None:
            self._instance = self._inner(config, **self._params)
        if session.checkpoint is not None:
            with session.checkpoint.as_directory() as directory:  # a remote one is downloaded
                _load_class_checkpoint(self._instance, directory)
        freq = launch.checkpoint_freq
        while True:
            result = self._instance.train()  # step() and the keys every result has
            done = bool(result.get("done", False))
            iteration = session.iteration + 1
            want = (
                bool(result.get(SHOULD_CHECKPOINT))  # the trainable asks (Ray's manual form)
                or (freq and iteration % freq == 0)
                or (done and launch.checkpoint_at_end)
            )
            checkpoint = None
            if want:  # saved on the zero-copy path: report() renames the folder into place
                self._saved_at, self._save_asked = iteration, False
                folder = session.new_checkpoint_dir()  # removed at the end if not reported
                _save_class_state(self._instance, folder)
                from tunefleet.storage.checkpoint import Checkpoint

                checkpoint = Checkpoint(folder)
            session.report(result, checkpoint)
            if done:
                return None
            if self._save_asked:  # asked after this result (at once, when sync): saved now
                self._save_asked = False
                path = self._save_class_checkpoint(session, launch)
                if path is not None:
                    marker = {TRAINING_ITERATION: session.iteration, CHECKPOINT_ONLY: True}
                    session.send_now(marker, path)

    def _save_class_checkpoint(self, session: TrialSession, launch: TrialLaunch) -> str | None:
        """A checkpoint of the instance's state now; None if there is no instance or this
        iteration's checkpoint exists already (it went out with its result)."""
        if self._instance is None or self._saved_at == session.iteration:
            return None
        tmp = tempfile.mkdtemp(prefix=".ckpt_", dir=launch.trial_dir)
        try:
            _save_class_state(self._instance, tmp)
            path = session.persist(tmp, session.iteration)
            self._saved_at = session.iteration
            return path
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _drop_instance(self) -> None:
        if self._instance is not None:
            try:
                self._instance.cleanup()
            finally:
                self._instance = None


def _report_output(output: Any, function: Any, session: TrialSession) -> None:
    """What a function trainable returned (or yielded, a generator) is reported, as in
    Ray Tune: a dict as one more result, a number as ``{DEFAULT_METRIC: number}``."""
    if inspect.isgenerator(output):
        for item in output:
            _report_output(item, function, session)
        return
    metrics = _returned_metrics(output, getattr(function, "__name__", "the trainable"))
    if metrics is not None:
        session.report(metrics, None)


def _returned_metrics(output: Any, name: str) -> dict[str, Any] | None:
    if isinstance(output, dict):
        return output or None  # an empty dict reports nothing, as in Ray Tune
    if isinstance(output, bool):
        return {DEFAULT_METRIC: output} if output else None  # Ray Tune: a bool is a number
    if isinstance(output, numbers.Number):
        return {DEFAULT_METRIC: output}  # 0 too (Ray Tune drops a falsy return value)
    if output is None or (isinstance(output, (str, list, tuple, set)) and not output):
        return None
    raise ValueError(
        f"{name}() returned a {type(output).__name__}: a function trainable may return "
        f"(or yield) a dict of metrics, a single number (reported as {DEFAULT_METRIC!r}) "
        "or None"
    )


def _save_class_state(instance: Any, directory: str) -> None:
    instance._save_to(directory)  # save_checkpoint(), and the dict it returned


def _load_class_checkpoint(instance: Any, directory: str) -> None:
    instance._load_from(directory)  # load_checkpoint(the saved dict, else the directory)


def _quietly(action: Callable[[], None]) -> None:
    """Run a user hook at a trial's end; what it raises goes to the trial's stderr log."""
    try:
        action()
    except Exception:
        traceback.print_exc()


def _failure_from_exception(
    exc: BaseException, launch: TrialLaunch, session: TrialSession
) -> FailureRecord:
    kind = FailureKind.EXCEPTION
    name = type(exc).__name__
    message = str(exc)
    if isinstance(exc, SystemExit):
        message = f"the trainable called sys.exit({exc.code!r})"
    crash = _program_crash(exc, launch, session)
    if crash is not None:
        return scrub_failure(crash, launch.config)
    failure = FailureRecord(
        kind=kind,
        message=message,
        traceback="".join(traceback.format_exception(exc)),
        exception_type=f"{type(exc).__module__}.{name}"
        if type(exc).__module__ != "builtins"
        else name,
        attempt=launch.attempt,
        iteration=session.iteration,
        checkpoint=launch.checkpoint,
    )
    _trial_memory.memory_failure(exc, failure)  # OOM (MemoryError) or GPU_OOM, with the peak
    return scrub_failure(failure, launch.config)  # the trial's secrets stay in its process


def _program_crash(
    exc: BaseException, launch: TrialLaunch, session: TrialSession
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
        attempt=launch.attempt,
        iteration=session.iteration,
        checkpoint=launch.checkpoint,
    )


def _nothing() -> None:
    pass


def _enter_trial_dir(launch: TrialLaunch) -> Callable[[], None]:
    """Make the trial's folder the working directory, as Ray Tune does (relative paths
    such as ``open("artifact.txt", "w")`` land there); return the undo. Ray's
    TUNE_ORIG_WORKING_DIR names the directory it was."""
    try:
        previous: str | None = os.getcwd()
    except OSError:  # the worker's folder was removed: nothing to go back to
        previous = None
    orig = os.environ.get("TUNE_ORIG_WORKING_DIR")
    os.chdir(launch.trial_dir)
    if previous is not None:
        os.environ["TUNE_ORIG_WORKING_DIR"] = previous

    def restore() -> None:
        try:
            if previous is not None:
                os.chdir(previous)  # the worker runs its next trial from where it started
        except OSError:  # that folder is gone: stay
            pass
        if orig is None:
            os.environ.pop("TUNE_ORIG_WORKING_DIR", None)
        else:
            os.environ["TUNE_ORIG_WORKING_DIR"] = orig

    return restore


def _redirect_output(trial_dir: str, names: tuple[str, str]) -> Callable[[], None]:
    """Point fds 1 and 2 (and children's) at the trial's log files (`names`, relative to
    `trial_dir`; one file if both name it); return the undo."""
    paths = [os.path.join(trial_dir, name) for name in names]
    for name, path in zip(names, paths, strict=True):
        if os.path.dirname(name):  # e.g. "logs/out.txt" (the trial's folder exists)
            os.makedirs(os.path.dirname(path), exist_ok=True)
    out = open_log(paths[0])
    same = os.path.abspath(paths[1]) == os.path.abspath(paths[0])
    return point_output_at(out, out if same else open_log(paths[1]))


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def _has_children() -> bool:
    """Does this process have a child, alive or a zombie (one system call, no /proc walk)?"""
    try:
        os.waitpid(-1, os.WNOHANG)  # 0: a child runs; a pid: one was reaped, others may be
    except ChildProcessError:
        return False
    return True


def _kill_children() -> None:
    """No process a trial started outlives it, even when the worker is reused.

    Orphans (double forks, daemons in a session of their own) were re-parented to
    this worker, a subreaper, so the tree holds them too. The tree is killed again
    until it is empty: a process may fork while its parent is being killed.
    """
    if not _has_children():
        return  # the common case: the trial started no process
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
