"""A trial that runs a program: the trainable behind `tunefleet run`.

`ScriptTrainable(ScriptCommand(...))` is a function trainable. Each trial (each
attempt) starts the program as a child process and relays its metrics:

- The config reaches it as arguments (``--lr 0.01 --model.width 64``, or Hydra's
  ``lr=0.01``, or none with ``config_style="json"``), always as a JSON file whose
  path is in ``TUNEFLEET_CONFIG_FILE`` and as JSON in ``TUNEFLEET_CONFIG``.
- Metrics come back as lines ``tunefleet-report: {"val_loss": 0.3}`` on its stdout
  (any language), or on the descriptor in ``TUNEFLEET_REPORT_FD`` (where
  `tunefleet.report` in a Python script writes them, see `script.child`). Other
  stdout and stderr lines go on to the trial's ``stdout.log`` / ``stderr.log``.
- After each report the trial writes ``ok ITERATION`` to ``TUNEFLEET_ACK_FD`` (a
  program may read it to wait until its checkpoint has been copied), or ``stop``.
- ``TUNEFLEET_CHECKPOINT_DIR`` is a fresh folder; a report with ``"checkpoint":
  true`` (that folder) or ``"checkpoint": "PATH"``, or a line ``tunefleet-checkpoint:
  {"path": ...}`` before the report, makes the folder the trial's checkpoint of
  that iteration. On a restart or a PBT exploit ``TUNEFLEET_RESTORE_DIR`` is the
  checkpoint to resume from (read it, do not change it).
- A non-zero exit fails the trial with the program's last stderr lines as the
  cause. A stop (scheduler, stop condition, budget) sends SIGTERM to the program
  and its descendants, then SIGKILL after `kill_grace_s`.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from tunefleet import session as session_mod
from tunefleet._metrics import flatten
from tunefleet.backends._exits import wait_all
from tunefleet.script.child import (
    ACK_FD_ENV,
    CHECKPOINT_TAG,
    REPORT_FD_ENV,
    REPORT_TAG,
    install_session,
)
from tunefleet.session import SESSION_HOOK_ENV
from tunefleet.storage.checkpoint import Checkpoint

CONFIG_STYLES = ("args", "hydra", "json")
CONFIG_FILE = "tunefleet_config.json"
SCRATCH_DIR = "script_checkpoint"
_STDERR_LINES = 30
_DRAIN_S = 2.0  # after the program exited, how long its leftover children may hold the pipes


class ScriptError(RuntimeError):
    """The program failed: a non-zero exit or a signal (then `exit_code` or `signal` is
    set, and the trial's failure is a CRASH), or it broke the report protocol."""

    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None = None,
        signal: str | None = None,
        stderr_tail: str | None = None,
        summary: str | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_code, self.signal, self.stderr_tail = exit_code, signal, stderr_tail
        self.summary = summary or message  # one line: how it ended and its last stderr line


@dataclass(frozen=True)
class ScriptCommand:
    """What each trial runs.

    Args:
        argv: the program and its own arguments; for a Python script, the script
            path first (it runs with this interpreter, ``sys.executable``).
        python: run ``argv[0]`` as a Python script through `tunefleet.script.child`, so
            `tunefleet.report` inside it reaches the trial.
        config_style: ``"args"`` (``--key value``, nested keys dotted), ``"hydra"``
            (``key=value``) or ``"json"`` (no arguments; read TUNEFLEET_CONFIG_FILE).
        working_dir: where it runs; None: the trial's directory.
        env: more environment variables for it.
        kill_grace_s: seconds between SIGTERM and SIGKILL when the trial stops it.
        launch_dir: where `tunefleet run` was started (``TUNEFLEET_LAUNCH_DIR``).
    """

    argv: list[str]
    python: bool = False
    config_style: str = "args"
    working_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    kill_grace_s: float = 3.0
    launch_dir: str = ""


class ScriptTrainable:
    """A function trainable that runs `command` once per trial attempt."""

    def __init__(self, command: ScriptCommand) -> None:
        self.command = command
        self.__name__ = Path(command.argv[0]).name  # the trainable's name in the store

    def __call__(self, config: dict[str, Any]) -> None:
        checkpoint = session_mod.get_checkpoint()
        if checkpoint is None:
            _Run(self.command, config, None).run()
            return
        with checkpoint.as_directory() as restore_dir:  # a remote one is downloaded
            _Run(self.command, config, restore_dir).run()


def config_args(config: dict[str, Any], style: str) -> list[str]:
    """The config as command-line arguments: ``--lr 0.01 --model.width 64`` or ``lr=0.01``."""
    if style == "json":
        return []
    out: list[str] = []
    for key, value in flatten(config, ".").items():
        text = value if isinstance(value, str) else json.dumps(value)
        out += [f"--{key}", text] if style == "args" else [f"{key}={text}"]
    return out


class _Run:
    """One attempt: start the program, relay its lines, end it."""

    def __init__(self, command: ScriptCommand, config: dict[str, Any], restore: str | None):
        self.command = command
        self.config = config
        self.restore = restore
        self.context = session_mod.get_context()
        self.name = Path(command.argv[0]).name
        self.cwd = command.working_dir or self.context.trial_dir
        self.scratch = os.path.join(self.context.trial_dir, SCRATCH_DIR)
        self.pending_checkpoint: str | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ack: int | None = None

    def run(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        os.makedirs(self.scratch)
        os.makedirs(self.cwd, exist_ok=True)
        env = self._env()
        report_r, report_w = os.pipe()
        ack_r, ack_w = os.pipe()
        os.set_blocking(ack_w, False)  # a program that never reads acks must not block us
        self.ack = ack_w
        env.update({REPORT_FD_ENV: str(report_w), ACK_FD_ENV: str(ack_r)})
        env[SESSION_HOOK_ENV] = f"{install_session.__module__}:{install_session.__name__}"
        try:
            self.proc = subprocess.Popen(
                self._argv(),
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(report_w, ack_r),
            )
        except OSError as exc:
            for fd in (report_r, report_w, ack_r, ack_w):
                os.close(fd)
            raise ScriptError(f"could not start {self.command.argv[0]}: {exc}") from exc
        os.close(report_w)
        os.close(ack_r)
        try:
            self._relay(report_r)
            while (code := self.proc.poll()) is None:  # it closed its output, runs on
                _raise_if_stopped()
                time.sleep(0.05)
        except BaseException:
            self._say("stop")
            _terminate(self.proc, self.command.kill_grace_s)
            raise
        finally:
            os.close(report_r)
            os.close(ack_w)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
        if code != 0:
            raise self._failure(code)
        if self.pending_checkpoint is not None:
            print(
                f"tunefleet: {self.name} ended after a {CHECKPOINT_TAG.strip()} line with no "
                "report after it; that checkpoint was not kept",
                file=sys.stderr,
            )

    def _argv(self) -> list[str]:
        args = config_args(self.config, self.command.config_style)
        if self.command.python:
            return [sys.executable, "-m", "tunefleet.script.child", *self.command.argv, *args]
        return [*self.command.argv, *args]

    def _env(self) -> dict[str, str]:
        ctx = self.context
        config_text = json.dumps(self.config, default=str)
        config_file = os.path.join(ctx.trial_dir, CONFIG_FILE)
        tmp = config_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(config_text)
        os.replace(tmp, config_file)
        env = dict(os.environ)
        env.pop("TUNEFLEET_RESTORE_DIR", None)
        env.update(self.command.env)
        env.update(
            {
                "TUNEFLEET_CONFIG": config_text,
                "TUNEFLEET_CONFIG_FILE": config_file,
                "TUNEFLEET_CHECKPOINT_DIR": self.scratch,
                "TUNEFLEET_TRIAL_ID": ctx.trial_id,
                "TUNEFLEET_TRIAL_NAME": ctx.trial_name,
                "TUNEFLEET_TRIAL_DIR": ctx.trial_dir,
                "TUNEFLEET_EXPERIMENT_NAME": ctx.experiment_name,
                "TUNEFLEET_ATTEMPT": str(ctx.attempt),
                "TUNEFLEET_TRIAL_RESOURCES": json.dumps(ctx.resources),
                "TUNEFLEET_ITERATION": str(_iteration()),
                "TUNEFLEET_LAUNCH_DIR": self.command.launch_dir,
                "PYTHONUNBUFFERED": "1",  # a Python program's tagged prints arrive at once
            }
        )
        if self.restore is not None:
            env["TUNEFLEET_RESTORE_DIR"] = self.restore
        if self.command.python:  # the helper module must import, whatever the cwd
            root = str(Path(__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
        return env

    # -- the program's output ---------------------------------------------------------
    def _relay(self, report_fd: int) -> None:
        assert self.proc is not None and self.proc.stdout and self.proc.stderr
        streams: dict[int, tuple[IO[str], bool]] = {
            self.proc.stdout.fileno(): (sys.stdout, True),
            self.proc.stderr.fileno(): (sys.stderr, False),
            report_fd: (sys.stdout, True),
        }
        partial = {fd: b"" for fd in streams}
        with selectors.DefaultSelector() as selector:
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            exited_at: float | None = None
            while selector.get_map():
                for key, _ in selector.select(timeout=0.5):
                    fd = int(key.fd)
                    chunk = os.read(fd, 65536)
                    out, tagged = streams[fd]
                    if not chunk:
                        selector.unregister(fd)
                        if partial[fd]:
                            self._line(partial[fd], out, tagged)
                        continue
                    *lines, partial[fd] = (partial[fd] + chunk).split(b"\n")
                    for line in lines:
                        self._line(line, out, tagged)
                _raise_if_stopped()  # a program that reports rarely is stopped at once
                if exited_at is None and self.proc.poll() is not None:
                    exited_at = time.monotonic()
                if exited_at is not None and time.monotonic() - exited_at > _DRAIN_S:
                    break  # a child it left behind holds the pipes; the worker kills it

    def _line(self, raw: bytes, out: IO[str], tagged: bool) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if tagged:
            for tag, handle in ((REPORT_TAG, self._report), (CHECKPOINT_TAG, self._checkpoint)):
                at = text.find(tag)
                if at >= 0:  # text printed before the tag without a newline stays output
                    if text[:at].strip():
                        print(text[:at], file=out, flush=True)
                    handle(self._payload(tag, text[at + len(tag) :]))
                    return
        else:
            self.stderr_tail.append(text)
        print(text, file=out, flush=True)

    def _payload(self, tag: str, text: str) -> dict[str, Any]:
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ScriptError(
                f"{self.name} printed a line {tag.strip()} {text[:200]} that is not JSON "
                f"({exc.msg} at column {exc.colno + len(tag)}); write one JSON object per line"
            ) from None
        if not isinstance(data, dict):
            raise ScriptError(
                f"{self.name} printed {tag.strip()} {text[:200]}: the JSON must be an object "
                '(e.g. {"val_loss": 0.3}), not ' + type(data).__name__
            )
        return data

    def _checkpoint(self, data: dict[str, Any]) -> None:
        path = data.get("path", True)
        self.pending_checkpoint = self._checkpoint_path(path, CHECKPOINT_TAG.strip() + " path")
        self._say("ok")

    def _report(self, metrics: dict[str, Any]) -> None:
        marked = metrics.pop("checkpoint", None)
        path = self._checkpoint_path(marked, "checkpoint") if marked not in (None, False) else None
        path = path or self.pending_checkpoint
        self.pending_checkpoint = None
        checkpoint = Checkpoint.from_directory(path) if path else None
        session_mod.report(metrics, checkpoint=checkpoint)  # may raise StopTrial
        if path and Path(self.scratch).resolve() in Path(path).resolve().parents:
            shutil.rmtree(path, ignore_errors=True)  # a per-report folder: copied, not needed
        self._say(f"ok {_iteration()}")

    def _checkpoint_path(self, value: Any, what: str) -> str:
        if value is True:
            return self.scratch
        if not isinstance(value, str) or not value:
            raise ScriptError(
                f"{self.name} reported {what}={value!r}: use true (TUNEFLEET_CHECKPOINT_DIR) "
                "or the path of a directory"
            )
        path = os.path.join(self.cwd, value)
        if not os.path.isdir(path):
            raise ScriptError(f"{self.name} reported {what} {value!r}: no such directory")
        return path

    def _say(self, text: str) -> None:
        if self.ack is None:
            return
        try:
            os.write(self.ack, (text + "\n").encode())
        except (BlockingIOError, BrokenPipeError):
            pass  # the program does not read acknowledgements, or has exited

    def _failure(self, code: int) -> ScriptError:
        signame = None
        if code < 0:
            try:
                signame = signal.Signals(-code).name
            except ValueError:
                signame = f"signal {-code}"
            how = f"was killed by {signame}"
        else:
            how = f"exited with code {code}"
        tail = [line for line in self.stderr_tail if line.strip()]
        text = "\n".join(tail) or None
        if not tail:
            message = f"{self.name} {how} (nothing on stderr)"
        else:
            message = f"{self.name} {how}; the last lines of its stderr:\n{text}"
        return ScriptError(
            message,
            exit_code=code if code > 0 else None,
            signal=signame,
            stderr_tail=text,
            summary=f"{self.name} {how}: {tail[-1].strip()}" if tail else message,
        )


def _raise_if_stopped() -> None:
    """Between reports, act on a stop or pause the driver sent (as report() would)."""
    session = session_mod._session
    if session is not None:
        session.poll_stop()


def _iteration() -> int:
    session = session_mod._session
    return session.iteration if session is not None else 0


def _terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the program and its descendants, SIGKILL what is left after `grace_s`."""
    try:
        tree = [psutil.Process(proc.pid)]
        tree += tree[0].children(recursive=True)
    except psutil.Error:
        tree = []
    for p in tree:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    wait_all([proc], grace_s)
    survivors = []
    for p in tree:
        try:
            survivors += p.children(recursive=True)
        except psutil.Error:
            pass
    for p in [*tree, *survivors]:
        try:
            p.kill()  # psutil checks the pid still names the same process
        except psutil.Error:
            pass
    proc.wait()
    psutil.wait_procs(tree[1:], timeout=1.0)
