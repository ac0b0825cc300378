"""The controller: one thread, a `step()` loop in phases.

fill free slots -> wait for backend events -> apply each event -> check the
experiment's stop conditions -> flush the store. It owns no algorithm: the
searcher proposes, the scheduler and stoppers decide, the backend acts, the
store records, callbacks watch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tunefleet.backends._base import CHECKPOINT_ONLY, Backend, Event, Finished, FinishHow, Results
from tunefleet.callbacks import Callback
from tunefleet.engine import controller_util as util
from tunefleet.engine.commit import Commits, save_states
from tunefleet.engine.controller_util import CtrlC, ask_searcher, total_trials, wants_checkpoint
from tunefleet.engine.decisions import PausePlans, Retries, can_exploit, ended_by, experiment_stop
from tunefleet.engine.experiment_spec import ExperimentSpec
from tunefleet.engine.launch import new_trial, trial_launch
from tunefleet.engine.objective_filter import NanObjective
from tunefleet.engine.restart import (
    checkpoint_home,
    copy_for_exploit,
    met_before_restart,
    record_checkpoint,
    restart_point,
    restored,
)
from tunefleet.engine.waiting import Waiting
from tunefleet.progress.live import RunProgress, StatusReporter
from tunefleet.schedulers._base import Cluster, Decision, Exploit, TrialScheduler
from tunefleet.search._base import FINISHED, Searcher
from tunefleet.stoppers import Stopper
from tunefleet.storage.checkpoint import Checkpoint, CheckpointKeeper, remove_temporaries
from tunefleet.store import ExperimentStore
from tunefleet.trial import FailureRecord, StopCause, Trial, TrialStatus

__all__ = ["Controller", "ExperimentSpec"]  # ExperimentSpec lives in experiment_spec.py

logger = logging.getLogger("tunefleet")

_POLL_S = 0.05
_WAITS = (TrialStatus.PENDING, TrialStatus.PAUSED)
# stopped by Ctrl-C/SIGTERM, a driver error (user code raised) or fail_fast: PAUSED, resumable
_RESUMABLE = (StopCause.INTERRUPTED, StopCause.DRIVER_ERROR, StopCause.FAIL_FAST)


class Controller:
    """Runs one experiment to its end. Build it with `Tuner`; call `run()`."""

    def __init__(
        self,
        *,
        spec: ExperimentSpec,
        backend: Backend,
        store: ExperimentStore,
        searcher: Searcher,
        scheduler: TrialScheduler,
        stopper: Stopper | None,
        keeper: CheckpointKeeper,
        callbacks: list[Callback],
        reporter: StatusReporter,
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
        self.waiting = Waiting(
            (t for t in self.trials.values() if t.status in _WAITS), backend.attempt_alive
        )
        self._starved = False  # the searcher had nothing the last time it was asked
        self.stopping: set[str] = set()  # trials asked to stop: later results are dropped
        self.search_done = False
        self.stop_reason: StopCause | str | None = None  # set when the experiment is stopping
        self.fatal: BaseException | None = None
        self.fatal_trial_error: BaseException | None = None  # fail_fast="raise"
        self._tags: dict[str, str] = {}  # trial id -> its experiment tag, redacted
        self.iteration = 0
        self._started = clock()
        self.ctrl_c = CtrlC()
        # What searchers and schedulers see of each result (one objective or several).
        self._filter = util.result_filter(spec, scheduler)
        self._commits = Commits(store, keeper, before_commit=self._save_states)
        name = type(scheduler).__name__
        self._plans = PausePlans(name, self.trials, backend.unfit_reason, keeper.is_kept)
        self._endings = util.Endings(searcher, scheduler, self._filter.clean)  # once per trial
        self._waits = util.Waits(scheduler, self.running)  # results that wait for a decision
        self._restore_from: dict[str, tuple[str, str]] = {}  # exploited: (copy, its source)
        self._held_back: Trial | None = None  # chosen, waits until its resources are free
        self._retries = Retries.of(spec, backend)
        self._total = total_trials(searcher, spec.num_samples)  # what the live view shows
        cluster = Cluster(backend.capacity(), self.running, spec.resources, self.trial_list)
        scheduler.set_cluster(cluster)
        if trials:  # resumed: retention knows what each trial kept
            for trial_id, path, result in store.kept_checkpoints():
                self._commits.delete_later(keeper.add(trial_id, path, result))

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> None:
        for cb in self.callbacks:
            cb.setup(
                stop=self.stopper, num_samples=self.spec.num_samples, total_num_samples=self._total
            )
        with util.counting_presses() as ctrl_c:  # fit()'s, shared
            self.ctrl_c = ctrl_c
            try:
                while not self.is_finished():
                    if ctrl_c.presses:
                        raise KeyboardInterrupt
                    self.step()
            except KeyboardInterrupt:
                logger.warning("Interrupted: stopping the running trials (they can be resumed)")
                self._wind_down(StopCause.INTERRUPTED)
            except BaseException as exc:
                self.fatal = exc
                self._wind_down(StopCause.DRIVER_ERROR)
                raise
            finally:
                ctrl_c.winding_down = True  # from here on, a press never raises
                self.backend.shutdown()
                for trial in self.running.values():  # did not stop in time: keep them resumable
                    self._set_status(trial, TrialStatus.PAUSED)
                self.running.clear()
                self._commits.close()  # the last commit, with the algorithms' states
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
        if self.stop_reason is None:
            reason = experiment_stop(self.spec.time_budget_s, self.elapsed, self.stopper)
            if reason is not None:
                self._begin_stop(reason)
        self._fill_slots()  # the slots just freed: their workers wait while the step ends
        self._commits.flush(now=False)  # with the algorithms' states, when it commits
        self.reporter.update(self.progress())
        for cb in self.callbacks:
            cb.on_step_end(self.iteration, trials)

    def elapsed(self) -> float:
        """Seconds this experiment has run, over all its drivers (resumes included)."""
        return self.spec.elapsed_before_s + self.clock() - self._started

    def progress(self) -> RunProgress:
        """What the live view shows of the run now."""
        return RunProgress(
            self.trial_list,
            self.elapsed(),
            self._total,
            self.spec.time_budget_s,
            non_finite=self._filter.non_finite,
        )

    def is_finished(self) -> bool:
        if self.running:
            return False
        if self.stop_reason is not None:
            return True
        return self.search_done and not self.waiting.ready and not self.waiting.settling

    # -- phase 1: fill free slots ---------------------------------------------------------
    def _fill_slots(self) -> None:
        while self.stop_reason is None and len(self.running) < self.spec.max_concurrent:
            if self._held_back is None and not self._may_start_one():
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

    def _may_start_one(self) -> bool:
        """Whether a trial may fit now (with per-trial resources: only the trial knows)."""
        return self.spec.per_trial is not None or self.backend.can_start(self.spec.resources)

    def _next_trial(self) -> Trial | None:
        if self.waiting.settling:
            self.waiting.settle()
        ready = self.waiting.ready
        if ready:
            ready.starved = self._starved and not self.running
            chosen = self.scheduler.choose_trial_to_run(ready)
            if chosen is not None:
                if chosen.status is TrialStatus.PAUSED:  # synchronous PBT exploits here
                    exploit = self.scheduler.exploit_on_resume(chosen)
                    name = type(self.scheduler).__name__
                    if exploit is not None and can_exploit(chosen, exploit, self.trials, name):
                        self._exploit(chosen, exploit)
                return chosen
        if self.search_done:
            if ready and ready.starved and not self.waiting.settling:
                # the scheduler resumes none of them: they end, or the run would wait forever
                for trial in list(ready):
                    self._end_waiting(trial, StopCause.NOT_RESUMED_BY_SCHEDULER)
            self._starved = True
            return None
        limit = self.spec.num_samples
        if not self.searcher.self_limiting and limit != -1 and len(self.trials) >= limit:
            self.search_done = True
            return None
        trial_id = f"{self.spec.id_prefix}_{len(self.trials):05d}"
        began = time.monotonic()
        config = ask_searcher(self.searcher, trial_id)
        self._commits.searcher_time(time.monotonic() - began)  # not counted between commits
        if config == FINISHED:
            self.search_done = True
        if not isinstance(config, dict):
            self._starved = True
            return None
        config = self.scheduler.complete_config(config)  # PBT's mutated keys, if missing
        return self._add_trial(new_trial(self.spec, trial_id, len(self.trials), config))

    def _add_trial(self, trial: Trial) -> Trial:
        self.trials[trial.trial_id] = trial
        self.trial_list.append(trial)
        self.waiting.ready.add(trial)
        self._starved = False
        self.store.add_trial(trial)
        self.scheduler.on_trial_add(trial)
        return trial

    def _end_waiting(self, trial: Trial, reason: StopCause) -> None:
        """End a trial that is not running (TERMINATED, `reason`), as if it had stopped."""
        self.waiting.ready.discard(trial.trial_id)
        trial.stop_reason = reason
        trial.ended_at = time.time()
        self._set_status(trial, TrialStatus.TERMINATED)
        self._endings.removed(trial)
        for cb in self.callbacks:
            cb.on_trial_complete(self.iteration, self.trial_list, trial)

    def _launch(self, trial: Trial) -> None:
        resumed = trial.epoch > 0  # ran before: a retry, a resume, or after a pause
        restart = self._restart_point(trial) if resumed else {}
        if resumed:
            done = met_before_restart(trial, self.spec.stop_criteria)
            if done is not None:  # e.g. the driver died between its last result and its end
                self._end_waiting(trial, done)
                return
            self._commits.before_relaunch(self._checkpoint_home(trial))  # its deletes ran
            if self.spec.storage_url is not None:  # remote: its deferred deletes, cut uploads
                remove_temporaries(self._checkpoint_home(trial))
        self.waiting.ready.discard(trial.trial_id)
        self.stopping.discard(trial.trial_id)
        trial.epoch += 1
        trial.stop_reason = None
        if trial.started_at is None:
            trial.started_at = time.time()
        self._set_status(trial, TrialStatus.RUNNING)
        self.running[trial.trial_id] = trial
        home = self._checkpoint_home(trial) if self.spec.storage_url else None  # remote
        dirs = bool(self.callbacks) or not self.backend.makes_trial_dirs  # else its worker
        launch = trial_launch(trial, self.spec, self._waits, home, dirs, **restart)
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

    def _restart_point(self, trial: Trial) -> dict[str, Any]:
        """Before a trial runs again: its newest checkpoint, results rewound to it; returns
        what its launch adds: the older ones, for the attempt to fall back to (it verifies
        them, not the driver), or the checkpoint a PBT exploit gave it, for it to copy."""
        if trial.trial_id in self._restore_from:  # exploited: the copy, made by the attempt
            trial.latest_checkpoint, source = self._restore_from.pop(trial.trial_id)
            return {"copy_from": source}
        from_scratch = trial.trial_id in self.spec.restart_from_scratch
        self.spec.restart_from_scratch.discard(trial.trial_id)
        return {"fallbacks": restart_point(trial, self.store, from_scratch=from_scratch)}

    # -- phase 2: apply events ---------------------------------------------------------------
    def _apply(self, event: Event) -> None:
        trial = self.running.get(event.trial_id)
        if trial is None or trial.epoch != event.epoch:
            self._drop_stale(event)
            return
        self._commits.unpin(trial.trial_id)  # its attempt has made the copy it had to, if any
        if isinstance(event, Results):
            for metrics, checkpoint in event.items:
                # late: asked to stop, or failed (a NaN) or ended earlier in this batch
                if trial.trial_id in self.stopping or trial.trial_id not in self.running:
                    if checkpoint:
                        self.keeper.discard(checkpoint)
                    continue
                if restored(trial, metrics, self.store, self.keeper):  # an older checkpoint
                    continue
                if metrics.get(CHECKPOINT_ONLY):  # asked for after the last result
                    if checkpoint:
                        self._on_checkpoint(trial, checkpoint, trial.last_result or {})
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
        util.add_tag(result, trial, self._tags)  # Ray's trial adds it
        trial.last_result = result
        self.store.add_result(trial.trial_id, result)
        if checkpoint:
            self._on_checkpoint(trial, checkpoint, result)
        seen = self._filter.for_algorithms(trial.trial_id, result)
        if isinstance(seen, NanObjective):
            self._fail_on_nan(trial, result, seen)
            return
        # The stopper first, as in Ray: a result that ends the trial is not the scheduler's.
        cause = ended_by(trial.trial_id, result, self.stopper)
        decision = Decision.CONTINUE if cause is None else Decision.STOP
        if cause is not None:
            trial.stop_reason = cause
        elif seen is not None:  # the scheduler, then the searcher (HyperBandForBOHB annotates)
            decision = self._plans.ask(self.scheduler, trial, seen)
            if decision is not Decision.STOP:  # else on_trial_complete gets it, as in Ray
                self.searcher.on_trial_result(trial.trial_id, seen)
        for cb in self.callbacks:
            cb.on_trial_result(self.iteration, self.trial_list, trial, result)
        if checkpoint is None and wants_checkpoint(result, seen):  # before the decision
            self.backend.request_checkpoint(trial.trial_id, trial.epoch)
        if decision is not Decision.CONTINUE:
            self.stopping.add(trial.trial_id)
            if decision is Decision.PAUSE:
                trial.stop_reason = StopCause.PAUSED_BY_SCHEDULER
            else:  # ended now: from here no scheduler ranks it or exploits from it
                self._endings.completed(trial)
        if self._waits.waits(trial, result):  # the trial waits for it: at once
            self.backend.send_decision(trial.trial_id, trial.epoch, decision.value)
        elif decision is not Decision.CONTINUE:
            self.backend.stop_trial(trial.trial_id, trial.epoch)
        self.store.update_trial(trial)

    def _exploit(self, trial: Trial, exploit: Exploit, source: Trial | None = None) -> None:
        """Give the paused trial a copy of the source's checkpoint and the new config;
        `source`: the source as it was when the scheduler decided (else as it is now)."""
        source = source or self.trials[exploit.source_trial_id]
        home = self._checkpoint_home(trial)
        copied, origin, dropped = copy_for_exploit(
            trial, source, exploit, home, self.store, self.keeper
        )
        origin = self._restore_from.get(source.trial_id, ("", origin))[1]  # its own, unmade
        self._restore_from[trial.trial_id] = (copied, origin)
        self._commits.delete_later(dropped)
        self._commits.pin(trial.trial_id, origin)  # kept until its next attempt has copied it

    def _fail_on_nan(self, trial: Trial, result: dict[str, Any], nan: NanObjective) -> None:
        """An objective is NaN or infinite (nan_policy="error"): the trial fails."""
        self.stopping.add(trial.trial_id)
        self.backend.stop_trial(trial.trial_id, trial.epoch)
        message = nan.message(result.get("training_iteration"))
        self._on_failed(trial, FailureRecord(kind=nan.kind, message=message))
        self.store.update_trial(trial)

    def _on_checkpoint(self, trial: Trial, path: str, result: dict[str, Any]) -> None:
        dropped = record_checkpoint(trial, path, result, self.store, self.keeper)
        self._commits.delete_later(dropped)  # after the store has recorded the new one
        for cb in self.callbacks:
            cb.on_trial_save(self.iteration, self.trial_list, trial)
            cb.on_checkpoint(self.iteration, self.trial_list, trial, Checkpoint(path))

    def _on_finished(self, trial: Trial, event: Finished) -> None:
        if event.checkpoint:
            self._on_checkpoint(trial, event.checkpoint, trial.last_result or {})
        self.running.pop(trial.trial_id)
        self.stopping.discard(trial.trial_id)
        paused = event.how is FinishHow.PAUSED
        if paused or trial.stop_reason in _RESUMABLE:
            exploit, donor, resources = self._plans.take(trial.trial_id)
            if exploit is not None and paused:
                self._exploit(trial, exploit, donor)
            if resources is not None and paused:
                self.store.add_event(
                    trial.trial_id, "resized", {"old": trial.resources, "new": resources}
                )
                trial.resources = resources
            self._set_status(trial, TrialStatus.PAUSED)
            self.waiting.add(trial)
            return
        returned = event.how is FinishHow.RETURNED
        if returned and trial.stop_reason is None:
            trial.stop_reason = StopCause.COMPLETED
        if returned and trial.num_results == 0:  # TERMINATED as in Ray, but not silently
            util.warn_no_result(trial)
        if trial.last_result:
            trial.last_result = {**trial.last_result, "done": True}
        trial.ended_at = time.time()
        trial.error = None  # an earlier attempt's failure stays in the events
        self._set_status(trial, TrialStatus.TERMINATED)
        self._endings.completed(trial)  # unless it heard already, at the result that ended it
        for cb in self.callbacks:
            cb.on_trial_complete(self.iteration, self.trial_list, trial)

    def _on_failed(self, trial: Trial, failure: FailureRecord) -> None:
        if self._endings.told(trial.trial_id):  # failed on its way out: it had ended already
            self.store.add_event(trial.trial_id, "failed", failure.to_json())
            self._on_finished(trial, Finished(trial.trial_id, trial.epoch, FinishHow.STOPPED))
            return
        self.running.pop(trial.trial_id)
        self.stopping.discard(trial.trial_id)
        if failure.iteration is None:
            failure.iteration = trial.iteration
        failure.attempt = trial.attempt
        failure.checkpoint = failure.checkpoint or trial.latest_checkpoint
        self.store.add_event(trial.trial_id, "failed", failure.to_json())
        if self._retries.allow(trial, failure) and self.stop_reason is None:
            trial.attempt += 1
            trial.error = failure
            self._set_status(trial, TrialStatus.PENDING)
            self.waiting.add(trial)
            for cb in self.callbacks:
                cb.on_trial_recover(self.iteration, self.trial_list, trial)
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
        self._endings.failed(trial)
        for cb in self.callbacks:
            cb.on_trial_error(self.iteration, self.trial_list, trial)
        if self.spec.fail_fast:
            self._begin_stop(StopCause.FAIL_FAST)
            if self.spec.fail_fast == "raise":
                from tunefleet.results import TrialError

                self.fatal_trial_error = TrialError.of(failure, trial.trial_id)

    # -- phase 3: experiment-level stop -----------------------------------------------------
    def _begin_stop(self, reason: StopCause | str) -> None:
        self.stop_reason = reason
        logger.info("Stopping the experiment: %s", reason)
        for trial in self.running.values():
            if trial.trial_id not in self.stopping:
                trial.stop_reason = reason
                self.stopping.add(trial.trial_id)
                self.backend.stop_trial(trial.trial_id, trial.epoch)

    def _wind_down(self, reason: StopCause) -> None:
        """Stop what runs and record what comes back, within the backend's grace periods."""
        self.ctrl_c.winding_down = True
        self._begin_stop(reason)
        if reason in _RESUMABLE:  # also those stopping for another reason, unless ended
            for trial in self.running.values():
                if not self._endings.told(trial.trial_id):
                    trial.stop_reason = reason
        deadline = time.monotonic() + 15.0
        presses = min(self.ctrl_c.presses, 1)  # a press since the first one: kill now
        try:
            while self.running and time.monotonic() < deadline:
                if self.ctrl_c.presses > presses:
                    logger.warning("Interrupted again: killing the trials now")
                    break
                for event in self.backend.poll(_POLL_S):
                    self._apply(event)
        except KeyboardInterrupt:
            logger.warning("Interrupted again: killing the trials now")
        self._commits.flush()

    # -- helpers ------------------------------------------------------------------------------
    def _set_status(self, trial: Trial, status: TrialStatus) -> None:
        if trial.status is not status:
            trial.status = status
            self.store.add_event(trial.trial_id, status.value.lower(), None)
        self.store.update_trial(trial)

    def _save_states(self) -> None:
        parts = (self.searcher, self.scheduler, self.stopper, self.callbacks)
        save_states(self.store, self.elapsed(), *parts)
