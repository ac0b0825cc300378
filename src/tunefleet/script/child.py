"""Inside a script that `tunefleet run` started: `tunefleet.report` reaches the trial.

`python -m tunefleet.script.child SCRIPT ARGS...` is how a Python script runs
under `tunefleet run`: it installs a `ScriptSession` and runs SCRIPT as
``__main__`` with ``sys.argv = [SCRIPT, *ARGS]``, as ``python SCRIPT ARGS`` would.
The session turns `tunefleet.report(...)` into the same tagged line a script in
any language prints (``tunefleet-report: {...}``), written to the descriptor in
``TUNEFLEET_REPORT_FD`` rather than stdout (so redirected or captured stdout does
not lose reports), and waits for the trial's acknowledgement on
``TUNEFLEET_ACK_FD``: when `report` returns, a checkpoint directory it named has
been copied and may be deleted. `tunefleet.get_checkpoint()` is the checkpoint in
``TUNEFLEET_RESTORE_DIR``; `tunefleet.get_context()` names the trial.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from typing import Any

from tunefleet import session as session_mod
from tunefleet._metrics import json_data
from tunefleet.session import StopTrial, TrialSession, TuneContext
from tunefleet.storage.checkpoint import Checkpoint

REPORT_TAG = "tunefleet-report: "
CHECKPOINT_TAG = "tunefleet-checkpoint: "
REPORT_FD_ENV = "TUNEFLEET_REPORT_FD"
ACK_FD_ENV = "TUNEFLEET_ACK_FD"


class ScriptSession(TrialSession):
    """The session of a script run by `tunefleet run`: reports go to the parent trial."""

    def __init__(self, report_fd: int, ack_fd: int) -> None:
        env = os.environ
        context = TuneContext(
            trial_id=env.get("TUNEFLEET_TRIAL_ID", ""),
            trial_name=env.get("TUNEFLEET_TRIAL_NAME", ""),
            trial_dir=env.get("TUNEFLEET_TRIAL_DIR", ""),
            experiment_name=env.get("TUNEFLEET_EXPERIMENT_NAME", ""),
            attempt=int(env.get("TUNEFLEET_ATTEMPT", "0") or 0),
            resources=json.loads(env.get("TUNEFLEET_TRIAL_RESOURCES", "{}") or "{}"),
        )
        super().__init__(
            context=context,
            send=lambda batch: None,  # reports take `_write` instead
            poll_control=lambda block: None,
            checkpoint=env.get("TUNEFLEET_RESTORE_DIR") or None,
            iteration=int(env.get("TUNEFLEET_ITERATION", "0") or 0),
            time_total=0.0,
            sync=True,
            stop_criteria={},
        )
        self._out = os.fdopen(report_fd, "w", encoding="utf-8", closefd=True)
        self._ack = os.fdopen(ack_fd, "r", encoding="utf-8", closefd=True)

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        line = dict(metrics)
        if checkpoint is not None:
            if checkpoint.filesystem is not None:
                raise ValueError(
                    "tunefleet.report(checkpoint=...) in a script run by `tunefleet run` takes "
                    f"a local directory, not {checkpoint.path!r} on a remote file system"
                )
            line["checkpoint"] = os.path.abspath(checkpoint.path)
        text = json.dumps(json_data(line), allow_nan=True)  # NaN travels as NaN
        try:
            self._out.write(REPORT_TAG + text + "\n")
            self._out.flush()
            ack = self._ack.readline()
        except BrokenPipeError:
            ack = ""
        if not ack.startswith("ok"):  # the trial is gone or stopped this script
            raise StopTrial()
        self.iteration += 1

    def persist(self, checkpoint: Checkpoint | str, iteration: int) -> str:
        raise RuntimeError("a script run by `tunefleet run` persists checkpoints by report()")

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        for stream in (self._out, self._ack):
            try:
                stream.close()
            except OSError:
                pass


def install_session() -> bool:
    """Install a `ScriptSession` if this process runs under `tunefleet run`; say whether."""
    report_fd, ack_fd = os.environ.get(REPORT_FD_ENV), os.environ.get(ACK_FD_ENV)
    if not report_fd or not ack_fd or session_mod._session is not None:
        return False
    try:
        session = ScriptSession(int(report_fd), int(ack_fd))
    except (OSError, ValueError):
        return False  # descriptors not inherited (e.g. a grandchild that closed them)
    session_mod._set_session(session)
    return True


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tunefleet.script.child SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    install_session()
    try:
        runpy.run_path(script, run_name="__main__")
    except StopTrial:
        sys.exit(0)  # the trial is over; not an error of the script
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # as `python SCRIPT` shows it: without the frames above it
        _print_from(exc, os.path.abspath(script))
        sys.exit(1)


def _print_from(exc: BaseException, script: str) -> None:
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


if __name__ == "__main__":
    main()
