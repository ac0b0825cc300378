"""The controller: one thread, a `step()` loop in phases.

fill free slots -> wait for backend events -> apply each event -> check the
experiment's stop conditions -> flush the store. It owns no algorithm: the
searcher proposes, the scheduler and stoppers decide, the backend acts, the
store records, callbacks watch.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from tunefleet.backends._base import Backend, Event, Finished, Results, TrialLaunch
from tunefleet.callbacks import Callback
from tunefleet.engine.controller_util import CtrlC, warn_if_slow
from tunefleet.engine.decisions import can_exploit, checked_resize
from tunefleet.engine.experiment_spec import ExperimentSpec
from tunefleet.engine.objective_filter import NanObjective, ObjectiveFilter
from tunefleet.engine.restart import (
    checkpoint_home,
    copy_for_exploit,
    met_before_restart,
    restart_point,
)
from tunefleet.schedulers._base import Cluster, Decision, Exploit, Resize, TrialScheduler
from tunefleet.schedulers._candidates import Candidates
from tunefleet.search._base import FINISHED, Searcher
from tunefleet.storage.checkpoint import (
    Checkpoint,
    CheckpointKeeper,
    delete_checkpoints,
    remove_temporaries,
)
from tunefleet.storage.paths import safe_child, trial_dirname
from tunefleet.trial import PAUSED_BY_SCHEDULER, FailureKind, FailureRecord, Trial, TrialStatus

__all__ = ["Controller", "ExperimentSpec"]  # ExperimentSpec lives in experiment_spec.py

logger = logging.getLogger("tunefleet")

_POLL_S = 0.05
_COMMIT_EVERY_S = 0.02


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
        self._ctrl_c = CtrlC()
        # What searchers and schedulers see of each result (one objective or several).
        self._filter = ObjectiveFilter(spec.metric, spec.mode, nan_policy=spec.nan_policy)
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
        with CtrlC() as ctrl_c:
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
        fatal = self.backend.fatal
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
        warn_if_slow(started, f"{type(self.searcher).__name__}.suggest")
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
        self.searcher.on_trial_complete(trial.trial_id, self._filter.clean(trial.last_result))
        for cb in self.callbacks:
            cb.on_trial_complete(self.iteration, self.trial_list, trial)

    def _launch(self, trial: Trial) -> None:
        resumed = trial.epoch > 0  # ran before: a retry, a resume, or after a pause
        if resumed:
            self._restart_point(trial)
            done = met_before_restart(trial, self.spec.stop_criteria)
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

    def _checkpoint_home(self, trial: Trial) -> str:
        return checkpoint_home(trial.path, self.spec.path, self.spec.storage_url)

    def _restart_point(self, trial: Trial) -> None:
        """Before a trial runs again: its newest valid checkpoint, results rewound to it."""
        if trial.trial_id in self._restore_from:  # exploited: the copied checkpoint, as is
            trial.latest_checkpoint = self._restore_from.pop(trial.trial_id)
            return
        from_scratch = trial.trial_id in self.spec.restart_from_scratch
        self.spec.restart_from_scratch.discard(trial.trial_id)
        unusable = restart_point(trial, self.store, self.keeper, from_scratch=from_scratch)
        self._to_delete.extend(unusable)

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
        seen = self._filter.for_algorithms(trial.trial_id, result)
        if isinstance(seen, NanObjective):
            self._fail_on_nan(trial, result, seen)
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
        name = type(self.scheduler).__name__
        if isinstance(decision, Exploit):
            if not self._can_exploit(trial, decision):
                return Decision.CONTINUE
            self._exploits[trial.trial_id] = decision
            decision = Decision.PAUSE
        elif isinstance(decision, Resize):
            resources = checked_resize(trial.trial_id, decision, name, self.backend.unfit_reason)
            if resources is None:
                return Decision.CONTINUE
            self._resizes[trial.trial_id] = resources
            decision = Decision.PAUSE
        if decision is not Decision.CONTINUE:
            trial.stop_reason = f"scheduler ({name})"
        return decision

    def _can_exploit(self, trial: Trial, exploit: Exploit) -> bool:
        return can_exploit(trial, exploit, self.trials, type(self.scheduler).__name__)

    def _exploit(self, trial: Trial, exploit: Exploit) -> None:
        """Give the paused trial a copy of the source's checkpoint and the new config."""
        source = self.trials[exploit.source_trial_id]
        home = self._checkpoint_home(trial)
        copied, dropped = copy_for_exploit(trial, source, exploit, home, self.store, self.keeper)
        self._to_delete.extend(dropped)
        self._restore_from[trial.trial_id] = copied

    def _fail_on_nan(self, trial: Trial, result: dict[str, Any], nan: NanObjective) -> None:
        """An objective is NaN or infinite (nan_policy="error"): the trial fails."""
        self.stopping.add(trial.trial_id)
        self.backend.stop_trial(trial.trial_id, trial.epoch)
        message = nan.message(result.get("training_iteration"))
        self._on_failed(trial, FailureRecord(kind=FailureKind.NAN_METRIC, message=message))
        self.store.update_trial(trial)

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
        self.searcher.on_trial_complete(trial.trial_id, self._filter.clean(trial.last_result))
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
        self.searcher.on_trial_complete(
            trial.trial_id, self._filter.clean(trial.last_result), error=True
        )
        self.scheduler.on_trial_error(trial)
        for cb in self.callbacks:
            cb.on_trial_error(self.iteration, self.trial_list, trial)
        if self.spec.fail_fast:
            self._begin_stop("fail_fast: a trial failed")
            if self.spec.fail_fast == "raise":
                from tunefleet.results import TrialError

                self.fatal_trial_error = TrialError(failure, trial.trial_id)

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
