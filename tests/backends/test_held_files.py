"""Kernel files read or written at every trial through a descriptor kept open
(`backends/_files.HeldFile`): each read sees the file as it is now, and a forked child
reads its own /proc/self, not its parent's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunefleet.backends import _trial_memory
from tunefleet.backends._files import HeldFile


def test_each_read_sees_the_file_as_it_is_now(tmp_path: Path) -> None:
    path = tmp_path / "value"
    path.write_text("1\n")
    held = HeldFile(str(path))
    assert held.read() == "1\n"
    path.write_text("22\n")  # the same file, rewritten in place
    assert held.read() == "22\n"
    held.close()


def test_a_write_goes_through_the_held_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "knob"
    path.write_text("")
    held = HeldFile(str(path), "w")
    held.write("5")
    assert path.read_text() == "5"
    held.close()


def test_a_missing_file_reads_as_none_and_a_write_raises(tmp_path: Path) -> None:
    assert HeldFile(str(tmp_path / "absent")).read() is None
    with pytest.raises(OSError):
        HeldFile(str(tmp_path / "absent"), "w").write("1")


def _status_pid() -> int:
    text = _trial_memory._STATUS.read() or ""
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("Pid:")))


def test_a_forked_child_reads_its_own_proc_self() -> None:
    assert _status_pid() == os.getpid()  # opened here, in the parent
    pid = os.fork()
    if pid == 0:  # the child: its /proc/self/status, not the parent's
        os._exit(0 if _status_pid() == os.getpid() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _status_pid() == os.getpid()  # the parent's descriptor is untouched
