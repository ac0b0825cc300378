"""The trial side on Ray: an actor that runs the trial loop.

The trial loop (``backends/_loop.py``) is the same code that runs in a local worker
process: it runs function and class trainables, turns ``report()`` into messages,
saves checkpoints and builds failure records. Here it runs in a thread of a Ray
actor and talks to the actor's methods through a pipe:

    driver --start/send--> actor --pipe--> worker loop (thread) --pipe--> actor
    driver <--events (long poll)-- actor

The driver keeps one ``events`` call outstanding per actor; it returns as soon as the
worker has something to say (or after ``timeout`` seconds with nothing), so results
reach the driver without polling the actor in a busy loop. The actor is threaded
(``max_concurrency`` > 1): ``send`` runs while ``events`` waits. Ray does not keep the
order of calls to a threaded actor, so each ``send`` carries a sequence number and the
messages reach the worker loop in the driver's order.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from multiprocessing import Pipe

from tunefleet.backends._protocol import FromWorker, Gone, Start, ToWorker, TrialResults

_LINGER_S = 0.02  # after a result, gather what follows this long (not for sync trials)


class TrialActor:
    """Runs trials one after another, like a local worker process; made remote by the backend.

    Args:
        payload: the cloudpickled ``WorkerSetup``, put in Ray's object store once for
            all actors.
        sys_path: the driver's ``sys.path``; entries that exist here are added, so a
            trainable defined in a module next to the driver's script imports on a
            single machine or a shared file system.
    """

    def __init__(self, payload: bytes, sys_path: list[str]) -> None:
        sys.path[:0] = [p for p in sys_path if p not in sys.path and os.path.isdir(p)]
        import cloudpickle

        from tunefleet.backends._loop import TrialLoop

        self._conn, loop_end = Pipe()
        loop = TrialLoop(loop_end, cloudpickle.loads(payload))
        self._order = threading.Condition()
        self._next = 0  # the sequence number of the next message to pass on
        self._sync = False  # the running trial waits for a decision after each result
        self._recv_lock = threading.Lock()
        self._thread = threading.Thread(target=loop.serve, name="tunefleet-trials", daemon=True)
        self._thread.start()

    def where(self) -> tuple[str, int, list[str]]:
        """(Ray node id, pid, the GPU ids Ray gave this actor)."""
        import ray

        context = ray.get_runtime_context()
        gpus = context.get_accelerator_ids().get("GPU", [])
        return context.get_node_id(), os.getpid(), [str(g) for g in gpus]

    def send(self, seq: int, msg: ToWorker) -> None:
        """Pass message `seq` (0, 1, ...) to the trial loop: start, stop, decision or exit."""
        if isinstance(msg, Start):  # the GPUs Ray gave this actor (it set CUDA_VISIBLE_DEVICES)
            msg = msg._replace(gpu_ids=tuple(self.where()[2]))
            self._sync = msg.launch.sync
        with self._order:
            self._order.wait_for(lambda: self._next == seq)
            self._conn.send(msg)
            self._next += 1
            self._order.notify_all()

    def events(
        self, timeout: float, inbox: list[tuple[int, ToWorker]] | None = None
    ) -> list[FromWorker]:
        """The trial loop's messages: all that are ready, waiting up to `timeout` for one.

        `inbox` is numbered messages to pass on first (a start rides on this call, which
        saves a round trip). After a result, what follows within `_LINGER_S` comes along
        (more results, the trial's end), so a short trial costs one call, not several;
        a trial that waits for a decision after each result (sync) gets no delay.
        """
        for seq, msg in inbox or []:
            self.send(seq, msg)
        out: list[FromWorker] = []
        with self._recv_lock:
            if not self._conn.poll(timeout):
                return out if self._thread.is_alive() else [Gone()]  # told to exit
            until = time.monotonic() + (0.0 if self._sync else _LINGER_S)
            while True:
                out.append(self._conn.recv())
                ended = not isinstance(out[-1], TrialResults)  # the trial (or loop) ended
                if not self._conn.poll(0.0 if ended else max(0.0, until - time.monotonic())):
                    break
        return out
