"""The Ray backend: trials run as Ray actors, on a local Ray or on a cluster.

Each actor (``_actor.TrialActor``) runs the local backend's worker loop, so the trial
side (report, checkpoints, failure records) is the same code as on one machine. The
actor asks Ray for the trial's resources (cpu, gpu incl. fractions, memory, custom);
with ``reuse_actors`` an idle actor of the same resource shape runs the next trial.

When an actor dies, the backend says why from what it knows: the node it ran on is
gone (NODE_LOST), Ray's memory monitor killed it (OOM), or it crashed (CRASH, with
Ray's message and the trial's stderr tail when the trial directory is readable here).
A stop request that is not honoured within ``stop_grace_s`` ends in ``ray.kill``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, fields
from typing import Any

from tunefleet._redact import get_logger
from tunefleet.backends._attempt import (
    limit_deadline,
    out_of_memory,
    timeout_record,
    trial_event,
    trial_stderr_tail,
)
from tunefleet.backends._base import Backend, Event, Failed, Finished, TrialLaunch
from tunefleet.resources import PlacementGroupFactory
from tunefleet.trainable import placement_of
from tunefleet.trial import FailureKind, FailureRecord

logger = get_logger(__name__)

_LONG_POLL_S = 1.0  # how long an actor's events() call waits for a message
_NODES_REFRESH_S = 1.0  # how often the cluster's nodes are read (ray.nodes())
_WAIT_WARN_S = 60.0  # warn when a trial has waited this long for resources that no node has
_EPS = 1e-9
# Ray's names of the resources a trial asks for, and ours
_RAY_NAMES = {"CPU": "cpu", "GPU": "gpu", "memory": "memory"}
_NOT_RESOURCES = ("node:", "object_store_memory", "accelerator_type:")
# what Ray's message says when its memory monitor killed the worker (not a plain crash,
# whose message also mentions "the OOM killer" as a possible cause)
_OOM_WORDS = (
    "NODE_OUT_OF_MEMORY",
    "memory pressure",
    "running low on memory",
    "memory_usage_thresh",
)


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            'backend="ray" needs Ray: pip install "tunefleet[ray]" (it installs ray core)'
        ) from e
    return ray


@dataclass
class _Actor:
    handle: Any
    shape: tuple[tuple[str, float], ...]  # the resources it holds in Ray: reuse key
    resources: dict[str, float]
    where_ref: Any = None  # TrialActor.where(): (node id, pid, gpu ids), once
    group: Any = None  # its placement group (PlacementGroupFactory trials), removed with it
    events_ref: Any = None  # the outstanding TrialActor.events() call
    sent: int = 0  # messages sent: the next one's sequence number
    node_id: str | None = None
    pid: int | None = None
    launch: TrialLaunch | None = None
    stopping: bool = False
    stop_deadline: float | None = None  # when a stop request turns into ray.kill
    killed: bool = False  # ray.kill was called: its death is expected
    timed_out: bool = False
    clock_start: float | None = None
    last_report: float | None = None
    last_iteration: int | None = None


class RayBackend(Backend):
    """Runs trials as Ray actors; the cluster may grow and shrink while they run.

    Args:
        trainable: the (possibly wrapped) trainable; pickled once into Ray's object store.
        experiment_name: shown to trials by `get_context()`.
        experiment_path: the experiment directory; trials' directories are under it, so
            on several nodes it must be on a shared file system (docs/clusters.md).
        reuse_actors: keep actors (and class-trainable instances) across trials.
        ray_init: keyword arguments of ``ray.init`` when Ray is not initialised yet, e.g.
            ``{"address": "auto"}`` to join a running cluster (``RAY_ADDRESS`` works too).
        stop_grace_s: how long a trial may take to stop when asked, before ``ray.kill``.
    """

    def __init__(
        self,
        *,
        trainable: Any,
        experiment_name: str,
        experiment_path: str,
        reuse_actors: bool = True,
        ray_init: dict[str, Any] | None = None,
        stop_grace_s: float = 5.0,
    ) -> None:
        import cloudpickle

        from tunefleet.backends.ray._actor import TrialActor

        self.elastic = True  # what fits changes with the cluster: ask can_start, not capacity

        ray = import_ray()
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(**{"log_to_driver": False, **(ray_init or {})})
        self._remote = ray.remote(TrialActor)
        payload = {
            "trainable": trainable,
            "experiment_name": experiment_name,
            "reuse_actors": reuse_actors,
        }
        self._payload = ray.put(cloudpickle.dumps(payload))
        self._reuse = reuse_actors
        self._placement = placement_of(trainable)
        self._stop_grace = stop_grace_s
        self._experiment_path = experiment_path
        self._actors: list[_Actor] = []
        self._by_trial: dict[str, _Actor] = {}
        self._nodes: dict[str, dict[str, Any]] = {}  # alive nodes: id -> {ip, resources}
        self._nodes_read = -1.0
        self._waiting_since: float | None = None  # a trial that fits no node waits
        self._warned = False
        self.fatal: FailureRecord | None = None
        # dead actors whose node may be dying too: (actor, error, until when to wait)
        self._dying: list[tuple[_Actor, Exception, float]] = []
        self._refresh_nodes(force=True)

    # -- the cluster -------------------------------------------------------------------------
    def _refresh_nodes(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._nodes_read < _NODES_REFRESH_S:
            return
        self._nodes_read = now
        nodes = {}
        for node in self._ray.nodes():
            if node.get("Alive") or node.get("alive"):
                nodes[node["NodeID"]] = {
                    "ip": node.get("NodeManagerAddress", "?"),
                    "resources": _ours(node.get("Resources", {})),
                }
        self._nodes = nodes

    def capacity(self) -> dict[str, float]:
        self._refresh_nodes()
        total: dict[str, float] = {"cpu": 0.0, "gpu": 0.0, "memory": 0.0}
        for node in self._nodes.values():
            for key, value in node["resources"].items():
                total[key] = total.get(key, 0.0) + value
        return total

    def _held(self, idle: bool) -> dict[str, float]:
        held: dict[str, float] = {}
        for actor in self._actors:
            if actor.launch is not None or (idle and not actor.killed):
                for key, value in actor.resources.items():
                    held[key] = held.get(key, 0.0) + value
        return held

    def can_start(self, resources: dict[str, float]) -> bool:
        self._refresh_nodes()
        shape = _shape(resources)
        if any(a.launch is None and not a.killed and a.shape == shape for a in self._actors):
            return True  # an idle actor of this shape holds what the trial needs
        total = self.capacity()
        if not self._placeable(resources):
            self._note_waiting(resources)
            return False
        self._waiting_since = None
        if _fits(resources, _minus(total, self._held(idle=True))):
            return True
        if not _fits(resources, _minus(total, self._held(idle=False))):
            return False
        for actor in list(self._actors):  # idle actors of other shapes hold the room: end them
            if actor.launch is None and not actor.killed:
                self._kill(actor)
                if _fits(resources, _minus(total, self._held(idle=True))):
                    break
        return True

    def _bundles(self, resources: dict[str, float]) -> PlacementGroupFactory | None:
        """The trial's placement group factory, unless it was resized since (one bundle then)."""
        placement = self._placement
        if placement is None or _shape(placement.required_resources()) != _shape(resources):
            return None
        return placement

    def _placeable(self, resources: dict[str, float]) -> bool:
        """Could the alive nodes hold this trial if nothing else ran?"""
        nodes = [n["resources"] for n in self._nodes.values()]
        placement = self._bundles(resources)
        if placement is None or placement.strategy == "STRICT_PACK":
            return any(_fits(resources, node) for node in nodes)
        if placement.strategy == "STRICT_SPREAD" and len(nodes) < len(placement.bundles):
            return False
        return all(any(_fits(b, node) for node in nodes) for b in placement.bundles)

    def _note_waiting(self, resources: dict[str, float]) -> None:
        """Ask an autoscaler for a node that fits; warn once if none comes for a while."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
            try:
                from ray.autoscaler.sdk import request_resources

                bundle = {_ray_name(k): v for k, v in resources.items() if v > 0}
                request_resources(bundles=[bundle])  # a no-op without an autoscaler
            except Exception:  # an old or partial Ray: nothing to ask
                pass
        elif now - self._waiting_since > _WAIT_WARN_S and not self._warned:
            self._warned = True
            sizes: list[dict[str, float]] = [n["resources"] for n in self._nodes.values()]
            largest = max(sizes, key=lambda r: r.get("cpu", 0.0), default={})
            logger.warning(
                "A trial needing %s has waited %.0f s: no node of the Ray cluster has that "
                "much (nodes: %d, e.g. %s). It starts when a node that fits joins.",
                _text(resources),
                now - self._waiting_since,
                len(self._nodes),
                _text(largest),
            )

    # -- trials ------------------------------------------------------------------------------
    def start_trial(self, launch: TrialLaunch) -> None:
        shape = _shape(launch.resources)
        actor = next(
            (a for a in self._actors if a.launch is None and not a.killed and a.shape == shape),
            None,
        )
        if actor is None:
            actor = self._spawn(launch.resources, shape)
        actor.launch = launch
        actor.stopping = actor.timed_out = False
        actor.stop_deadline = None
        actor.clock_start = actor.last_report = time.monotonic()
        actor.last_iteration = launch.iteration or None
        self._by_trial[launch.trial_id] = actor
        launch_dict = {f.name: getattr(launch, f.name) for f in fields(launch)}
        launch_dict["resources"] = dict(launch.resources)
        if actor.events_ref is None:  # an idle actor: the start rides on its events() call
            actor.events_ref = actor.handle.events.remote(
                _LONG_POLL_S, [(actor.sent, ("start", launch_dict))]
            )
            actor.sent += 1
        else:
            self._send(actor, ("start", launch_dict))

    def _spawn(self, resources: dict[str, float], shape: tuple[tuple[str, float], ...]) -> _Actor:
        placement, group = self._bundles(resources), None
        own = resources
        if placement is not None:  # the actor takes bundle 0; what it starts, the others
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            bundles = [{_ray_name(k): v for k, v in b.items()} for b in placement.bundles]
            group = placement_group(bundles, strategy=placement.strategy)
            own = {"cpu": 0.0, **placement.bundles[0]}
        custom = {k: v for k, v in own.items() if k not in ("cpu", "gpu", "memory")}
        options: dict[str, Any] = {
            "num_cpus": own.get("cpu", 1.0),
            "num_gpus": own.get("gpu", 0.0),
            "max_concurrency": 8,  # send() runs while events() waits
            "max_restarts": 0,
        }
        if own.get("memory"):
            options["memory"] = int(own["memory"])
        if custom:
            options["resources"] = custom
        if group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group,
                placement_group_bundle_index=0,
                placement_group_capture_child_tasks=True,
            )
        handle = self._remote.options(**options).remote(self._payload, list(sys.path))
        actor = _Actor(handle=handle, shape=shape, resources=dict(resources), group=group)
        actor.where_ref = handle.where.remote()
        self._actors.append(actor)
        return actor

    def stop_trial(self, trial_id: str, epoch: int) -> None:
        actor = self._actor_of(trial_id, epoch)
        if actor is None or actor.stopping:
            return
        actor.stopping = True
        actor.stop_deadline = time.monotonic() + self._stop_grace
        self._send(actor, ("stop", trial_id, epoch))

    def send_decision(self, trial_id: str, epoch: int, decision: str) -> None:
        actor = self._actor_of(trial_id, epoch)
        if actor is not None:
            self._send(actor, ("decision", trial_id, epoch, decision))

    def _send(self, actor: _Actor, msg: tuple[Any, ...]) -> None:
        actor.handle.send.remote(actor.sent, msg)  # numbered: the actor keeps the order
        actor.sent += 1

    def attempt_alive(self, trial_id: str) -> bool:
        actors = [*self._actors, *(entry[0] for entry in self._dying)]
        return any(a.launch is not None and a.launch.trial_id == trial_id for a in actors)

    def _actor_of(self, trial_id: str, epoch: int) -> _Actor | None:
        actor = self._by_trial.get(trial_id)
        if actor is None or actor.launch is None or actor.launch.epoch != epoch:
            return None
        return actor

    # -- events ------------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = []
        deadline = self._next_deadline()
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
        if self._dying:
            timeout = min(timeout, _NODES_REFRESH_S)
        refs: dict[Any, tuple[_Actor, str]] = {}
        for actor in self._actors:
            if actor.events_ref is not None:
                refs[actor.events_ref] = (actor, "events")
            if actor.where_ref is not None:
                refs[actor.where_ref] = (actor, "where")
        if refs:
            ready, _ = self._ray.wait(list(refs), num_returns=1, timeout=timeout)
            if ready:
                ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in ready:
                actor, what = refs[ref]
                if actor not in self._actors:
                    continue  # it died with an earlier ref of this poll
                errors = self._ray.exceptions
                try:
                    value = self._ray.get(ref)
                except errors.ActorUnavailableError:  # for now (a network blip): ask again
                    if what == "where":
                        actor.where_ref = actor.handle.where.remote()
                    else:
                        actor.events_ref = actor.handle.events.remote(_LONG_POLL_S)
                    continue
                except errors.RayError as error:  # died: node lost, OOM kill, crash
                    self._on_death(actor, error, events)
                    continue
                if what == "where":
                    actor.where_ref = None
                    actor.node_id, actor.pid, _ = value
                    continue
                actor.events_ref = None
                for msg in value:
                    self._handle(actor, msg, events)
                if actor in self._actors and actor.launch is not None:  # idle: none until busy
                    actor.events_ref = actor.handle.events.remote(_LONG_POLL_S)
        elif timeout > 0:
            time.sleep(timeout)
        self._enforce_deadlines(events)
        return events

    def _handle(self, actor: _Actor, msg: tuple[Any, ...], events: list[Event]) -> None:
        if msg[0] == "gone":
            self._forget(actor)
            return
        event = trial_event(actor, msg)  # None: an attempt already reported as ended
        if event is not None:
            events.append(event)
            if isinstance(event, (Finished, Failed)):
                self._release(actor)
            if out_of_memory(event) and not actor.killed:
                self._kill(actor)  # not reused: the next trial gets the memory back

    def _release(self, actor: _Actor) -> None:
        launch = actor.launch
        if launch is not None and self._by_trial.get(launch.trial_id) is actor:
            del self._by_trial[launch.trial_id]
        actor.launch = None
        actor.stopping = False
        actor.stop_deadline = None
        if not self._reuse:
            self._kill(actor)

    def _on_death(self, actor: _Actor, error: Exception, events: list[Event]) -> None:
        self._forget(actor)
        if getattr(error, "actor_init_failed", False) and self.fatal is None:
            self.fatal = FailureRecord(  # every actor would fail alike: the experiment stops
                kind=FailureKind.EXCEPTION,
                message=f"could not load the trainable in a Ray actor: {_first_lines(str(error))}",
                traceback=str(error),
            )
        launch = actor.launch
        if launch is None:
            return
        if actor.stopping or (actor.killed and not actor.timed_out):
            events.append(Finished(launch.trial_id, launch.epoch, "stopped"))
        elif not actor.timed_out:  # a timed-out attempt was reported when it timed out
            failure = self._death_record(actor, error)
            told = "exit detail" in str(error).lower()  # its node's raylet said why: alive
            if failure.kind == FailureKind.CRASH and actor.node_id is not None and not told:
                # Its node may be dying: Ray marks a node dead only after missed health
                # checks, and a crash is told apart from a lost node by waiting for that.
                self._dying.append((actor, error, time.monotonic() + _node_death_wait_s()))
                return
            events.append(Failed(launch.trial_id, launch.epoch, failure))
        self._release(actor)

    def _settle_dying(self, events: list[Event], *, wait_over: bool = False) -> None:
        """Report the dead actors held back: NODE_LOST once their node is gone, or CRASH."""
        if not self._dying:
            return
        self._refresh_nodes(force=True)
        now = time.monotonic()
        for entry in list(self._dying):
            actor, error, until = entry
            if actor.node_id in self._nodes and now < until and not wait_over:
                continue
            self._dying.remove(entry)
            launch = actor.launch
            assert launch is not None
            events.append(Failed(launch.trial_id, launch.epoch, self._death_record(actor, error)))
            self._release(actor)

    def _death_record(self, actor: _Actor, error: Exception) -> FailureRecord:
        """Why an actor running a trial died: its node is gone, Ray's OOM kill, or a crash."""
        launch = actor.launch
        assert launch is not None
        self._refresh_nodes(force=True)
        text = str(error).strip()
        preempted = bool(getattr(error, "preempted", False))
        node_gone = actor.node_id is not None and actor.node_id not in self._nodes
        if preempted or node_gone or "its node has died" in text:
            where = f"node {actor.node_id}" if actor.node_id else "its node"
            kind = FailureKind.NODE_LOST
            message = f"the Ray {where} running the trial was lost"
            message += " (preempted)" if preempted else ""
        elif type(error).__name__ == "OutOfMemoryError" or any(w in text for w in _OOM_WORDS):
            kind = FailureKind.OOM
            message = (
                "Ray's memory monitor killed the trial: its node ran low on memory. To fix: "
                "declare memory= in tune.with_resources(...) so that fewer trials share a "
                "node, lower max_concurrent_trials, or reduce the batch size"
            )
        else:
            kind = FailureKind.CRASH
            pid = f" (pid {actor.pid})" if actor.pid else ""
            message = f"the trial's Ray actor{pid} died without reporting an error: "
            message += _why(text)
        return FailureRecord(
            kind=kind,
            message=message,
            traceback=text,
            stderr_tail=trial_stderr_tail(launch),
            attempt=launch.attempt,
            iteration=actor.last_iteration,
            checkpoint=launch.checkpoint,
        )

    def _forget(self, actor: _Actor) -> None:
        if actor in self._actors:
            self._actors.remove(actor)
        actor.events_ref = actor.where_ref = None
        if actor.group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                self._ray.kill(actor.handle, no_restart=True)  # it lives in the group
                remove_placement_group(actor.group)
            except Exception:  # the group went with its node
                pass
            actor.group = None

    def _kill(self, actor: _Actor) -> None:
        actor.killed = True
        try:
            self._ray.kill(actor.handle, no_restart=True)
        except Exception:  # already dead
            pass
        if actor.launch is None:
            self._forget(actor)  # nothing to report: its refs' errors are not awaited

    # -- deadlines: stop grace and the trial limits --------------------------------------------
    def _next_deadline(self) -> float | None:
        deadlines = []
        for actor in self._actors:
            limit = limit_deadline(actor)
            deadlines += [limit[0]] if limit is not None else []
            deadlines += [actor.stop_deadline] if actor.stop_deadline is not None else []
        return min(deadlines) if deadlines else None

    def _enforce_deadlines(self, events: list[Event]) -> None:
        now = time.monotonic()
        self._refresh_nodes()
        self._settle_dying(events)
        for actor in list(self._actors):
            limit = limit_deadline(actor)
            if self._stranded(actor):
                self._strand(actor, events)
            elif limit is not None and now >= limit[0]:
                self._time_out(actor, limit[1], now, events)
            elif actor.stop_deadline is not None and now >= actor.stop_deadline:
                actor.stop_deadline = None
                self._kill(actor)  # its events() call fails: reported as stopped

    def _stranded(self, actor: _Actor) -> bool:
        """Not placed yet, and no alive node can take it: its node went before it started."""
        if actor.launch is None or actor.node_id is not None or actor.killed:
            return False
        return not self._placeable(actor.resources)

    def _strand(self, actor: _Actor, events: list[Event]) -> None:
        """Give the trial back as NODE_LOST (it waits as PENDING); end the unplaced actor."""
        launch = actor.launch
        assert launch is not None
        failure = FailureRecord(
            kind=FailureKind.NODE_LOST,
            message=(
                "the Ray node chosen for the trial was lost before it started, and no alive "
                f"node has {_text(actor.resources)}"
            ),
            attempt=launch.attempt,
            checkpoint=launch.checkpoint,
        )
        events.append(Failed(launch.trial_id, launch.epoch, failure))
        self._release(actor)
        self._kill(actor)

    def _time_out(self, actor: _Actor, limit: str, now: float, events: list[Event]) -> None:
        launch = actor.launch
        assert launch is not None
        failure = timeout_record(actor, limit, now)
        actor.timed_out = True
        if self._by_trial.get(launch.trial_id) is actor:
            del self._by_trial[launch.trial_id]
        events.append(Failed(launch.trial_id, launch.epoch, failure))
        self._kill(actor)

    # -- the end -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every trial, end every actor; shut Ray down if this backend started it."""
        actors = list(self._actors)
        for actor in actors:
            if actor.launch is not None:
                self._send(actor, ("stop", actor.launch.trial_id, actor.launch.epoch))
            self._send(actor, ("exit",))
        pending = [a.events_ref for a in actors if a.events_ref is not None]
        if pending:
            self._ray.wait(pending, num_returns=len(pending), timeout=min(2.0, self._stop_grace))
        for actor in actors:
            try:
                self._ray.kill(actor.handle, no_restart=True)
            except Exception:
                pass
            self._forget(actor)  # and its placement group
        self._actors.clear()
        self._by_trial.clear()
        if self._started_ray:
            self._ray.shutdown()


def _node_death_wait_s() -> float:
    """How long Ray may take to declare a killed node dead (its health checks), + 1 s."""
    try:
        import importlib

        config: Any = importlib.import_module("ray._raylet").Config  # Ray's RayConfig
        checks = config.health_check_period_ms() * config.health_check_failure_threshold()
        return float(min(60.0, (checks + config.health_check_timeout_ms()) / 1000 + 1.0))
    except Exception:  # another Ray: its defaults
        return 26.0


def _ours(ray_resources: dict[str, float]) -> dict[str, float]:
    """A node's Ray resources under our names (cpu, gpu, memory, custom)."""
    out: dict[str, float] = {}
    for key, value in ray_resources.items():
        if key.startswith(_NOT_RESOURCES):
            continue
        out[_RAY_NAMES.get(key, key)] = float(value)
    return out


def _ray_name(key: str) -> str:
    return {v: k for k, v in _RAY_NAMES.items()}.get(key, key)


def _shape(resources: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((k, v) for k, v in resources.items() if v))


def _fits(want: dict[str, float], free: dict[str, float]) -> bool:
    return all(v <= free.get(k, 0.0) + _EPS for k, v in want.items() if v > 0)


def _minus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: v - b.get(k, 0.0) for k, v in a.items()}


def _text(resources: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()) if v) or "nothing"


def _why(text: str) -> str:
    """The telling part of Ray's message on a dead actor: its exit detail if given."""
    for marker in ("Worker exit detail:", "exit detail:"):
        if marker in text:
            detail = text.split(marker, 1)[1].strip()
            return detail.split(". Some common causes", 1)[0].strip()
    return _first_lines(text)


def _first_lines(text: str, n: int = 3) -> str:
    return " ".join(line.strip() for line in text.splitlines()[:n] if line.strip())
