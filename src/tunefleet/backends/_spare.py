"""A trial's folder and log files, made while the worker waits for its next trial.

Making a folder and creating its two log files is the costliest part of starting a
short trial on some disks: on this ext4 volume a file created in a folder just made
costs 40-900 us of CPU (by the disk's state), the folder as much again, while renaming a
folder costs 30-70 us. A worker that has run a trial makes the next one's folder, with
its log files open, in the time it waits for the driver's next `Start`, under a name of
its own (``spare-<pid>`` beside the trainable, in the experiment's ``.tunefleet``);
the next trial's start renames it into place and points its output at the open files.

Used only where it is the same thing: the trial's folder does not exist yet (not a
restart, nor made by the driver for a callback), its log files are plain names in it,
and the rename succeeds (the same filesystem); otherwise the spare is removed and the
trial starts as before. After two misses in a row (the driver makes every folder, for
a callback's `on_trial_start`, or paused trials come back) the worker lets 8 trials
start without one, then tries again, doubling the pause up to 64 trials while it
misses. The worker removes its spare when it exits; the local backend sweeps those of
killed workers at the end of the run (`sweep`).
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Callable

_PREFIX = "spare-"
_MISSES = 2  # spares in a row that could not be used: pause making them
_PAUSE = 8  # trials started without a spare after that (doubled per miss, up to _LONGEST)
_LONGEST = 64


class SpareFolder:
    """One worker's spare trial folder, under `home` (a folder of the experiment)."""

    def __init__(self, home: str) -> None:
        self._path = os.path.join(home, f"{_PREFIX}{os.getpid()}")
        self._names: tuple[str, str] | None = None  # the log files the spare holds
        self._fds: tuple[int, int] | None = None  # open on them (one fd if one file)
        self._misses = 0  # spares in a row that could not be used
        self._pause = 0  # waits left without a spare

    @property
    def ready(self) -> bool:
        return self._fds is not None

    def prepare(self, names: tuple[str, str]) -> None:
        """Make the spare folder with the log files `names` open in it (nothing when the
        names are not plain file names, or the folder cannot be made)."""
        if self._fds is not None:
            return
        if self._pause > 0:
            self._pause -= 1
            return
        if any(os.sep in n or n in ("", ".", "..") for n in names):
            return
        out = err = -1
        try:
            if os.path.lexists(self._path):  # left by an earlier worker with this pid
                shutil.rmtree(self._path)
            os.mkdir(self._path)
            out = open_log(os.path.join(self._path, names[0]))
            err = out if names[1] == names[0] else open_log(os.path.join(self._path, names[1]))
        except OSError:
            _close(out, err)
            shutil.rmtree(self._path, ignore_errors=True)
            return
        self._names, self._fds = names, (out, err)

    def take(self, trial_dir: str, names: tuple[str, str]) -> Callable[[], None] | None:
        """Rename the spare into `trial_dir` and point fds 1 and 2 at its log files;
        return the undo (as `_loop._redirect_output` does). None, with the spare removed,
        when it cannot stand for that folder: the trial then makes its own."""
        fds, self._fds = self._fds, None
        if fds is None:
            return None
        try:
            if names != self._names or os.path.lexists(trial_dir):
                raise FileExistsError(trial_dir)
            os.rename(self._path, trial_dir)
        except OSError:  # made already, another filesystem, or its parent is missing
            self._misses += 1
            if self._misses >= _MISSES:
                self._pause = min(_PAUSE << (self._misses - _MISSES), _LONGEST)
            _close(*fds)
            shutil.rmtree(self._path, ignore_errors=True)
            return None
        self._misses = 0
        return point_output_at(*fds)

    def discard(self) -> None:
        """Remove the spare (the worker exits)."""
        fds, self._fds = self._fds, None
        if fds is not None:
            _close(*fds)
            shutil.rmtree(self._path, ignore_errors=True)


def open_log(path: str) -> int:
    """A trial's log file at `path`, opened (made if missing) for appending."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def point_output_at(out: int, err: int) -> Callable[[], None]:
    """Point fds 1 and 2 (and children's) at `out` and `err` (closed here; one file if
    they are the same fd); return the undo."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    os.dup2(out, 1)
    os.dup2(err, 2)
    _close(out, err)

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])

    return restore


def sweep(home: str) -> None:
    """Remove the spare folders under `home` (every worker has exited: those left are
    of workers that were killed)."""
    for path in glob.glob(os.path.join(home, f"{_PREFIX}*")):
        shutil.rmtree(path, ignore_errors=True)


def _close(out: int, err: int) -> None:
    for fd in {out, err}:
        if fd >= 0:
            os.close(fd)
