"""Waiting for worker processes to exit (`backends/_exits.wait_all`): real processes,
woken by their exits (process file descriptors), or Popen's own wait where there are none."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tunefleet.backends._exits import wait_all

_WAITS_FOR_STDIN = [sys.executable, "-c", "import sys; sys.stdin.read()"]


def _start(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(_WAITS_FOR_STDIN, stdin=subprocess.PIPE) for _ in range(n)]


def _release(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()  # it reads EOF and exits


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "without pidfd"])
def test_returns_once_every_process_has_exited_and_is_reaped(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here")
    procs = _start(3)
    _release(procs[:2])
    wait_all(procs[:2], 60.0)
    assert [p.returncode for p in procs[:2]] == [0, 0]
    assert procs[2].poll() is None  # not waited for: still running
    _release(procs[2:])
    wait_all(procs, 60.0)  # one reaped already in the list
    assert [p.returncode for p in procs] == [0, 0, 0]


def _pidfds() -> int:
    """Process descriptors open in this process (other threads' files do not count)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[pidfd]"
        except OSError:
            continue  # closed meanwhile
    return count


def test_gives_up_after_the_timeout_and_leaves_no_descriptor_open() -> None:
    procs = _start(2)
    before = _pidfds()
    wait_all(procs, 0.05)  # they wait for their stdin: neither exits
    assert [p.poll() for p in procs] == [None, None]
    assert _pidfds() == before
    _release(procs)
    wait_all(procs, 60.0)
    assert [p.returncode for p in procs] == [0, 0]
