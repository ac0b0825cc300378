"""The local backend: a pool of reusable worker processes on this machine.

Each worker is a fresh interpreter started in its own session, so it leads its
own process group: stopping a trial that does not stop when asked kills the
whole group (children and grandchildren too). Workers load the trainable once
and run trial after trial; a worker that dies is replaced.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from tunefleet.backends._base import Backend, Event, Failed, Finished, Results, TrialLaunch
from tunefleet.backends.local._resources import (
    ResourcePool,
    detect_cpus,
    detect_gpus,
    detect_memory,
)
from tunefleet.trial import FailureKind, FailureRecord

_STDERR_TAIL_BYTES = 4000
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    conn: Connection
    gpus: tuple[str, ...]
    launch: TrialLaunch | None = None
    held: dict[str, float] = field(default_factory=dict)
    stop_deadline: float | None = None  # when a stop request turns into SIGTERM
    kill_deadline: float | None = None  # when SIGTERM turns into SIGKILL
    stopping: bool = False
    ready: bool = False
    retiring: bool = False  # told to exit; never given another trial

    @property
    def pid(self) -> int:
        return self.proc.pid


class LocalBackend(Backend):
    """Runs trials in worker processes on this machine.

    Args:
        trainable: the (possibly wrapped) trainable; pickled once for all workers.
        experiment_name: shown to trials by `get_context()`.
        experiment_path: the experiment directory (worker logs go to `.tunefleet/`).
        reuse_actors: keep workers (and class-trainable instances) across trials.
        resources: override the detected totals, and declare custom resources.
        stop_grace_s: how long a trial may take to stop when asked, before SIGTERM.
        kill_grace_s: how long after SIGTERM before SIGKILL.
    """

    def __init__(
        self,
        *,
        trainable: Any,
        experiment_name: str,
        experiment_path: str,
        reuse_actors: bool = True,
        resources: dict[str, float] | None = None,
        stop_grace_s: float = 5.0,
        kill_grace_s: float = 3.0,
        memory_usage_threshold: float = 0.95,
    ) -> None:
        gpu_ids = detect_gpus()
        total = {"cpu": float(detect_cpus()), "gpu": float(len(gpu_ids)), "memory": detect_memory()}
        total.update(resources or {})
        if total["gpu"] < len(gpu_ids):
            gpu_ids = gpu_ids[: int(total["gpu"])]
        self._pool = ResourcePool(total, gpu_ids)
        self._reuse = reuse_actors
        self._memory_usage_threshold = memory_usage_threshold  # node watcher (memory.py)
        self._stop_grace = stop_grace_s
        self._kill_grace = kill_grace_s
        self._workers: dict[Connection, _Worker] = {}
        self._by_trial: dict[str, _Worker] = {}
        self._meta_dir = os.path.join(experiment_path, ".tunefleet")
        os.makedirs(self._meta_dir, exist_ok=True)
        self._trainable_file = os.path.join(self._meta_dir, "trainable.pkl")
        self._log = open(os.path.join(self._meta_dir, "workers.log"), "ab")  # noqa: SIM115
        self.fatal: FailureRecord | None = None
        _write_trainable(self._trainable_file, trainable, experiment_name, reuse_actors)

    # -- capacity ----------------------------------------------------------------------
    def capacity(self) -> dict[str, float]:
        return dict(self._pool.total)

    def unfit_reason(self, resources: dict[str, float]) -> str | None:
        return self._pool.fits_ever(resources)

    def can_start(self, resources: dict[str, float]) -> bool:
        return self._pool.can_allocate(resources)

    # -- trials --------------------------------------------------------------------------
    def start_trial(self, launch: TrialLaunch) -> None:
        gpus = tuple(self._pool.allocate(launch.resources))
        worker = self._idle_worker(gpus) or self._spawn(gpus)
        worker.launch = launch
        worker.held = launch.resources
        worker.stopping = False
        worker.stop_deadline = worker.kill_deadline = None
        self._by_trial[launch.trial_id] = worker
        launch_dict = asdict(launch)
        launch_dict["resources"] = {**launch.resources, "gpu_ids": list(gpus)}
        self._send(worker, ("start", launch_dict))

    def stop_trial(self, trial_id: str, epoch: int) -> None:
        worker = self._worker_of(trial_id, epoch)
        if worker is None or worker.stopping:
            return
        worker.stopping = True
        worker.stop_deadline = time.monotonic() + self._stop_grace
        self._send(worker, ("stop", trial_id, epoch))

    def send_decision(self, trial_id: str, epoch: int, decision: str) -> None:
        worker = self._worker_of(trial_id, epoch)
        if worker is not None:
            self._send(worker, ("decision", trial_id, epoch, decision))

    def running_pids(self) -> dict[str, int]:
        """trial_id -> pid of the worker running it (the trial's process group id)."""
        return {tid: w.pid for tid, w in self._by_trial.items()}

    # -- events --------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = []
        deadline = self._next_deadline()
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
        for ready in wait(list(self._workers), timeout):
            worker = self._workers.get(ready)  # type: ignore[call-overload]
            if worker is None:
                continue
            conn = worker.conn
            try:
                while True:
                    self._handle(worker, conn.recv(), events)
                    if not conn.poll(0):
                        break
            except (EOFError, OSError):
                self._on_death(worker, events)
        for worker in list(self._workers.values()):
            if worker.proc.poll() is not None:
                self._on_death(worker, events)
        self._enforce_deadlines()
        return events

    def _handle(self, worker: _Worker, msg: tuple[Any, ...], events: list[Event]) -> None:
        kind = msg[0]
        if kind == "results":
            events.append(Results(msg[1], msg[2], msg[3]))
        elif kind == "finished":
            events.append(Finished(msg[1], msg[2], msg[3], msg[4]))
            self._release(worker)
        elif kind == "failed":
            events.append(Failed(msg[1], msg[2], FailureRecord.from_json(msg[3])))
            self._release(worker)
        elif kind == "ready":
            worker.ready = True
        elif kind == "setup_failed":
            self.fatal = FailureRecord.from_json(msg[1])

    def _release(self, worker: _Worker) -> None:
        launch = worker.launch
        if launch is not None:
            self._pool.release(worker.held, list(worker.gpus))
            self._by_trial.pop(launch.trial_id, None)
        worker.launch = None
        worker.held = {}
        worker.stopping = False
        worker.stop_deadline = worker.kill_deadline = None
        if not self._reuse:
            self._retire(worker)

    def _on_death(self, worker: _Worker, events: list[Event]) -> None:
        if self._workers.pop(worker.conn, None) is None:
            return
        try:
            returncode = worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _killpg(worker.pid, signal.SIGKILL)
            returncode = worker.proc.wait()
        _killpg(worker.pid, signal.SIGKILL)  # no orphan of the trial survives it
        worker.conn.close()
        if not worker.ready and self.fatal is None and not (worker.stopping or worker.retiring):
            self._log.flush()
            tail = _stderr_tail(self._log.name)
            self.fatal = FailureRecord(
                kind=FailureKind.CRASH,
                message=f"a worker process exited with code {returncode} before it was ready",
                exit_code=returncode,
                traceback=f"worker output ({self._log.name}):\n{tail}",
            )
        launch = worker.launch
        if launch is None:
            return
        if worker.stopping:
            events.append(Finished(launch.trial_id, launch.epoch, "stopped"))
        else:
            events.append(Failed(launch.trial_id, launch.epoch, _crash_record(launch, returncode)))
        self._release(worker)

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for worker in self._workers.values():
            if worker.stop_deadline is not None and now >= worker.stop_deadline:
                worker.stop_deadline = None
                worker.kill_deadline = now + self._kill_grace
                _killpg(worker.pid, signal.SIGTERM)
            elif worker.kill_deadline is not None and now >= worker.kill_deadline:
                worker.kill_deadline = None
                _killpg(worker.pid, signal.SIGKILL)

    def _next_deadline(self) -> float | None:
        deadlines = [
            d
            for w in self._workers.values()
            for d in (w.stop_deadline, w.kill_deadline)
            if d is not None
        ]
        return min(deadlines) if deadlines else None

    # -- workers -------------------------------------------------------------------------
    def _idle_worker(self, gpus: tuple[str, ...]) -> _Worker | None:
        for worker in self._workers.values():
            if worker.launch is None and not worker.retiring and worker.gpus == gpus:
                return worker
        for worker in list(self._workers.values()):
            if worker.launch is None and not worker.retiring:  # bound to other GPUs: make room
                self._retire(worker)
                break
        return None

    def _spawn(self, gpus: tuple[str, ...]) -> _Worker:
        parent, child = socket.socketpair()
        child_fd = child.fileno()
        env = dict(os.environ)
        env["TUNEFLEET_SYS_PATH"] = json.dumps(sys.path)
        # the worker must import this very tunefleet, installed or not
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        if gpus or self._pool.gpu_free:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tunefleet.backends.local._worker",
                str(child_fd),
                self._trainable_file,
            ],
            pass_fds=(child_fd,),
            start_new_session=True,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        child.close()
        worker = _Worker(proc=proc, conn=Connection(parent.detach()), gpus=gpus)
        self._workers[worker.conn] = worker
        return worker

    def _retire(self, worker: _Worker) -> None:
        worker.retiring = True
        self._send(worker, ("exit",))

    def _send(self, worker: _Worker, msg: tuple[Any, ...]) -> None:
        try:
            worker.conn.send(msg)
        except OSError:
            pass  # it died; poll() reports it

    def _worker_of(self, trial_id: str, epoch: int) -> _Worker | None:
        worker = self._by_trial.get(trial_id)
        if worker is None or worker.launch is None or worker.launch.epoch != epoch:
            return None
        return worker

    def shutdown(self) -> None:
        """Stop all workers: ask, then SIGTERM, then SIGKILL their process groups."""
        workers = list(self._workers.values())
        for worker in workers:
            if worker.launch is not None:
                self._send(worker, ("stop", worker.launch.trial_id, worker.launch.epoch))
            self._send(worker, ("exit",))
        _wait_all(workers, 1.0)
        for worker in workers:
            if worker.proc.poll() is None:
                _killpg(worker.pid, signal.SIGTERM)
        _wait_all(workers, self._kill_grace)
        for worker in workers:
            _killpg(worker.pid, signal.SIGKILL)
            if worker.proc.poll() is None:
                worker.proc.wait()
            worker.conn.close()
        self._workers.clear()
        self._by_trial.clear()
        self._log.close()
        try:
            os.remove(self._trainable_file)
        except OSError:
            pass


def _write_trainable(path: str, trainable: Any, experiment_name: str, reuse: bool) -> None:
    import cloudpickle

    payload = {"trainable": trainable, "experiment_name": experiment_name, "reuse_actors": reuse}
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            cloudpickle.dump(payload, f)
    except Exception as exc:
        raise TypeError(
            f"the trainable cannot be sent to worker processes (pickling failed: {exc}); "
            "objects it uses must be picklable: pass large or special objects with "
            "tune.with_parameters, or create them inside the trainable"
        ) from exc
    os.replace(tmp, path)


def _wait_all(workers: list[_Worker], timeout: float) -> None:
    end = time.monotonic() + timeout
    for worker in workers:
        try:
            worker.proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _crash_record(launch: TrialLaunch, returncode: int) -> FailureRecord:
    tail = _stderr_tail(os.path.join(launch.trial_dir, "stderr.log"))
    if returncode < 0:
        try:
            sig_name = signal.Signals(-returncode).name
        except ValueError:
            sig_name = f"signal {-returncode}"
        message = f"the trial's process was killed by {sig_name}"
        return FailureRecord(
            kind=FailureKind.CRASH,
            message=message,
            signal=sig_name,
            stderr_tail=tail,
            attempt=launch.attempt,
            checkpoint=launch.checkpoint,
        )
    message = f"the trial's process exited with code {returncode} without reporting an error"
    return FailureRecord(
        kind=FailureKind.CRASH,
        message=message,
        exit_code=returncode,
        stderr_tail=tail,
        attempt=launch.attempt,
        checkpoint=launch.checkpoint,
    )


def _stderr_tail(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _STDERR_TAIL_BYTES))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = data.splitlines()[-20:]
    return "\n".join(lines) if lines else None
