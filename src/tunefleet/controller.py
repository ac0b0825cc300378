"""The controller: one thread, a `step()` loop in phases.

fill free slots -> wait for backend events -> apply each event -> check the
experiment's stop conditions -> flush the store. It owns no algorithm: the
searcher proposes, the scheduler and stoppers decide, the backend acts, the
store records, callbacks watch.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunefleet._metrics import MISSING, as_number, lookup, metric_value, objectives
from tunefleet._paths import safe_child, trial_dirname
from tunefleet.backends._base import Backend, Event, Finished, Results, TrialLaunch
from tunefleet.callbacks import Callback
from tunefleet.checkpoint import (
    Checkpoint,
    CheckpointKeeper,
    delete_checkpoints,
    latest_valid,
    persist_checkpoint,
    remove_temporaries,
)
from tunefleet.resources import normalize_resources
from tunefleet.schedulers._base import Cluster, Decision, Exploit, Resize, TrialScheduler
from tunefleet.schedulers._candidates import Candidates
from tunefleet.search._base import FINISHED, Searcher
from tunefleet.trial import PAUSED_BY_SCHEDULER, FailureKind, FailureRecord, Trial, TrialStatus

logger = logging.getLogger("tunefleet")

_POLL_S = 0.05
_COMMIT_EVERY_S = 0.02
_SLOW_HOOK_S = 0.5


@dataclass
class ExperimentSpec:
    """What the controller needs to know about the experiment (plain data)."""

    name: str
    path: str
    trainable_name: str
    resources: dict[str, float]
    metric: str | list[str] | None = None  # a list: several objectives
    mode: str | list[str] | None = None
    num_samples: int = 1
    max_concurrent: int = 1
    time_budget_s: float | None = None
    max_failures: int = 0
    node_loss_counts: bool = False  # NODE_LOST uses up one of max_failures
    fail_fast: bool | str = False
    trial_timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None
    nan_policy: str = "error"
    constraints: list[str] = field(default_factory=list)  # reported names, feasible <= 0
    elapsed_before_s: float = 0.0  # run time of earlier drivers of this experiment (resume)
    restart_from_scratch: set[str] = field(default_factory=set)  # resume: ignore checkpoints
    retry_base: dict[str, int] = field(default_factory=dict)  # resume: attempts already used
    stop_criteria: dict[str, float] = field(default_factory=dict)
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool = False
    trial_name_creator: Callable[[Trial], str] | None = None
    trial_dirname_creator: Callable[[Trial], str] | None = None
    id_prefix: str = "t"
    storage_url: str | None = None  # the experiment in remote storage: checkpoints go there
    storage_filesystem: Any = None  # the fsspec filesystem reaching it (for the trial side)


class Controller:
    """Runs one experiment to its end. Build it with `Tuner`; call `run()`."""

    def __init__(
        self,
        *,
        spec: ExperimentSpec,
        backend: Backend,
        store: Any,
        searcher: Searcher,
        scheduler: TrialScheduler,
        stopper: Any,
        keeper: CheckpointKeeper,
        callbacks: list[Callback],
        reporter: Any,
        trials: list[Trial] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.store = store
        self.searcher = searcher
        self.scheduler = scheduler
        self.stopper = stopper
        self.keeper = keeper
        self.callbacks = callbacks
        self.reporter = reporter
        self.clock = clock
        self.trials: dict[str, Trial] = {t.trial_id: t for t in trials or []}
        # What callbacks get as `trials`: kept in step with `self.trials`, never copied
        # per hook (a copy costs ~64 us per call at 10,000 trials). Do not modify it.
        self.trial_list: list[Trial] = list(self.trials.values())
        self.running: dict[str, Trial] = {}
        # Trials that may run next, kept up to date for the scheduler (never copied).
        self.waiting = Candidates(
            t for t in self.trials.values() if t.status in (TrialStatus.PENDING, TrialStatus.PAUSED)
        )
        # Waiting trials whose last attempt's process has not exited yet: they join
        # `waiting` once it has (a trial never runs twice at once).
        self._settling: dict[str, Trial] = {}
        self._starved = False  # the searcher had nothing the last time it was asked
        self.stopping: set[str] = set()  # trials asked to stop: later results are dropped
        self.search_done = False
        self.stop_reason: str | None = None  # set when the experiment is being stopped
        self.fatal: BaseException | None = None
        self.fatal_trial_error: BaseException | None = None  # fail_fast="raise"
        self.iteration = 0
        self._started = clock()
        self._missing_metric_warned: set[str] = set()
        self._ctrl_c = _CtrlC()
        # The objectives: one (metric, mode), or several (multi-objective search).
        self._objectives = objectives(spec.metric, spec.mode)
        self._worst: dict[str, float] = {}  # worst finite value per objective (nan_policy)
        self._to_delete: list[str] = []  # checkpoints to delete after the next commit
        self._committed = 0.0  # time.monotonic() of the last commit
        self._exploits: dict[str, Exploit] = {}  # decided, carried out when the trial pauses
        self._restore_from: dict[str, str] = {}  # exploited trials: resume from this copy
        self._resizes: dict[str, dict[str, float]] = {}  # decided, applied when paused
        self._held_back: Trial | None = None  # chosen, waits until its resources are free
        self._free_retries: dict[str, int] = {}  # NODE_LOST attempts not counted as failures
        scheduler.set_cluster(Cluster(backend.capacity(), self.running, spec.resources))
        if trials:  # resumed: retention knows what each trial kept
            for trial_id, path, result in store.kept_checkpoints():
                self._to_delete.extend(keeper.add(trial_id, path, result))

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> None:
        for cb in self.callbacks:
            cb.setup(stop=self.stopper, num_samples=self.spec.num_samples)
        with _CtrlC() as ctrl_c:
            self._ctrl_c = ctrl_c
            try:
                while not self.is_finished():
                    if ctrl_c.presses:
                        raise KeyboardInterrupt
                    self.step()
            except KeyboardInterrupt:
                logger.warning("Interrupted: stopping the running trials (they can be resumed)")
                self._wind_down("interrupted")
            except BaseException as exc:
                self.fatal = exc
                self._wind_down("error in the driver")
                raise
            finally:
                self.backend.shutdown()
                for trial in self.running.values():  # did not stop in time: keep them resumable
                    self._set_status(trial, TrialStatus.PAUSED)
                self.running.clear()
                self._save_states()
                self._flush()
                for cb in self.callbacks:
                    cb.on_experiment_end(trials=self.trial_list)
        if self.fatal_trial_error is not None:
            raise self.fatal_trial_error

    def step(self) -> None:
        self.iteration += 1
        trials = self.trial_list if self.callbacks else []
        for cb in self.callbacks:
            cb.on_step_begin(self.iteration, trials)
        self._fill_slots()
        for event in self.backend.poll(_POLL_S):
            self._apply(event)
        fatal = getattr(self.backend, "fatal", None)
        if fatal is not None:
            raise RuntimeError(f"The trainable could not be loaded in a worker:\n{fatal.traceback}")
        self._check_experiment_stop()
        self._save_states()
        self._flush(now=False)
        self.reporter.update(self)
        for cb in self.callbacks:
            cb.on_step_end(self.iteration, trials)

    def elapsed(self) -> float:
        """Seconds this experiment has run, over all its drivers (resumes included)."""
        return self.spec.elapsed_before_s + self.clock() - self._started

    def is_finished(self) -> bool:
        if self.running:
            return False
        if self.stop_reason is not None:
            return True
        return self.search_done and not self.waiting and not self._settling

    # -- phase 1: fill free slots ---------------------------------------------------------
    def _fill_slots(self) -> None:
        while self.stop_reason is None and len(self.running) < self.spec.max_concurrent:
            if self._held_back is None and not self.backend.can_start(self.spec.resources):
                return
            trial = self._held_back or self._next_trial()
            if trial is None:
                return
            # A trial whose resources were changed may need more than is free now: it
            # starts first once they are (the scheduler's choice stands).
            self._held_back = None if self.backend.can_start(trial.resources) else trial
            if self._held_back is not None:
                return
            self._launch(trial)

    def _wait(self, trial: Trial) -> None:
        """`trial` (PENDING or PAUSED) may run again once its last attempt has exited."""
        if self.backend.attempt_alive(trial.trial_id):
            self._settling[trial.trial_id] = trial
        else:
            self.waiting.add(trial)

    def _settle(self) -> None:
        for trial_id, trial in list(self._settling.items()):
            if not self.backend.attempt_alive(trial_id):
                del self._settling[trial_id]
                self.waiting.add(trial)

    def _next_trial(self) -> Trial | None:
        if self._settling:
            self._settle()
        ready = self.waiting
        if ready:
            ready.starved = self._starved and not self.running
            chosen = self.scheduler.choose_trial_to_run(ready)
            if chosen is not None:
                if chosen.status is TrialStatus.PAUSED:  # synchronous PBT exploits here
                    exploit = self.scheduler.exploit_on_resume(chosen)
                    if exploit is not None and self._can_exploit(chosen, exploit):
                        self._exploit(chosen, exploit)
                return chosen
        if self.search_done:
            if ready and ready.starved and not self._settling:
                self._end_unwanted(list(ready))  # else the run would wait for them forever
            self._starved = True
            return None
        limit = self.spec.num_samples
        if not self.searcher.self_limiting and limit != -1 and len(self.trials) >= limit:
            self.search_done = True
            return None
        trial_id = f"{self.spec.id_prefix}_{len(self.trials):05d}"
        started = time.perf_counter()
        config = self.searcher.suggest(trial_id)
        _warn_if_slow(started, f"{type(self.searcher).__name__}.suggest")
        if config is None:
            self._starved = True
            return None
        if isinstance(config, str) and config == FINISHED:
            self.search_done = True
            self._starved = True
            return None
        if not isinstance(config, dict):
            raise TypeError(
                f"{type(self.searcher).__name__}.suggest() returned {config!r}: "
                "it must return a config dict, None or FINISHED"
            )
        return self._add_trial(trial_id, config)

    def _add_trial(self, trial_id: str, config: dict[str, Any]) -> Trial:
        trial = Trial(
            trial_id=trial_id,
            index=len(self.trials),
            name=f"{self.spec.trainable_name}_{trial_id}",
            config=config,
            resources=dict(self.spec.resources),
            path="",
        )
        if self.spec.trial_name_creator is not None:
            trial.name = str(self.spec.trial_name_creator(trial))
        dirname = trial_id
        if self.spec.trial_dirname_creator is not None:
            dirname = trial_dirname(self.spec.trial_dirname_creator(trial), trial_id, config)
        trial.path = safe_child(self.spec.path, os.path.join("trials", dirname))
        self.trials[trial_id] = trial
        self.trial_list.append(trial)
        self.waiting.add(trial)
        self._starved = False
        self.store.add_trial(trial)
        self.scheduler.on_trial_add(trial)
        return trial

    def _end_unwanted(self, trials: list[Trial]) -> None:
        """The search is over and the scheduler resumes none of these: they end here."""
        for trial in trials:
            self._end_waiting(trial, "not resumed by the scheduler")

    def _end_waiting(self, trial: Trial, reason: str) -> None:
        """End a trial that is not running (TERMINATED, `reason`), as if it had stopped."""
        self.waiting.discard(trial.trial_id)
        trial.stop_reason = reason
        trial.ended_at = time.time()
        self._set_status(trial, TrialStatus.TERMINATED)
        self.scheduler.on_trial_remove(trial)
        self.searcher.on_trial_complete(trial.trial_id, self._clean(trial.last_result))
        for cb in self.callbacks:
            cb.on_trial_complete(self.iteration, self.trial_list, trial)

    def _launch(self, trial: Trial) -> None:
        resumed = trial.epoch > 0  # ran before: a retry, a resume, or after a pause
        if resumed:
            self._restart_point(trial)
            done = self._met_before_restart(trial)
            if done is not None:  # e.g. the driver died between its last result and its end
                self._end_waiting(trial, done)
                return
            if self.spec.storage_url is not None:
                # Deletes of its checkpoints wait for the remote database; the names may be
                # written again now, so they run before it starts (and half-written uploads go).
                self._flush()
                remove_temporaries(self._checkpoint_home(trial))
        self.waiting.discard(trial.trial_id)
        self.stopping.discard(trial.trial_id)
        trial.epoch += 1
        trial.stop_reason = None
        if trial.started_at is None:
            trial.started_at = time.time()
        self._set_status(trial, TrialStatus.RUNNING)
        self.running[trial.trial_id] = trial
        launch = TrialLaunch(
            trial_id=trial.trial_id,
            epoch=trial.epoch,
            name=trial.name,
            config=trial.config,
            resources=trial.resources,
            trial_dir=trial.path,
            attempt=trial.attempt,
            checkpoint=trial.latest_checkpoint,
            iteration=trial.checkpoint_iteration if trial.latest_checkpoint else 0,
            time_total=trial.checkpoint_time_total if trial.latest_checkpoint else 0.0,
            sync=self.scheduler.needs_sync_decisions,
            stop_criteria=self.spec.stop_criteria,
            checkpoint_freq=self.spec.checkpoint_frequency,
            checkpoint_at_end=self.spec.checkpoint_at_end,
            timeout_s=self.spec.trial_timeout_s,
            heartbeat_s=self.spec.heartbeat_timeout_s,
            storage_dir=self._checkpoint_home(trial) if self.spec.storage_url else None,
            storage_filesystem=self.spec.storage_filesystem,
        )
        self.backend.start_trial(launch)
        self.store.add_event(
            trial.trial_id,
            "started",
            {"epoch": trial.epoch, "attempt": trial.attempt, "checkpoint": trial.latest_checkpoint},
        )
        for cb in self.callbacks:
            hook = cb.on_trial_restore if resumed else cb.on_trial_start
            hook(self.iteration, self.trial_list, trial)

    def _met_before_restart(self, trial: Trial) -> str | None:
        """Why `trial` must not run again from its restart point, or None.

        Its result at the checkpoint it would restart from already meets a `stop`
        criterion or was its last (``done``): running it would add a step past the end.
        """
        result = trial.last_result if trial.latest_checkpoint else None
        if not result:
            return None
        if result.get("done"):
            return "done"
        for key, bound in self.spec.stop_criteria.items():
            value = result.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value) and value >= bound:
                return "stop criteria"
        return None

    def _checkpoint_home(self, trial: Trial) -> str:
        """Where the trial's checkpoints go: its folder, or its folder in remote storage."""
        if self.spec.storage_url is None:
            return trial.path
        rel = os.path.relpath(trial.path, self.spec.path).replace(os.sep, "/")
        return f"{self.spec.storage_url}/{rel}"

    def _restart_point(self, trial: Trial) -> None:
        """Before a trial runs again: its newest valid checkpoint, results rewound to it."""
        if trial.trial_id in self._restore_from:  # exploited: the copied checkpoint, as is
            trial.latest_checkpoint = self._restore_from.pop(trial.trial_id)
            return
        kept = self.store.checkpoints_of(trial.trial_id)
        if trial.trial_id in self.spec.restart_from_scratch:
            self.spec.restart_from_scratch.discard(trial.trial_id)
            kept = []
        remove_temporaries(trial.path)  # what a killed writer left; no attempt runs now
        chosen, skipped = latest_valid([path for path, _, _ in kept])
        for path, reason in skipped:
            self.keeper.forget(trial.trial_id, path)
            self._to_delete.append(path)
            logger.warning(
                "Trial %s: checkpoint %s is not usable (%s); using an older one",
                trial.trial_id,
                path,
                reason,
            )
            self.store.add_event(
                trial.trial_id, "checkpoint_invalid", {"path": path, "why": reason}
            )
            self.store.mark_checkpoint_deleted(path)
        iteration, result = 0, None
        for path, it, metrics in kept:
            if path == chosen:
                iteration, result = it, metrics
        trial.latest_checkpoint = chosen
        trial.checkpoint_iteration = iteration
        trial.checkpoint_time_total = float((result or {}).get("time_total_s", 0.0))
        if trial.iteration > iteration:
            trial.num_results = self.store.rewind_results(trial.trial_id, iteration)
            trial.last_result = result
            self.store.add_event(
                trial.trial_id, "rewound", {"to_iteration": iteration, "checkpoint": chosen}
            )

    # -- phase 2: apply events ---------------------------------------------------------------
    def _apply(self, event: Event) -> None:
        trial = self.running.get(event.trial_id)
        if trial is None or trial.epoch != event.epoch:
            self._drop_stale(event)
            return
        if isinstance(event, Results):
            for metrics, checkpoint in event.items:
                if trial.trial_id in self.stopping:
                    if checkpoint:
                        self.keeper.discard(checkpoint)
                    continue
                self._on_result(trial, metrics, checkpoint)
        elif isinstance(event, Finished):
            self._on_finished(trial, event)
        else:
            self._on_failed(trial, event.failure)

    def _drop_stale(self, event: Event) -> None:
        # A message of an attempt already given up on (stopped, failed, restarted).
        if isinstance(event, Results):
            for _, checkpoint in event.items:
                if checkpoint:
                    self.keeper.discard(checkpoint)
        logger.debug("dropped a stale %s of trial %s", type(event).__name__, event.trial_id)

    def _on_result(self, trial: Trial, result: dict[str, Any], checkpoint: str | None) -> None:
        trial.num_results += 1
        trial.last_result = result
        self.store.add_result(trial.trial_id, result)
        if checkpoint:
            self._on_checkpoint(trial, checkpoint, result)
        decision = Decision.CONTINUE
        seen = self._for_algorithms(trial, result)
        if seen is _NAN_FAILED:
            return
        if seen is not None:  # the scheduler first, as in Ray (HyperBandForBOHB annotates)
            decision = self._scheduler_decision(trial, seen)
            self.searcher.on_trial_result(trial.trial_id, seen)
        if (
            decision is Decision.CONTINUE
            and self.stopper is not None
            and self.stopper(trial.trial_id, result)
        ):
            decision = Decision.STOP
            trial.stop_reason = "stop criteria"
        if result.get("done") and decision is not Decision.STOP:
            # the trainable's last result: it ends here, whatever the scheduler wanted
            # (a pause to exploit or resize would restart a finished trial)
            self._exploits.pop(trial.trial_id, None)
            self._resizes.pop(trial.trial_id, None)
            decision = Decision.STOP
            trial.stop_reason = "done"
        for cb in self.callbacks:
            cb.on_trial_result(self.iteration, self.trial_list, trial, result)
        if decision is not Decision.CONTINUE:
            self.stopping.add(trial.trial_id)
            if decision is Decision.PAUSE:
                trial.stop_reason = PAUSED_BY_SCHEDULER
        if self.scheduler.needs_sync_decisions:
            self.backend.send_decision(trial.trial_id, trial.epoch, decision.value)
        elif decision is not Decision.CONTINUE:
            self.backend.stop_trial(trial.trial_id, trial.epoch)
        self.store.update_trial(trial)

    def _scheduler_decision(self, trial: Trial, result: dict[str, Any]) -> Decision:
        """The scheduler's decision; an `Exploit` becomes a PAUSE, carried out on pause."""
        decision = self.scheduler.on_trial_result(trial, result)
        if isinstance(decision, Exploit):
            if not self._can_exploit(trial, decision):
                return Decision.CONTINUE
            self._exploits[trial.trial_id] = decision
            decision = Decision.PAUSE
        elif isinstance(decision, Resize):
            resources = self._checked_resize(trial, decision)
            if resources is None:
                return Decision.CONTINUE
            self._resizes[trial.trial_id] = resources
            decision = Decision.PAUSE
        if decision is not Decision.CONTINUE:
            trial.stop_reason = f"scheduler ({type(self.scheduler).__name__})"
        return decision

    def _checked_resize(self, trial: Trial, resize: Resize) -> dict[str, float] | None:
        """The new resources, or None (with a warning) when they can never fit."""
        name = type(self.scheduler).__name__
        try:
            resources = normalize_resources(dict(resize.resources), f"{name}: Resize.resources")
        except (TypeError, ValueError) as exc:
            logger.warning("Trial %s: %s; it continues unchanged", trial.trial_id, exc)
            return None
        unfit = self.backend.unfit_reason(resources)
        if unfit is not None:
            logger.warning(
                "Trial %s: %s asked for %s, which never fits (%s); it continues unchanged",
                trial.trial_id,
                name,
                resources,
                unfit,
            )
            return None
        return resources

    def _can_exploit(self, trial: Trial, exploit: Exploit) -> bool:
        source = self.trials.get(exploit.source_trial_id)
        if source is None or source.latest_checkpoint is None or source is trial:
            logger.warning(
                "Trial %s: %s asked to exploit trial %s, which has no checkpoint; "
                "it continues unchanged",
                trial.trial_id,
                type(self.scheduler).__name__,
                exploit.source_trial_id,
            )
            return False
        return True

    def _exploit(self, trial: Trial, exploit: Exploit) -> None:
        """Give the paused trial a copy of the source's checkpoint and the new config."""
        source = self.trials[exploit.source_trial_id]
        assert source.latest_checkpoint is not None
        copied = persist_checkpoint(
            source.latest_checkpoint, self._checkpoint_home(trial), source.checkpoint_iteration
        )
        result = dict(source.last_result or {})
        self.store.add_event(
            trial.trial_id,
            "exploit",
            {
                "source": source.trial_id,
                "source_checkpoint": source.latest_checkpoint,
                "iteration": source.checkpoint_iteration,
                "at_iteration": trial.iteration,
                "old_config": trial.config,
                "new_config": exploit.new_config,
            },
        )
        trial.config = exploit.new_config
        trial.latest_checkpoint = copied
        trial.checkpoint_iteration = source.checkpoint_iteration
        trial.checkpoint_time_total = source.checkpoint_time_total
        self.store.add_checkpoint(trial.trial_id, source.checkpoint_iteration, copied, result)
        for dropped in self.keeper.add(trial.trial_id, copied, result):
            self.store.mark_checkpoint_deleted(dropped)
            self._to_delete.append(dropped)
        self._restore_from[trial.trial_id] = copied

    def _for_algorithms(self, trial: Trial, result: dict[str, Any]) -> Any:
        """The result as searchers and schedulers see it: never with a NaN objective.

        None: they do not see it (an objective missing). `_NAN_FAILED`: an objective was
        NaN or infinite and the trial failed (nan_policy="error"). With "worst", the
        value is replaced by the worst finite value of that objective seen so far.
        """
        if not self._usable(trial, result):
            return None
        seen = result
        for metric, mode in self._objectives:
            value = metric_value(result, metric)
            assert value is not None  # _usable checked it is a number
            if math.isfinite(value):
                self._note_worst(metric, mode, value)
                continue
            if self.spec.nan_policy == "worst":
                worst = self._worst.get(metric)
                if worst is None:
                    return None
                seen = _with_value(seen, metric, worst)
                continue
            self.stopping.add(trial.trial_id)
            self.backend.stop_trial(trial.trial_id, trial.epoch)
            self._on_failed(
                trial,
                FailureRecord(
                    kind=FailureKind.NAN_METRIC,
                    message=(
                        f"metric {metric!r} is {value} at iteration "
                        f"{result.get('training_iteration')} (FailureConfig.nan_policy="
                        "'error'; 'worst' would count it as the worst value seen)"
                    ),
                ),
            )
            self.store.update_trial(trial)
            return _NAN_FAILED
        return seen

    def _note_worst(self, metric: str, mode: str, value: float) -> None:
        worst = self._worst.get(metric)
        if worst is None or (value > worst) == (mode != "max"):
            self._worst[metric] = value

    def _usable(self, trial: Trial, result: dict[str, Any]) -> bool:
        """Whether every objective is present and a number (NaN included: see above)."""
        for metric, _ in self._objectives:
            raw = lookup(result, metric)
            if raw is MISSING:
                if trial.trial_id not in self._missing_metric_warned:
                    self._missing_metric_warned.add(trial.trial_id)
                    logger.warning(
                        "Trial %s reported a result without the metric %r (it has: %s); "
                        "such results are recorded but not used by the searcher or scheduler",
                        trial.trial_id,
                        metric,
                        ", ".join(sorted(k for k in result if k not in _AUTO_KEYS)) or "nothing",
                    )
                return False
            if as_number(raw) is None:
                return False
        return True

    def _on_checkpoint(self, trial: Trial, path: str, result: dict[str, Any]) -> None:
        trial.latest_checkpoint = path
        trial.checkpoint_iteration = int(result.get("training_iteration", trial.iteration))
        trial.checkpoint_time_total = float(result.get("time_total_s", 0.0))
        self.store.add_checkpoint(trial.trial_id, trial.checkpoint_iteration, path, result)
        for dropped in self.keeper.add(trial.trial_id, path, result):
            self.store.mark_checkpoint_deleted(dropped)
            self._to_delete.append(dropped)  # after the store has recorded the new one
        for cb in self.callbacks:
            cb.on_checkpoint(self.iteration, self.trial_list, trial, Checkpoint(path))

    def _on_finished(self, trial: Trial, event: Finished) -> None:
        if event.checkpoint:
            self._on_checkpoint(trial, event.checkpoint, trial.last_result or {})
        self.running.pop(trial.trial_id)
        self.stopping.discard(trial.trial_id)
        if event.how == "paused" or trial.stop_reason == "interrupted":
            exploit = self._exploits.pop(trial.trial_id, None)
            if exploit is not None and event.how == "paused":
                self._exploit(trial, exploit)
            resources = self._resizes.pop(trial.trial_id, None)
            if resources is not None and event.how == "paused":
                self.store.add_event(
                    trial.trial_id, "resized", {"old": trial.resources, "new": resources}
                )
                trial.resources = resources
            self._set_status(trial, TrialStatus.PAUSED)
            self._wait(trial)
            return
        if trial.num_results == 0 and event.how == "returned":  # not if stopped on purpose
            self._on_failed(
                trial,
                FailureRecord(
                    kind=FailureKind.NO_RESULT,
                    message="the trainable returned without calling tune.report()",
                    attempt=trial.attempt,
                ),
                already_released=True,
            )
            return
        if event.how == "returned" and trial.stop_reason is None:
            trial.stop_reason = "completed"
        if trial.last_result is not None:
            trial.last_result = {**trial.last_result, "done": True}
        trial.ended_at = time.time()
        trial.error = None  # an earlier attempt's failure stays in the events
        self._set_status(trial, TrialStatus.TERMINATED)
        self.searcher.on_trial_complete(trial.trial_id, self._clean(trial.last_result))
        self.scheduler.on_trial_complete(trial, trial.last_result)
        for cb in self.callbacks:
            cb.on_trial_complete(self.iteration, self.trial_list, trial)

    def _on_failed(
        self, trial: Trial, failure: FailureRecord, *, already_released: bool = False
    ) -> None:
        if not already_released:
            self.running.pop(trial.trial_id)
        self.stopping.discard(trial.trial_id)
        if failure.iteration is None:
            failure.iteration = trial.iteration
        failure.attempt = trial.attempt
        failure.checkpoint = failure.checkpoint or trial.latest_checkpoint
        self.store.add_event(trial.trial_id, "failed", failure.to_json())
        limit = self.spec.max_failures
        if failure.kind == FailureKind.NODE_LOST and not self.spec.node_loss_counts:
            self._free_retries[trial.trial_id] = self._free_retries.get(trial.trial_id, 0) + 1
        used = trial.attempt - self.spec.retry_base.get(trial.trial_id, 0)
        used -= self._free_retries.get(trial.trial_id, 0)
        if self.stop_reason is None and (limit == -1 or used < limit):
            trial.attempt += 1
            trial.error = failure
            self._set_status(trial, TrialStatus.PENDING)
            self._wait(trial)
            logger.warning(
                "Trial %s failed (%s); retrying (attempt %d) from %s",
                trial.trial_id,
                failure.one_line(),
                trial.attempt + 1,
                trial.latest_checkpoint or "scratch",
            )
            return
        trial.error = failure
        trial.ended_at = time.time()
        self._set_status(trial, TrialStatus.ERROR)
        self.searcher.on_trial_complete(trial.trial_id, self._clean(trial.last_result), error=True)
        self.scheduler.on_trial_error(trial)
        for cb in self.callbacks:
            cb.on_trial_error(self.iteration, self.trial_list, trial)
        if self.spec.fail_fast:
            self._begin_stop("fail_fast: a trial failed")
            if self.spec.fail_fast == "raise":
                from tunefleet.results import TrialError

                self.fatal_trial_error = TrialError(failure, trial.trial_id)

    def _clean(self, result: dict[str, Any] | None) -> dict[str, Any] | None:
        """The result for a searcher: None unless every objective is present and finite."""
        if result is None:
            return None
        for metric, _ in self._objectives:
            value = metric_value(result, metric)
            if value is None or not math.isfinite(value):
                return None
        return result

    # -- phase 3: experiment-level stop -----------------------------------------------------
    def _check_experiment_stop(self) -> None:
        if self.stop_reason is not None:
            return
        budget = self.spec.time_budget_s
        if budget is not None and self.elapsed() >= budget:
            self._begin_stop(f"time budget of {budget:g}s reached")
        elif self.stopper is not None and self.stopper.stop_all():
            self._begin_stop("stopper ended the experiment")

    def _begin_stop(self, reason: str) -> None:
        self.stop_reason = reason
        logger.info("Stopping the experiment: %s", reason)
        for trial in self.running.values():
            if trial.trial_id not in self.stopping:
                trial.stop_reason = "interrupted" if reason == "interrupted" else reason
                self.stopping.add(trial.trial_id)
                self.backend.stop_trial(trial.trial_id, trial.epoch)

    def _wind_down(self, reason: str) -> None:
        """Stop what runs and record what comes back, within the backend's grace periods."""
        self._begin_stop(reason)
        if reason == "interrupted":  # also those already stopping for another reason
            for trial in self.running.values():
                trial.stop_reason = "interrupted"
        deadline = time.monotonic() + 15.0
        presses = self._ctrl_c.presses
        try:
            while self.running and time.monotonic() < deadline:
                if self._ctrl_c.presses > presses:
                    logger.warning("Interrupted again: killing the trials now")
                    break
                for event in self.backend.poll(_POLL_S):
                    self._apply(event)
        except KeyboardInterrupt:
            logger.warning("Interrupted again: killing the trials now")
        self._flush()

    # -- helpers ------------------------------------------------------------------------------
    def _set_status(self, trial: Trial, status: TrialStatus) -> None:
        if trial.status is not status:
            trial.status = status
            self.store.add_event(trial.trial_id, status.value.lower(), None)
        self.store.update_trial(trial)

    def _flush(self, *, now: bool = True) -> None:
        """Commit, then delete the checkpoints retention dropped before the commit.

        Steps commit at most every `_COMMIT_EVERY_S` (a step can be a millisecond);
        a crash loses at most that much, which resume redoes exactly.
        """
        clock = time.monotonic()
        if not (now or self._to_delete or clock - self._committed >= _COMMIT_EVERY_S):
            return
        self._committed = clock
        self.store.flush()
        if self._to_delete:
            # a name written again since it was dropped (a PBT exploit's copy, say) stays
            doomed = [p for p in self._to_delete if not self.keeper.is_kept(p)]
            for path, reason in delete_checkpoints(doomed):
                logger.warning("could not delete checkpoint %s: %s", path, reason)
            self._to_delete.clear()

    def _save_states(self) -> None:
        """Every step, in the step's transaction: a resume continues from here."""
        self.store.save_state("clock", {"elapsed_s": round(self.elapsed())})
        self.store.save_state("searcher", self.searcher.get_state())
        self.store.save_state("scheduler", self.scheduler.get_state())
        if self.stopper is not None:
            self.store.save_state("stopper", self.stopper.get_state())


_NAN_FAILED = object()


def _with_value(result: dict[str, Any], metric: str, value: float) -> dict[str, Any]:
    """A copy of `result` with `metric` (a key or an "a/b" path) set to `value`."""
    if metric in result or "/" not in metric:
        return {**result, metric: value}
    head, rest = metric.split("/", 1)
    inner = result.get(head)
    return {**result, head: _with_value(inner if isinstance(inner, dict) else {}, rest, value)}


class _CtrlC:
    """Counts Ctrl-C presses during a run instead of raising wherever the driver is.

    A KeyboardInterrupt raised in the middle of reading a worker's message would cut
    it in half and leave the stream unreadable; the loop checks `presses` between
    steps instead. The first press winds down (trials stopped, results kept), the
    second kills the trials at once, the third raises KeyboardInterrupt where the
    driver is (a last resort if something hangs). Only the main thread gets signals,
    so from another thread this does nothing.
    """

    def __init__(self) -> None:
        self.presses = 0
        self._installed = False
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.presses += 1
        if self.presses >= 3:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            previous = signal.SIG_DFL if self._previous is None else self._previous
            signal.signal(signal.SIGINT, previous)
            self._installed = False


_AUTO_KEYS = frozenset(
    {
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "time_since_restore",
        "iterations_since_restore",
        "timestamp",
        "trial_id",
        "pid",
        "done",
        "checkpoint_dir_name",
    }
)


def _warn_if_slow(started: float, what: str) -> None:
    elapsed = time.perf_counter() - started
    if elapsed > _SLOW_HOOK_S:
        logger.warning("%s took %.2fs; the controller waits for it", what, elapsed)
