"""The local backend: a pool of reusable worker processes on this machine.

Each worker is a fresh interpreter started in its own session, so it leads its
own process group: stopping a trial that does not stop when asked kills the
whole group (children and grandchildren too). Workers load the trainable once
and run trial after trial; a worker that dies is replaced.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from tunefleet._params_ref import remove_spilled, spill_to
from tunefleet._redact import get_logger
from tunefleet.backends._attempt import Worker, limit_deadline, stderr_tail, trial_stderr_tail
from tunefleet.backends._base import Event, Failed, TrialLaunch
from tunefleet.backends._exits import wait_all
from tunefleet.backends._pool import PoolBackend
from tunefleet.backends._protocol import (
    Exit,
    FromWorker,
    Readable,
    Ready,
    SetupFailed,
    Start,
    ToWorker,
    TrialFailed,
    TrialFinished,
    TrialMessage,
    TrialResults,
    WorkerSetup,
    send,
)
from tunefleet.backends._spare import sweep
from tunefleet.backends.local._memory import MemoryGuard
from tunefleet.backends.local._resources import (
    ResourcePool,
    detect_cpus,
    detect_gpus,
    detect_memory,
)
from tunefleet.backends.local._startup import defined_where, hung_record, start_timeout
from tunefleet.backends.local._trainable_file import new_key, write_trainable_file
from tunefleet.backends.local._zygote import (
    ForkedProcess,
    Zygote,
    start_worker,
    wanted,
    worker_env,
)
from tunefleet.space._sendable import is_plain, pickling_problem
from tunefleet.trial import FailureKind, FailureRecord

logger = get_logger(__name__)


@dataclass(kw_only=True, eq=False)
class _Process(Worker):
    """A worker process: the leader of its own process group."""

    proc: subprocess.Popen[bytes] | ForkedProcess  # forked by the zygote, or started
    conn: Connection
    gpus: tuple[str, ...]  # the devices it sees (CUDA_VISIBLE_DEVICES): reuse key
    held: dict[str, float] = field(default_factory=dict)
    ready: bool = False  # it loaded the trainable
    started: float = field(default_factory=time.monotonic)  # spawned: its start-up timeout
    hung: bool = False  # not ready within worker_start_timeout_s: killed
    escaped: list[Any] = field(default_factory=list)  # descendants out of the process group
    memory_failure: FailureRecord | None = None  # a memory watcher killed it: why

    @property
    def pid(self) -> int:
        return self.proc.pid


class LocalBackend(PoolBackend[_Process]):
    """Runs trials in worker processes on this machine.

    Args:
        trainable: the (possibly wrapped) trainable; pickled once for all workers.
        experiment_name: shown to trials by `get_context()`.
        experiment_path: the experiment directory (worker logs go to `.tunefleet/`).
        reuse_actors: keep workers (and class-trainable instances) across trials.
        resources: override the detected totals, and declare custom resources.
        stop_grace_s: how long a trial may take to stop when asked, before SIGTERM.
        kill_grace_s: how long after SIGTERM before SIGKILL.
        memory_usage_threshold: the node memory watcher kills the newest trial above this
            fraction of the machine's (or its cgroup's) memory in use (docs/memory.md).
        memory_mechanism: force how trial memory limits are enforced: "cgroup2",
            "cgroup1", "rlimit" or "watcher" (default: $TUNEFLEET_MEMORY_MECHANISM, else
            the strongest available).
        node_memory: () -> (bytes in use, bytes total) for the node watcher; default:
            the machine's, or its cgroup's when that limit is smaller.
        worker_start_timeout_s: a worker not ready this long after it was started hung
            while loading the trainable (importing its module): its process tree is
            killed and its trial fails as TIMEOUT (default: $TUNEFLEET_WORKER_START_TIMEOUT_S,
            else 300 s).
    """

    makes_trial_dirs = True  # the trial loop makes it (`_loop.py`), off the driver's path

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
        memory_mechanism: str | None = None,
        node_memory: Callable[[], tuple[float, float]] | None = None,
        worker_start_timeout_s: float | None = None,
    ) -> None:
        super().__init__(reuse=reuse_actors, stop_grace_s=stop_grace_s)
        self._start_timeout = start_timeout(worker_start_timeout_s)
        self._trainable_where = defined_where(trainable)
        gpu_ids = detect_gpus()
        total = {"cpu": float(detect_cpus()), "gpu": float(len(gpu_ids)), "memory": detect_memory()}
        total.update(resources or {})
        self._pool = ResourcePool(total, _gpu_ids(total["gpu"], gpu_ids))
        self._memory_usage_threshold = memory_usage_threshold  # node watcher (_memory.py)
        self._kill_grace = kill_grace_s
        self._workers: dict[Connection, _Process] = {}
        self._readable = Readable()  # their channels
        self._unsent: list[Event] = []  # trials whose config could not be pickled
        self._meta_dir = os.path.join(experiment_path, ".tunefleet")
        os.makedirs(self._meta_dir, exist_ok=True)
        self._trainable_file = os.path.join(self._meta_dir, "trainable.pkl")
        self._log = open(os.path.join(self._meta_dir, "workers.log"), "ab")  # noqa: SIM115
        self._key = new_key()  # verifies the trainable file; sent to each worker over its socket
        setup = WorkerSetup(trainable, experiment_name, reuse_actors)
        with spill_to(self._meta_dir):  # with_parameters' large objects: one file
            write_trainable_file(self._trainable_file, setup, self._key)
        self._memory = MemoryGuard(
            experiment=experiment_name,
            threshold=memory_usage_threshold,
            mechanism=memory_mechanism,
            node_memory=node_memory,
        )
        # workers are forked from it (_zygote.py); it starts now, while the driver sets up
        self._zygote = Zygote(self._trainable_file, self._log, worker_env()) if wanted() else None

    # -- capacity ----------------------------------------------------------------------
    def capacity(self) -> dict[str, float]:
        return dict(self._pool.total)

    def unfit_reason(self, resources: dict[str, float]) -> str | None:
        return self._pool.fits_ever(resources)

    def can_start(self, resources: dict[str, float]) -> bool:
        return self._pool.can_allocate(resources) and self._memory.fits(resources)

    # -- trials --------------------------------------------------------------------------
    def start_trial(self, launch: TrialLaunch) -> None:
        plain = is_plain(launch.config)  # most configs: no cloudpickle needed
        problem = None if plain else pickling_problem(launch.config)
        if problem is not None:  # e.g. what a sample_from function returned: its ERROR
            failure = FailureRecord(
                kind=FailureKind.EXCEPTION,
                message=f"the trial's config cannot be sent to a worker process ({problem}); "
                "pass such objects with tune.with_parameters",
                exception_type=problem.partition(":")[0],
            )
            self._unsent.append(Failed(launch.trial_id, launch.epoch, failure))
            os.makedirs(launch.trial_dir, exist_ok=True)  # no worker makes it: it has one
            return
        gpus = tuple(self._pool.allocate(launch.resources, launch.trial_id))
        worker = self._idle_worker(gpus) or self._spawn(gpus)
        worker.held = launch.resources
        worker.memory_failure = None
        self._assign(worker, launch, running=worker.ready)  # else its clocks start at Ready
        rlimit_as = self._memory.start(worker.pid, launch.trial_id, launch.resources)
        held = self._pool.held(launch.trial_id, launch.resources)
        shown = launch if held is launch.resources else replace(launch, resources=held)
        by_value = not plain or launch.storage_filesystem is not None
        self._send(worker, Start(shown, gpus, rlimit_as), by_value)  # gpu="auto": its share

    def running_pids(self) -> dict[str, int]:
        """trial_id -> pid of the worker running it (the trial's process group id)."""
        return {tid: w.pid for tid, w in self._by_trial.items()}

    # -- events --------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[Event]:
        events, self._unsent = self._unsent, []
        for ready in self._readable.wait(0 if events else self._poll_timeout(timeout)):
            worker = self._workers.get(ready)
            if worker is None:
                continue
            try:
                for msg in self._readable.receive(ready):
                    self._handle(worker, msg, events)
            except (EOFError, OSError):
                self._on_death(worker, events)
                continue
            if self._readable.exited(ready):  # its channel may outlive it (a forked child)
                self._on_death(worker, events)
        if not self._readable.watches_exits:  # no pidfd here: ask each process
            for worker in list(self._workers.values()):
                if worker.proc.poll() is not None:
                    self._on_death(worker, events)
        self._enforce_start_timeout(events)
        self._enforce_deadlines(events)
        self._watch_memory()
        return events

    def _handle(self, worker: _Process, msg: FromWorker, events: list[Event]) -> None:
        if isinstance(msg, (TrialResults, TrialFinished, TrialFailed)):
            self._on_trial_message(worker, msg, events)
        elif isinstance(msg, Ready):
            worker.ready = True
            if worker.launch is not None:
                worker.start_clock()  # interpreter start-up is not the trial's time
        elif isinstance(msg, SetupFailed):
            self._fatal = msg.failure

    def _on_trial_message(self, worker: _Process, msg: TrialMessage, events: list[Event]) -> None:
        launch = worker.launch
        if launch is not None and (launch.trial_id, launch.epoch) == (msg.trial_id, msg.epoch):
            self._pool.on_message(msg)  # gpu="auto": its GPU memory, or its GPU_OOM
        super()._on_trial_message(worker, msg, events)

    def free_retry(self, trial_id: str, failure: FailureRecord) -> bool:
        return self._pool.free_retry(trial_id)

    def _enforce_start_timeout(self, events: list[Event]) -> None:
        """Kill each worker not ready `worker_start_timeout_s` after it was started, and fail
        the trial waiting on it (a stopped or retired one is reported at its death)."""
        now = time.monotonic()
        for worker in list(self._workers.values()):
            if worker.ready or worker.hung or now < worker.started + self._start_timeout:
                continue
            worker.hung = worker.retiring = True  # never given another trial: replaced
            _signal_tree(worker, signal.SIGKILL)
            launch = worker.launch
            if launch is None or worker.stopping:
                continue
            worker.timed_out = True  # reported now, not again at its death
            if self._by_trial.get(launch.trial_id) is worker:
                del self._by_trial[launch.trial_id]
            self._log.flush()
            failure = hung_record(
                launch, self._trainable_where, self._start_timeout, self._log.name
            )
            events.append(Failed(launch.trial_id, launch.epoch, failure))

    def _explain(self, worker: _Process, failure: FailureRecord) -> FailureRecord:
        return self._memory.explain(worker.pid, failure)

    def _free(self, worker: _Process) -> None:
        self._memory.end(worker.pid)
        worker.memory_failure = None
        if worker.launch is not None:
            self._pool.release(worker.held, list(worker.gpus), worker.launch.trial_id)
        worker.held = {}

    def _on_death(self, worker: _Process, events: list[Event]) -> None:
        if self._workers.pop(worker.conn, None) is None:
            return
        self._memory.detach(worker.pid)  # its cgroup is read below, removed later
        wait_all([worker.proc], 5.0)  # its channel closed: it is exiting, if not gone
        returncode = worker.proc.poll()
        if returncode is None:
            _killpg(worker.pid, signal.SIGKILL)
            returncode = worker.proc.wait()
        _killpg(worker.pid, signal.SIGKILL)  # no orphan of the trial survives it
        _signal_escaped(worker, signal.SIGKILL)
        self._readable.remove(worker.conn)
        worker.conn.close()
        if not worker.ready and self._fatal is None and not (worker.stopping or worker.retiring):
            self._log.flush()
            tail = stderr_tail(self._log.name)
            self._fatal = FailureRecord(
                kind=FailureKind.CRASH,
                message=f"a worker process exited with code {returncode} before it was ready",
                exit_code=returncode,
                traceback=f"worker output ({self._log.name}):\n{tail}",
            )
        # a memory limit, else a crash
        self._report_death(worker, events, lambda: self._death_failure(worker, returncode))

    def _force_stop(self, worker: _Process, now: float) -> float | None:
        """SIGTERM to its process tree, then SIGKILL after kill_grace_s."""
        if worker.forced == 0:
            _signal_tree(worker, signal.SIGTERM)
            return now + self._kill_grace
        _signal_tree(worker, signal.SIGKILL)
        return None

    def _limit_deadline(self, worker: _Process) -> tuple[float, str] | None:
        if worker.memory_failure is not None:  # killed by a memory watcher: that is its failure
            return None
        return limit_deadline(worker)

    # -- memory (_memory.py) ---------------------------------------------------------------
    def _next_deadline(self) -> float | None:
        due = self._memory.due_in()
        memory = None if due is None else time.monotonic() + due
        starting = [w.started for w in self._workers.values() if not (w.ready or w.hung)]
        start = min(starting) + self._start_timeout if starting else None
        deadlines = (super()._next_deadline(), memory, start)
        return min((d for d in deadlines if d is not None), default=None)

    def _watch_memory(self) -> None:
        """Kill what the memory watchers name (a trial over its limit, the node's newest)."""
        by_pid = {w.pid: w for w in self._workers.values()}
        for pid, failure in self._memory.sample():
            worker = by_pid.get(pid)
            if worker is not None and worker.launch is not None and not worker.timed_out:
                worker.memory_failure = failure  # reported when it is dead: _on_death
                _signal_tree(worker, signal.SIGKILL)

    def _death_failure(self, worker: _Process, returncode: int) -> FailureRecord:
        """Why the worker running a trial died: a memory limit, else a crash."""
        launch = worker.launch
        assert launch is not None
        failure = worker.memory_failure or self._memory.death_record(worker.pid)
        if failure is None:
            return _crash_record(launch, returncode)
        failure.stderr_tail = trial_stderr_tail(launch)
        failure.attempt, failure.checkpoint = launch.attempt, launch.checkpoint
        return failure

    # -- workers -------------------------------------------------------------------------
    def _live_workers(self) -> list[_Process]:
        return list(self._workers.values())

    def _idle_worker(self, gpus: tuple[str, ...]) -> _Process | None:
        for worker in self._workers.values():
            if worker.launch is None and not worker.retiring and worker.gpus == gpus:
                return worker
        for worker in list(self._workers.values()):
            if worker.launch is None and not worker.retiring:  # bound to other GPUs: make room
                self._retire(worker)
                break
        return None

    def _spawn(self, gpus: tuple[str, ...]) -> _Process:
        parent, child = socket.socketpair()
        env = worker_env()
        if gpus or self._pool.gpu_free:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        proc = start_worker(self._zygote, child, env, self._trainable_file, self._log)
        child.close()
        self._memory.attach(proc.pid)  # before any trial: its children inherit the cgroup
        worker = _Process(proc=proc, conn=Connection(parent.detach()), gpus=gpus)
        try:  # the key that verifies the trainable file: never on disk, in env or in argv
            worker.conn.send_bytes(self._key)
        except OSError:
            pass  # it died; poll() reports it
        self._workers[worker.conn] = worker
        self._readable.add(worker.conn, proc.pid)
        return worker

    def _retire(self, worker: _Process) -> None:
        worker.retiring = True
        self._send(worker, Exit())

    def _send(self, worker: _Process, msg: ToWorker, by_value: bool = False) -> None:
        # cloudpickle, as Ray: never multiprocessing's pickler, whose reducers (torch's
        # for tensors) would share memory through a side channel the worker cannot use;
        # `send`'s plain pickler where nothing needs sending by value
        try:
            if by_value:
                worker.conn.send_bytes(cloudpickle.dumps(msg))
            else:
                send(worker.conn, msg)
        except OSError:
            pass  # it died; poll() reports it

    def shutdown(self) -> None:
        """Stop all workers: ask, then SIGTERM, then SIGKILL their process groups."""
        workers = list(self._workers.values())
        self._ask_to_exit(workers)
        wait_all([w.proc for w in workers], 1.0)
        for worker in workers:
            if worker.proc.poll() is None:
                _signal_tree(worker, signal.SIGTERM)
        wait_all([w.proc for w in workers], self._kill_grace)
        for worker in workers:
            _signal_tree(worker, signal.SIGKILL)
            if worker.proc.poll() is None:
                worker.proc.wait()
            self._readable.remove(worker.conn)
            worker.conn.close()
        self._workers.clear()
        self._by_trial.clear()
        self._memory.close()
        if self._zygote is not None:
            self._zygote.close()
        self._log.close()
        try:
            os.remove(self._trainable_file)
        except OSError:
            pass
        remove_spilled(self._meta_dir)
        sweep(self._meta_dir)  # spare trial folders of workers that were killed


def _signal_tree(worker: _Process, sig: signal.Signals) -> None:
    """Signal the worker's process group, and its descendants that left the group (setsid).

    Those are found while the worker lives (orphans are re-parented to it, a subreaper)
    and remembered, so they still get the SIGKILL after the worker itself died.
    """
    import psutil

    try:
        for proc in psutil.Process(worker.pid).children(recursive=True):
            try:
                if os.getpgid(proc.pid) != worker.pid and proc not in worker.escaped:
                    worker.escaped.append(proc)
            except OSError:
                continue
    except psutil.Error:
        pass
    _killpg(worker.pid, sig)
    _signal_escaped(worker, sig)


def _signal_escaped(worker: _Process, sig: signal.Signals) -> None:
    if not worker.escaped:
        return
    import psutil

    for proc in worker.escaped:
        try:
            proc.send_signal(sig)  # psutil checks that the pid was not reused
        except psutil.Error:
            pass


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _crash_record(launch: TrialLaunch, returncode: int) -> FailureRecord:
    tail = trial_stderr_tail(launch)
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


def _gpu_ids(declared: float, detected: list[str]) -> list[str]:
    """The device ids to hand out for `declared` GPUs (RunConfig.resources["gpu"]).

    Fewer than detected: the first ones. More (as Ray does with logical GPUs): the
    missing ids are made up after the detected ones, with a warning, so trials are
    scheduled instead of waiting forever for devices that have no id.
    """
    if declared < 0 or declared != int(declared):
        raise ValueError(
            f"RunConfig.resources['gpu']={declared!r} is not valid: this machine's GPU count "
            "must be a whole number >= 0 (a trial may ask for a fraction of one)"
        )
    count = int(declared)
    if count <= len(detected):
        return detected[:count]
    numbers = [int(g) for g in detected if g.isdigit()]
    start = max(numbers, default=-1) + 1
    made_up = [str(start + i) for i in range(count - len(detected))]
    logger.warning(
        "RunConfig.resources['gpu']=%d but %d GPU(s) were detected (CUDA_VISIBLE_DEVICES "
        "or the NVIDIA driver): trials will also be given the device ids %s, which this "
        "machine may not have",
        count,
        len(detected),
        ",".join(made_up),
    )
    return detected + made_up
