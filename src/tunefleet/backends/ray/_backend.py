"""The Ray backend: trials run as Ray actors, on a local Ray or on a cluster.

Each actor (``_actor.TrialActor``) runs the trial loop (``backends/_loop.py``), so the
trial side (report, checkpoints, failure records) is the same code as on one machine. The
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
from dataclasses import dataclass
from typing import Any

from tunefleet._redact import get_logger
from tunefleet.backends._attempt import Worker, trial_stderr_tail
from tunefleet.backends._base import Event, Failed, TrialLaunch
from tunefleet.backends._pool import PoolBackend
from tunefleet.backends._protocol import (
    FromWorker,
    Gone,
    Start,
    ToWorker,
    TrialFailed,
    TrialFinished,
    TrialResults,
    WorkerSetup,
)
from tunefleet.backends.ray._cluster import (
    NODES_REFRESH_S,
    Nodes,
    Shape,
    describe,
    first_lines,
    fits,
    minus,
    node_death_wait_s,
    ray_name,
    shape_of,
    why,
)
from tunefleet.resources import GPU_AUTO, PlacementGroupFactory
from tunefleet.trainable import placement_of
from tunefleet.trial import FailureKind, FailureRecord

logger = get_logger(__name__)

_LONG_POLL_S = 1.0  # how long an actor's events() call waits for a message
_WAIT_WARN_S = 60.0  # warn when a trial has waited this long for resources that no node has
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


@dataclass(kw_only=True, eq=False)
class _Actor(Worker):
    """A Ray actor; `retiring` means ray.kill was called (its death is expected)."""

    handle: Any
    shape: Shape  # the resources it holds in Ray: reuse key
    resources: dict[str, float]
    where_ref: Any = None  # TrialActor.where(): (node id, pid, gpu ids), once
    group: Any = None  # its placement group (PlacementGroupFactory trials), removed with it
    events_ref: Any = None  # the outstanding TrialActor.events() call
    sent: int = 0  # messages sent: the next one's sequence number
    node_id: str | None = None
    pid: int | None = None


class RayBackend(PoolBackend[_Actor]):
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

        super().__init__(reuse=reuse_actors, stop_grace_s=stop_grace_s)
        ray = import_ray()
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(**{"log_to_driver": False, **(ray_init or {})})
        self._remote = ray.remote(TrialActor)
        setup = WorkerSetup(trainable, experiment_name, reuse_actors)
        self._payload = ray.put(cloudpickle.dumps(setup))
        self._placement = placement_of(trainable)
        self._experiment_path = experiment_path
        self._actors: list[_Actor] = []
        self._nodes = Nodes(ray)
        self._waiting_since: float | None = None  # a trial that fits no node waits
        self._warned = False
        # dead actors whose node may be dying too: (actor, error, until when to wait)
        self._dying: list[tuple[_Actor, Exception, float]] = []

    @property
    def elastic(self) -> bool:
        return True  # what fits changes with the cluster: ask can_start, not capacity

    # -- the cluster -------------------------------------------------------------------------
    def capacity(self) -> dict[str, float]:
        self._nodes.refresh()
        return self._nodes.total()

    def _held(self, idle: bool) -> dict[str, float]:
        held: dict[str, float] = {}
        for actor in self._actors:
            if actor.launch is not None or (idle and not actor.retiring):
                for key, value in actor.resources.items():
                    held[key] = held.get(key, 0.0) + value
        return held

    def unfit_reason(self, resources: dict[str, float]) -> str | None:
        if GPU_AUTO in resources:
            return (
                "asks for gpu='auto', which only the local backend supports for now; give "
                "the Ray backend a share of a GPU as a number, e.g. {'gpu': 0.25}"
            )
        return None

    def can_start(self, resources: dict[str, float]) -> bool:
        shape = shape_of(resources)
        if any(a.launch is None and not a.retiring and a.shape == shape for a in self._actors):
            return True  # an idle actor of this shape holds what the trial needs
        total = self.capacity()
        if not self._nodes.placeable(resources, self._bundles(resources)):
            self._note_waiting(resources)
            return False
        self._waiting_since = None
        if fits(resources, minus(total, self._held(idle=True))):
            return True
        if not fits(resources, minus(total, self._held(idle=False))):
            return False
        for actor in list(self._actors):  # idle actors of other shapes hold the room: end them
            if actor.launch is None and not actor.retiring:
                self._retire(actor)
                if fits(resources, minus(total, self._held(idle=True))):
                    break
        return True

    def _bundles(
        self, resources: dict[str, float], own: PlacementGroupFactory | None = None
    ) -> PlacementGroupFactory | None:
        """The trial's placement group factory (`own`: its config's, else the one given to
        `with_resources`), unless it was resized since (one bundle then)."""
        placement = own or self._placement
        if placement is None or shape_of(placement.totals()) != shape_of(resources):
            return None
        return placement

    def _note_waiting(self, resources: dict[str, float]) -> None:
        """Ask an autoscaler for a node that fits; warn once if none comes for a while."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
            try:
                from ray.autoscaler.sdk import request_resources

                bundle = {ray_name(k): v for k, v in resources.items() if v > 0}
                request_resources(bundles=[bundle])  # a no-op without an autoscaler
            except Exception:  # an old or partial Ray: nothing to ask
                pass
        elif now - self._waiting_since > _WAIT_WARN_S and not self._warned:
            self._warned = True
            logger.warning(
                "A trial needing %s has waited %.0f s: no node of the Ray cluster has that "
                "much (nodes: %d, e.g. %s). It starts when a node that fits joins.",
                describe(resources),
                now - self._waiting_since,
                len(self._nodes.alive),
                describe(self._nodes.largest()),
            )

    # -- trials ------------------------------------------------------------------------------
    def start_trial(self, launch: TrialLaunch) -> None:
        shape = shape_of(launch.resources)
        actor = next(
            (a for a in self._actors if a.launch is None and not a.retiring and a.shape == shape),
            None,
        )
        if actor is None:
            actor = self._spawn(launch.resources, shape, launch.placement)
        self._assign(actor, launch, running=True)
        start = Start(launch)  # the actor adds the GPU ids Ray gave it
        if actor.events_ref is None:  # an idle actor: the start rides on its events() call
            actor.events_ref = actor.handle.events.remote(_LONG_POLL_S, [(actor.sent, start)])
            actor.sent += 1
        else:
            self._send(actor, start)

    def _spawn(
        self, resources: dict[str, float], shape: Shape, given: PlacementGroupFactory | None = None
    ) -> _Actor:
        placement, group = self._bundles(resources, given), None
        own = resources
        if placement is not None:  # the actor takes bundle 0; what it starts, the others
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            ours = placement.own_bundles()
            bundles = [{ray_name(k): v for k, v in b.items()} for b in ours]
            group = placement_group(bundles, strategy=placement.strategy)
            own = {"cpu": 0.0, **({} if placement.head_bundle_is_empty else ours[0])}
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

    def _send(self, actor: _Actor, msg: ToWorker) -> None:
        actor.handle.send.remote(actor.sent, msg)  # numbered: the actor keeps the order
        actor.sent += 1

    def attempt_alive(self, trial_id: str) -> bool:
        dying = (entry[0] for entry in self._dying)
        held_back = any(a.launch is not None and a.launch.trial_id == trial_id for a in dying)
        return held_back or super().attempt_alive(trial_id)

    def _live_workers(self) -> list[_Actor]:
        return self._actors

    # -- events ------------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = []
        timeout = self._poll_timeout(timeout)
        if self._dying:
            timeout = min(timeout, NODES_REFRESH_S)
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

    def _handle(self, actor: _Actor, msg: FromWorker, events: list[Event]) -> None:
        if isinstance(msg, (TrialResults, TrialFinished, TrialFailed)):
            self._on_trial_message(actor, msg, events)
        elif isinstance(msg, Gone):
            self._forget(actor)

    def _on_death(self, actor: _Actor, error: Exception, events: list[Event]) -> None:
        self._forget(actor)
        if getattr(error, "actor_init_failed", False) and self._fatal is None:
            self._fatal = FailureRecord(  # every actor would fail alike: the experiment stops
                kind=FailureKind.EXCEPTION,
                message=f"could not load the trainable in a Ray actor: {first_lines(str(error))}",
                traceback=str(error),
            )
        self._report_death(actor, events, lambda: self._failure_or_wait(actor, error))

    def _failure_or_wait(self, actor: _Actor, error: Exception) -> FailureRecord | None:
        """Why the actor died; None if that waits on whether its node is dying too."""
        failure = self._death_record(actor, error)
        told = "exit detail" in str(error).lower()  # its node's raylet said why: alive
        if failure.kind == FailureKind.CRASH and actor.node_id is not None and not told:
            # Its node may be dying: Ray marks a node dead only after missed health
            # checks, and a crash is told apart from a lost node by waiting for that.
            self._dying.append((actor, error, time.monotonic() + node_death_wait_s()))
            return None
        return failure

    def _settle_dying(self, events: list[Event], *, wait_over: bool = False) -> None:
        """Report the dead actors held back: NODE_LOST once their node is gone, or CRASH."""
        if not self._dying:
            return
        self._nodes.refresh(force=True)
        now = time.monotonic()
        for entry in list(self._dying):
            actor, error, until = entry
            if actor.node_id in self._nodes.alive and now < until and not wait_over:
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
        self._nodes.refresh(force=True)
        text = str(error).strip()
        preempted = bool(getattr(error, "preempted", False))
        node_gone = actor.node_id is not None and actor.node_id not in self._nodes.alive
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
            message += why(text)
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

    def _retire(self, actor: _Actor) -> None:
        """ray.kill: its death is expected (reported as stopped if it ran a trial)."""
        actor.retiring = True
        try:
            self._ray.kill(actor.handle, no_restart=True)
        except Exception:  # already dead
            pass
        if actor.launch is None:
            self._forget(actor)  # nothing to report: its refs' errors are not awaited

    # -- deadlines: stop grace and the trial limits --------------------------------------------
    def _enforce_deadlines(self, events: list[Event]) -> None:
        self._nodes.refresh()
        self._settle_dying(events)
        for actor in list(self._actors):
            if self._stranded(actor):
                self._strand(actor, events)
        super()._enforce_deadlines(events)

    def _force_stop(self, actor: _Actor, now: float) -> float | None:
        self._retire(actor)  # its events() call fails: reported as stopped (or timed out)
        return None

    def _stranded(self, actor: _Actor) -> bool:
        """Not placed yet, and no alive node can take it: its node went before it started."""
        if actor.launch is None or actor.node_id is not None or actor.retiring:
            return False
        return not self._nodes.placeable(actor.resources, self._bundles(actor.resources))

    def _strand(self, actor: _Actor, events: list[Event]) -> None:
        """Give the trial back as NODE_LOST (it waits as PENDING); end the unplaced actor."""
        launch = actor.launch
        assert launch is not None
        failure = FailureRecord(
            kind=FailureKind.NODE_LOST,
            message=(
                "the Ray node chosen for the trial was lost before it started, and no alive "
                f"node has {describe(actor.resources)}"
            ),
            attempt=launch.attempt,
            checkpoint=launch.checkpoint,
        )
        events.append(Failed(launch.trial_id, launch.epoch, failure))
        self._release(actor)
        self._retire(actor)

    # -- the end -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every trial, end every actor; shut Ray down if this backend started it."""
        actors = list(self._actors)
        self._ask_to_exit(actors)
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
