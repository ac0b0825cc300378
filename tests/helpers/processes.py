"""Process checks shared by the tests."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def claim(path: str | Path) -> bool:
    """Create `path`; True for the one caller that made it, False for every other.

    A flag that fails "the first trial only" must be claimed this way: two trials that
    run together can both find a plain ``exists()`` false and both fail.
    """
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def meet(config: dict[str, Any], name: object) -> bool:
    """Wait in ``config["meet"]`` (a folder) until ``config["population"]`` trials have
    arrived, at most 120 s; say whether they all did. Without ``"meet"``, return at once.

    Trials that must run together (a PBT population, fractional GPUs sharing a device)
    meet here, an event, so a busy machine's slow starts cannot split them.
    """
    folder = config.get("meet")
    if not folder:
        return False
    Path(folder, str(name)).touch()
    deadline = time.monotonic() + 120
    while len(os.listdir(folder)) < config["population"]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def meeting(tmp_path: Path, population: int) -> dict[str, Any]:
    """The config entries that make `population` trials `meet` in a fresh folder."""
    folder = tmp_path / "meet"
    folder.mkdir()
    return {"meet": str(folder), "population": population}


def default_sigint() -> None:
    """`preexec_fn` for a child the test stops with SIGINT (as Ctrl-C would).

    A suite started in the background (``make test &``) ignores SIGINT, and a child
    inherits an ignored signal: a Python child then never raises KeyboardInterrupt,
    and bash never runs its INT trap. The child gets the default back.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
