"""The scheduler interface: pure event handlers that return decisions.

A scheduler never touches processes or files. It sees trials (read-only) and
results, and answers with a `Decision`; the controller and backend carry it out.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec, fill_objective
from tunefleet._milestones import DecisionPoints
from tunefleet.schedulers._candidates import Candidates
from tunefleet.trial import Trial, TrialStatus


class Decision(str, enum.Enum):
    """What to do with a trial after a result."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"  # checkpoint, then free the slot; may be resumed later
    STOP = "STOP"  # end the trial on purpose (TERMINATED)


@dataclass(frozen=True)
class Exploit:
    """PBT's decision: pause the trial, then restart it from another trial's checkpoint.

    The controller copies `source_trial_id`'s latest checkpoint into this trial's
    directory, sets its config to `new_config`, records the step in the trial's
    lineage (an "exploit" event), and runs it again when the scheduler picks it.
    """

    source_trial_id: str
    new_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resize:
    """ResourceChangingScheduler's decision: pause the trial, then run it again from its
    checkpoint with `resources` (e.g. ``{"cpu": 2.0, "gpu": 0.0}``)."""

    resources: dict[str, float]


SchedulerDecision = Decision | Exploit | Resize


class Cluster:
    """What a scheduler may know of the resources: a live view kept by the controller.

    It is the first argument of a `ResourceChangingScheduler` allocation function and of
    the hooks of a scheduler written in Ray's form (see `TrialScheduler`), in the place
    of Ray Tune's ``tune_controller``, and answers the same questions: `get_trials()`,
    `get_live_trials()`, `get_num_cpus()` and `get_num_gpus()`.

    Attributes:
        capacity: everything the backend has, e.g. ``{"cpu": 8.0, "gpu": 1.0, ...}``.
        running: the running trials by id (each with its `resources`); do not modify.
        base_resources: what each trial asked for (`tune.with_resources`).
        trials: every trial of the experiment, in the order they were created; do not
            modify.
    """

    def __init__(
        self,
        capacity: Mapping[str, float],
        running: Mapping[str, Trial],
        base_resources: Mapping[str, float],
        trials: Sequence[Trial] = (),
    ) -> None:
        self.capacity = dict(capacity)
        self.running = running
        self.base_resources = dict(base_resources)
        self.trials = trials
        # the trials that may run now, while a Ray-form choose_trial_to_run is asked
        self._candidates: Candidates | None = None

    def get_trials(self) -> list[Trial]:
        """Every trial of the experiment, whatever its status (Ray's `get_trials()`)."""
        return list(self.trials)

    def get_live_trials(self) -> list[Trial]:
        """The trials that hold resources now (the running ones)."""
        return list(self.running.values())

    def get_num_cpus(self) -> float:
        """All the CPUs trials may use (not only the free ones)."""
        return self.capacity.get("cpu", 0.0)

    def get_num_gpus(self) -> float:
        """All the GPUs trials may use (not only the free ones)."""
        return self.capacity.get("gpu", 0.0)

    @property
    def _resource_updater(self) -> Cluster:
        # Ray's documented allocation example asks `tune_controller._resource_updater`
        # for get_num_cpus()/get_num_gpus(); the answers are here.
        return self

    def free(self) -> dict[str, float]:
        """Capacity minus what the running trials hold."""
        free = dict(self.capacity)
        for trial in self.running.values():
            for name, amount in trial.resources.items():
                free[name] = free.get(name, 0.0) - amount
        return free


class TrialScheduler:
    """Base class of trial schedulers (Ray Tune's `TrialScheduler` names).

    A subclass may write its hooks in tunefleet's form, ``on_trial_result(self, trial,
    result)``, or in Ray Tune's, with the controller first: ``on_trial_result(self,
    tune_controller, trial, result)``, ``choose_trial_to_run(self, tune_controller)``
    (``trial_runner`` in older Ray). A hook is taken as Ray's when its first argument
    has one of those names or it requires one positional argument more than
    tunefleet's; it then gets the experiment's `Cluster` as ``tune_controller``. Every
    hook, the base class's included, accepts both call forms, so a Ray-form override
    may call ``super().on_trial_result(tune_controller, trial, result)``. A trial a
    Ray-form ``choose_trial_to_run`` picks that cannot start now (not among the
    PENDING and PAUSED trials ready to run) counts as no choice.

    Args:
        metric: the metric to optimise; filled in from `TuneConfig` if None.
        mode: "min" or "max"; filled in from `TuneConfig` if None.
    """

    CONTINUE = Decision.CONTINUE
    PAUSE = Decision.PAUSE
    STOP = Decision.STOP

    #: True when the trial must wait for the decision on every result (a pausing
    #: or synchronous scheduler); False lets trials report without waiting.
    needs_sync_decisions: bool = False
    _own_metric: bool = False
    _own_mode: bool = False
    _ray_controller: Cluster | None = None  # what Ray-form hooks get as tune_controller

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _HOOKS:
            hook = cls.__dict__.get(name)
            if inspect.isfunction(hook) and not hasattr(hook, _ADAPTED):
                setattr(cls, name, _both_forms(name, hook))
        set_cluster = cls.__dict__.get("set_cluster")
        if inspect.isfunction(set_cluster) and not hasattr(set_cluster, _ADAPTED):
            cls.set_cluster = _keeping_cluster(set_cluster)  # type: ignore[method-assign]

    def __init__(self, *, metric: str | None = None, mode: str | None = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode={mode!r} is not valid: it must be 'min' or 'max'")
        self.metric = metric
        self.mode = mode
        # given to the constructor (not filled in later by set_search_properties)
        self._own_metric, self._own_mode = metric is not None, mode is not None

    def set_search_properties(self, metric: MetricSpec, mode: ModeSpec, **spec: Any) -> bool:
        """Take the experiment's metric and mode; False (Ray's answer) when the scheduler
        has its own and the experiment names one too. With several objectives in the
        experiment, a single-metric scheduler's own metric and mode are used instead."""
        several = isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple))
        if not several and (
            (self._own_metric and metric is not None) or (self._own_mode and mode is not None)
        ):
            return False
        owner = type(self).__name__
        self.metric, self.mode = fill_objective(owner, self.metric, self.mode, metric, mode)
        return True

    def complete_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config a new trial runs with: `config`, plus any key this scheduler needs
        that it lacks (Ray's PBT samples its mutated keys there). Called once per new
        trial, before it is recorded."""
        return config

    def decision_points(self) -> DecisionPoints | None:
        """Where a trial waits for this scheduler's decision, as ``(time_attr, points)``:
        the first result of an attempt at or past each point waits, so a trial stopped
        there trains no further (`_milestones.Crossing`). None (the default): results
        never wait (unless `needs_sync_decisions`), and a stop reaches the trial when it
        reaches it."""
        return None

    def on_trial_add(self, trial: Trial) -> None:
        """A new trial was created."""

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        """A result arrived; the metric in it is finite. PBT-like schedulers may exploit."""
        return Decision.CONTINUE

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        """The trial ended without error."""

    def on_trial_error(self, trial: Trial) -> None:
        """The trial failed (and will not be retried)."""

    def on_trial_remove(self, trial: Trial) -> None:
        """The trial was stopped by someone else than this scheduler."""

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """Pick the next trial to run among PENDING and PAUSED ones, or None.

        The controller passes its live `Candidates` view (O(1) lookups by id; see
        `Candidates.starved`); a plain sequence of trials is accepted too. None lets
        the searcher add a new trial. FIFO by default: pending first, then paused.
        """
        pool = Candidates.of(candidates)
        return pool.first_pending() or pool.first_paused()

    def set_cluster(self, cluster: Cluster) -> None:
        """Called once before the first trial starts (ResourceChangingScheduler uses it)."""
        self._ray_controller = cluster

    def exploit_on_resume(self, trial: Trial) -> Exploit | None:
        """Called for a PAUSED trial this scheduler chose to run, right before it runs.

        An `Exploit` makes the controller copy the source's checkpoint and set the
        new config first (synchronous PBT exploits the trials it paused this way).
        """
        return None

    def stop_note(self, trial: Trial) -> str | None:
        """Where this scheduler stopped `trial` with its last decision, in a few words
        ("rung 2 of 4"), or None; read (and forgotten) by the controller right after a
        STOP, and shown after the scheduler's name ("stopped by ASHAScheduler (rung 2 of
        4) at iter 8" in `tunefleet show`). Schedulers note it with `note_stop`."""
        notes: dict[str, str] = self.__dict__.get("_stop_notes", {})
        return notes.pop(trial.trial_id, None)

    def note_stop(self, trial_id: str, note: str, *, early: bool = True) -> Decision:
        """Remember where `trial_id` is stopped (for `stop_note`); return STOP.

        `early`: stopped before its full budget (below a rung's cutoff, below the
        median), so its last result is not a final value (`stopped_early`); False when
        the trial reached the budget (`max_t`).
        """
        self.__dict__.setdefault("_stop_notes", {})[trial_id] = note
        early_ids: set[str] = self.__dict__.setdefault("_stopped_early", set())
        if early:
            early_ids.add(trial_id)
        else:
            early_ids.discard(trial_id)
        return Decision.STOP

    def stopped_early(self, trial: Trial) -> bool:
        """Whether this scheduler's STOP of `trial` came before its full budget (noted
        with `note_stop(..., early=True)`); read (and forgotten) by the controller when
        the trial ends, which then tells the searcher `on_trial_stopped_early` instead
        of `on_trial_complete`. A STOP without a note is not early (as in Ray Tune,
        where the searcher hears every end as a completion)."""
        early_ids: set[str] = self.__dict__.get("_stopped_early", set())
        if trial.trial_id in early_ids:
            early_ids.discard(trial.trial_id)
            return True
        return False

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass


# -- Ray Tune's hook form ----------------------------------------------------------------
#: tunefleet's hooks, with how many positional arguments the engine passes each
_HOOKS = {
    "on_trial_add": 1,
    "on_trial_result": 2,
    "on_trial_complete": 2,
    "on_trial_error": 1,
    "on_trial_remove": 1,
    "choose_trial_to_run": 1,
}
#: the names Ray gives the controller argument (``trial_runner`` before Ray 2.5)
_CONTROLLER_NAMES = ("tune_controller", "trial_runner", "runner")
_WAITS = (TrialStatus.PENDING, TrialStatus.PAUSED)
_ADAPTED = "_tunefleet_both_forms"  # marks a hook already wrapped
Hook = Callable[..., Any]


def _is_ray_form(name: str, hook: Hook) -> bool:
    """Whether `hook` (a function taking self first) takes Ray's controller argument."""
    try:
        params = list(inspect.signature(hook).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False  # (self, *args): takes either form as it is
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional and positional[0].name in _CONTROLLER_NAMES:
        return True
    required = sum(p.default is p.empty for p in positional)
    return name != "choose_trial_to_run" and required == _HOOKS[name] + 1


def _controller(scheduler: TrialScheduler, trials: Sequence[Trial] = ()) -> Cluster:
    """The scheduler's `Cluster`; an empty view (of `trials`) outside an experiment."""
    cluster = scheduler._ray_controller
    return Cluster({}, {}, {}, trials) if cluster is None else cluster


def _pop_controller(kwargs: dict[str, Any]) -> bool:
    if not kwargs:  # the common call: nothing to pop
        return False
    return any([kwargs.pop(name, None) is not None for name in _CONTROLLER_NAMES])


def _is_pool(candidates: object) -> bool:
    """True for tunefleet's argument to choose_trial_to_run, False for a controller."""
    return isinstance(candidates, (Candidates, Sequence))


def _both_forms(name: str, hook: Hook) -> Hook:
    """`hook`, callable in tunefleet's form and in Ray's (controller first)."""
    n = _HOOKS[name]
    ray = _is_ray_form(name, hook)
    if name == "choose_trial_to_run":
        wrapper = _ray_choose(hook) if ray else _native_choose(hook)
    elif ray:

        @functools.wraps(hook)
        def wrapper(self: TrialScheduler, *args: Any, **kwargs: Any) -> Any:
            if not any(k in kwargs for k in _CONTROLLER_NAMES) and len(args) + len(kwargs) == n:
                args = (_controller(self), *args)  # tunefleet's call: add the controller
            return hook(self, *args, **kwargs)

    else:

        @functools.wraps(hook)
        def wrapper(self: TrialScheduler, *args: Any, **kwargs: Any) -> Any:
            if not _pop_controller(kwargs) and args and len(args) + len(kwargs) == n + 1:
                args = args[1:]  # Ray's call (a Ray-form super() call): drop the controller
            return hook(self, *args, **kwargs)

    setattr(wrapper, _ADAPTED, True)
    return wrapper


def _ray_choose(hook: Hook) -> Hook:
    @functools.wraps(hook)
    def choose(self: TrialScheduler, candidates: Any) -> Any:
        if not _is_pool(candidates):  # Ray's call: a controller already
            return hook(self, candidates)
        pool = Candidates.of(candidates)
        controller = _controller(self, list(pool))
        outer, controller._candidates = controller._candidates, pool
        try:
            chosen = hook(self, controller)
        finally:
            controller._candidates = outer
        return chosen if chosen is None or chosen in pool else None

    return choose


def _native_choose(hook: Hook) -> Hook:
    @functools.wraps(hook)
    def choose(self: TrialScheduler, candidates: Any) -> Any:
        if _is_pool(candidates):
            return hook(self, candidates)
        pool = getattr(candidates, "_candidates", None)  # a Ray-form super() call
        if pool is None:  # a controller of the caller's own: its trials that wait
            pool = Candidates(t for t in candidates.get_trials() if t.status in _WAITS)
        return hook(self, pool)

    return choose


def _keeping_cluster(set_cluster: Hook) -> Hook:
    """An overriding `set_cluster` that also keeps the cluster for Ray-form hooks."""

    @functools.wraps(set_cluster)
    def wrapper(self: TrialScheduler, cluster: Cluster) -> None:
        self._ray_controller = cluster
        set_cluster(self, cluster)

    setattr(wrapper, _ADAPTED, True)
    return wrapper


for _name in _HOOKS:  # the base class's hooks take both call forms too
    setattr(TrialScheduler, _name, _both_forms(_name, TrialScheduler.__dict__[_name]))
