"""What the controller decides from what it is told, before it acts.

First, as in Ray Tune, whether the stopper or the trainable ends the trial at a
result (`ended_by`): then the scheduler does not see that result. Otherwise a
scheduler's `Exploit` or `Resize` is checked: one that can never be carried out is
refused with a warning and the trial continues unchanged (the scheduler is not asked
again); an accepted one is a pause, carried out once the trial has paused
(`PausePlans`), from the source's checkpoint as it was when the scheduler decided.
Then: whether a failed trial runs again (`Retries`), and whether the experiment ends
(`experiment_stop`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tunefleet.resources import normalize_resources
from tunefleet.schedulers._base import Decision, Exploit, Resize, TrialScheduler
from tunefleet.stoppers import Stopper
from tunefleet.trial import FailureKind, FailureRecord, StopCause, Trial

if TYPE_CHECKING:
    from tunefleet.backends import Backend
    from tunefleet.engine.experiment_spec import ExperimentSpec

logger = logging.getLogger("tunefleet")
# the base scheduler's hook, which always answers CONTINUE: not called (a few us a result)
_ALWAYS_CONTINUES = TrialScheduler.on_trial_result


def can_exploit(
    trial: Trial, exploit: Exploit, trials: Mapping[str, Trial], scheduler_name: str
) -> bool:
    """Whether the source trial exists, is another trial, and has a checkpoint to copy."""
    source = trials.get(exploit.source_trial_id)
    if source is None or source.latest_checkpoint is None or source is trial:
        logger.warning(
            "Trial %s: %s asked to exploit trial %s, which has no checkpoint; "
            "it continues unchanged",
            trial.trial_id,
            scheduler_name,
            exploit.source_trial_id,
        )
        return False
    return True


def checked_resize(
    trial_id: str,
    resize: Resize,
    scheduler_name: str,
    unfit_reason: Callable[[dict[str, float]], str | None],
) -> dict[str, float] | None:
    """The new resources, or None (with a warning) when they can never fit.

    `unfit_reason` is the backend's: why resources can never fit, or None.
    """
    try:
        resources = normalize_resources(
            dict(resize.resources), f"{scheduler_name}: Resize.resources"
        )
    except (TypeError, ValueError) as exc:
        logger.warning("Trial %s: %s; it continues unchanged", trial_id, exc)
        return None
    unfit = unfit_reason(resources)
    if unfit is not None:
        logger.warning(
            "Trial %s: %s asked for %s, which never fits (%s); it continues unchanged",
            trial_id,
            scheduler_name,
            resources,
            unfit,
        )
        return None
    return resources


class PausePlans:
    """Exploits and resizes a scheduler decided, kept until their trial has paused.

    An exploit keeps a copy of its source trial as it was at the decision: the source
    runs on (and may end) while the trial pauses, and the trial must restart from the
    checkpoint the scheduler chose, not from a later one (e.g. the source's last,
    past which nothing may run). `is_kept` (retention's) says whether that checkpoint
    still exists when the trial has paused.
    """

    def __init__(
        self,
        scheduler_name: str,
        trials: Mapping[str, Trial],
        unfit_reason: Callable[[dict[str, float]], str | None],
        is_kept: Callable[[str], bool],
    ) -> None:
        self._name = scheduler_name
        self._trials = trials
        self._unfit_reason = unfit_reason
        self._is_kept = is_kept
        self._exploits: dict[str, tuple[Exploit, Trial]] = {}
        self._resizes: dict[str, dict[str, float]] = {}

    def decide(self, trial: Trial, decision: Decision | Exploit | Resize) -> Decision:
        """What to do now: an accepted `Exploit` or `Resize` is a PAUSE, a refused one
        CONTINUE."""
        if isinstance(decision, Exploit):
            if not can_exploit(trial, decision, self._trials, self._name):
                return Decision.CONTINUE
            donor = copy.copy(self._trials[decision.source_trial_id])  # as it is now
            self._exploits[trial.trial_id] = (decision, donor)
            return Decision.PAUSE
        if isinstance(decision, Resize):
            resources = checked_resize(trial.trial_id, decision, self._name, self._unfit_reason)
            if resources is None:
                return Decision.CONTINUE
            self._resizes[trial.trial_id] = resources
            return Decision.PAUSE
        if isinstance(decision, Decision):
            return decision
        try:  # "CONTINUE", as Ray's TrialScheduler.CONTINUE is a plain string
            return Decision(decision)
        except ValueError:
            raise ValueError(
                f"{self._name}.on_trial_result() returned {decision!r} for trial "
                f"{trial.trial_id}: it must return TrialScheduler.CONTINUE, PAUSE or STOP "
                "(the strings 'CONTINUE', 'PAUSE', 'STOP'), an Exploit or a Resize"
            ) from None

    def ask(self, scheduler: TrialScheduler, trial: Trial, result: dict[str, Any]) -> Decision:
        """The scheduler's decision on a result (an `Exploit` or `Resize` is a PAUSE,
        carried out on pause); the trial's stop reason names the scheduler unless it
        continues."""
        if getattr(scheduler.on_trial_result, "__func__", None) is _ALWAYS_CONTINUES:
            return Decision.CONTINUE  # FIFO, and every scheduler that decides nothing
        decision = self.decide(trial, scheduler.on_trial_result(trial, result))
        if decision is not Decision.CONTINUE:
            note = scheduler.stop_note(trial) if hasattr(scheduler, "stop_note") else None
            detail = f"{self._name}: {note}" if note and decision is Decision.STOP else self._name
            trial.stop_reason = StopCause.SCHEDULER.with_detail(detail)
        return decision

    def take(self, trial_id: str) -> tuple[Exploit | None, Trial | None, dict[str, float] | None]:
        """The trial's planned exploit with its source as it was at the decision, and
        its new resources, forgotten here. The exploit is dropped (with a warning) when
        retention has deleted the source's checkpoint since."""
        exploit, donor = self._exploits.pop(trial_id, (None, None))
        resources = self._resizes.pop(trial_id, None)
        path = donor.latest_checkpoint if donor is not None else None
        if exploit is not None and (path is None or not self._is_kept(path)):
            logger.warning(
                "Trial %s: the checkpoint %s of trial %s that %s chose to exploit was "
                "deleted by retention (CheckpointConfig.num_to_keep) before the trial "
                "paused; it continues unchanged",
                trial_id,
                path,
                exploit.source_trial_id,
                self._name,
            )
            return None, None, resources
        return exploit, donor, resources


def ended_by(trial_id: str, result: dict[str, Any], stopper: Stopper | None) -> StopCause | None:
    """Why the trial ends at this result, asked before the scheduler (as in Ray Tune):
    the stopper (the ``stop`` dict, a `Stopper` or a function), or the trainable's
    ``done``; None when it runs on. A result that ends its trial is not the scheduler's
    to rank or act on."""
    if stopper is not None and stopper(trial_id, result):
        return StopCause.STOP_CRITERIA
    if result.get("done"):
        return StopCause.DONE
    return None


class Retries:
    """Whether a failed trial runs again under `FailureConfig.max_failures` (-1: always).

    Attempts used before a resume that granted new ones (`retry_base`) do not count;
    nor does a lost node unless `node_loss_counts`, nor a failure the backend has fixed
    (`backend_fixed`, the backend's `free_retry`: a ``gpu="auto"`` GPU_OOM).
    """

    def __init__(
        self,
        max_failures: int,
        node_loss_counts: bool,
        retry_base: dict[str, int],
        backend_fixed: Callable[[str, FailureRecord], bool] = lambda _t, _f: False,
    ):
        self._limit = max_failures
        self._node_loss_counts = node_loss_counts
        self._base = retry_base
        self._backend_fixed = backend_fixed  # the backend's `free_retry`
        self._free: dict[str, int] = {}  # attempts not counted as failures (NODE_LOST, ...)

    @classmethod
    def of(cls, spec: ExperimentSpec, backend: Backend) -> Retries:
        """The experiment's `FailureConfig`, with the backend's `free_retry`."""
        return cls(spec.max_failures, spec.node_loss_counts, spec.retry_base, backend.free_retry)

    def allow(self, trial: Trial, failure: FailureRecord) -> bool:
        trial_id = trial.trial_id
        lost = failure.kind is FailureKind.NODE_LOST and not self._node_loss_counts
        if lost or self._backend_fixed(trial_id, failure):
            self._free[trial_id] = self._free.get(trial_id, 0) + 1
        used = trial.attempt - self._base.get(trial_id, 0) - self._free.get(trial_id, 0)
        return self._limit == -1 or used < self._limit


def experiment_stop(
    time_budget_s: float | None, elapsed: Callable[[], float], stopper: Stopper | None
) -> StopCause | str | None:
    """Why the experiment ends now (its time budget is spent, or the stopper says so)."""
    if time_budget_s is not None and elapsed() >= time_budget_s:
        return f"time budget of {time_budget_s:g}s reached"
    if stopper is not None and stopper.stop_all():
        return StopCause.STOPPER
    return None
