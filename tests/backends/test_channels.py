"""The worker channel's helpers (backends/_protocol.py): several messages in one write,
and the channels a backend waits on, kept registered between waits. On real socket
pairs, read with `Connection.recv` as the backends read them."""

from __future__ import annotations

import pickle
import socket
import struct
import subprocess
import sys
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

import pytest

from tunefleet.backends._base import FinishHow
from tunefleet.backends._protocol import Readable, TrialFinished, TrialResults, send_together


def test_messages_sent_together_are_read_one_by_one_in_order() -> None:
    here, there = Pipe()
    last = TrialResults("t1", 1, [({"loss": 0.5, "training_iteration": 9}, None)])
    end = TrialFinished("t1", 1, FinishHow.RETURNED, None)
    send_together(here, [last, end])
    assert there.recv() == last
    assert there.poll(0)  # both arrived with the one write
    assert there.recv() == end
    assert not there.poll(0)


def test_a_message_too_big_for_one_frame_is_sent_as_send_bytes_would() -> None:
    here, there = Pipe()
    big = TrialResults("t1", 1, [({"blob": b"x" * (17 << 20)}, None)])  # over 16 MiB
    end = TrialFinished("t1", 1, FinishHow.RETURNED, None)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.extend([there.recv(), there.recv()]))
    reader.start()  # the socket's buffer is far smaller: someone must read as it is written
    send_together(here, [big, end])
    reader.join(60)
    assert got == [big, end]


def test_readable_names_the_channels_with_a_message_or_closed() -> None:
    (a_here, a_there), (b_here, b_there) = Pipe(), Pipe()
    readable = Readable()
    readable.add(a_here)
    readable.add(b_here)
    assert readable.wait(0) == []
    b_there.send("hello")
    assert readable.wait(10) == [b_here]
    assert b_here.recv() == "hello"
    a_there.close()  # the other end is gone: readable, and recv says so (EOF)
    assert readable.wait(10) == [a_here]
    readable.remove(a_here)
    readable.remove(a_here)  # twice is harmless
    a_here.close()
    assert readable.wait(0) == []


def test_more_says_whether_one_channel_has_another_message() -> None:
    here, there = Pipe()
    readable = Readable()
    readable.add(here)
    assert not readable.more(here)
    there.send(1)
    there.send(2)
    assert readable.more(here) and here.recv() == 1
    assert readable.more(here) and here.recv() == 2
    assert not readable.more(here)


def test_receive_reads_every_message_that_arrived_in_order() -> None:
    here, there = Pipe()
    readable = Readable()
    readable.add(here)
    assert readable.receive(here) == []  # nothing yet: it does not block
    last = TrialResults("t1", 1, [({"loss": 0.5, "training_iteration": 9}, None)])
    end = TrialFinished("t1", 1, FinishHow.RETURNED, None)
    there.send("first")
    send_together(there, [last, end])
    assert readable.wait(10) == [here]
    assert readable.receive(here) == ["first", last, end]
    assert readable.receive(here) == []


def test_receive_reads_a_message_larger_than_one_read_to_its_end() -> None:
    here, there = Pipe()
    readable = Readable()
    readable.add(here)
    big = {"blob": b"x" * (3 << 20)}  # far more than the socket holds: written as read

    def write() -> None:
        there.send(big)
        there.send("after")

    writer = threading.Thread(target=write)
    writer.start()
    got: list[Any] = []
    while len(got) < 2:
        readable.wait(60)
        got.extend(readable.receive(here))
    writer.join(60)
    assert got == [big, "after"]


def test_receive_reads_the_long_header_of_a_huge_message() -> None:
    # over 2 GiB, Connection writes a length of -1 and then an 8-byte one: read as such
    here, there = socket.socketpair()
    readable = Readable()
    conn = Connection(here.detach())
    readable.add(conn)
    payload = pickle.dumps({"n": 1})
    there.sendall(struct.pack("!i", -1) + struct.pack("!Q", len(payload)) + payload)
    readable.wait(10)
    assert readable.receive(conn) == [{"n": 1}]


def test_a_message_cut_short_by_the_senders_death_is_dropped_and_the_end_is_seen() -> None:
    here, there = socket.socketpair()
    readable = Readable()
    conn = Connection(here.detach())
    readable.add(conn)
    whole = pickle.dumps("whole")
    there.sendall(struct.pack("!i", len(whole)) + whole + struct.pack("!i", 100) + b"cut")
    there.close()
    readable.wait(10)
    assert readable.receive(conn) == ["whole"]
    readable.wait(10)
    with pytest.raises(EOFError):
        readable.receive(conn)


def test_a_channel_added_with_its_process_is_woken_by_its_exit_while_still_open() -> None:
    # a trial's forked child can hold the worker's channel open after the worker died:
    # the backend learns of the death from the process, not from the channel
    here, there = Pipe()  # `there` stays open in this process: the channel never closes
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    readable = Readable()
    readable.add(here, proc.pid)
    if not readable.watches_exits:
        pytest.skip("no pidfd on this system: the backend asks each process instead")
    try:
        assert readable.wait(0) == []
        assert not readable.exited(here)
        proc.kill()
        assert readable.wait(60) == [here]
        assert readable.exited(here)
        assert readable.receive(here) == []  # no message, and the channel is not closed
    finally:
        proc.kill()
        proc.wait()
    readable.remove(here)  # closes its pidfd
    assert readable.wait(0) == []
    there.close()
