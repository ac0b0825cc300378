"""The worker channel's helpers (backends/_protocol.py): several messages in one write,
and the channels a backend waits on, kept registered between waits. On real socket
pairs, read with `Connection.recv` as the backends read them."""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from typing import Any

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
