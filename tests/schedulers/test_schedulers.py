"""Early-stopping schedulers as pure event handlers: no processes, microseconds each."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.schedulers import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
    Decision,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    Resize,
    ResourceChangingScheduler,
    TrialScheduler,
)
from tunefleet.schedulers._base import Cluster
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._common import result_time, score
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus

Factory = Callable[[], TrialScheduler]

FACTORIES: dict[str, Factory] = {
    "asha": lambda: ASHAScheduler(metric="loss", mode="min", max_t=27, reduction_factor=3),
    "asha_brackets": lambda: ASHAScheduler(
        metric="loss", mode="min", max_t=27, reduction_factor=3, brackets=3, seed=1
    ),
    "asha_promotion": lambda: ASHAScheduler(
        metric="loss", mode="min", max_t=27, reduction_factor=3, promotion=True
    ),
    "hyperband": lambda: HyperBandScheduler(metric="loss", mode="min", max_t=27),
    "bohb": lambda: HyperBandForBOHB(metric="loss", mode="min", max_t=27),
    "median": lambda: MedianStoppingRule(
        metric="loss", mode="min", time_attr="training_iteration", grace_period=2
    ),
    "median_soft": lambda: MedianStoppingRule(
        metric="loss", mode="min", time_attr="training_iteration", grace_period=2, hard_stop=False
    ),
    "resource_changing": lambda: ResourceChangingScheduler(
        ASHAScheduler(metric="loss", mode="min", max_t=27, reduction_factor=3, promotion=True)
    ),
}
MAX_T = {
    "asha": 27,
    "asha_brackets": 27,
    "asha_promotion": 27,
    "hyperband": 27,
    "bohb": 27,
    "resource_changing": 27,
}


def make_trial(i: int) -> Trial:
    return Trial(
        trial_id=f"t{i:03d}",
        index=i,
        name=f"t{i}",
        config={"x": i},
        resources={"cpu": 1.0, "gpu": 0.0},
        path="",
    )


class _Running(Mapping[str, Trial]):
    """The running trials of a list, as the controller's live `running` dict."""

    def __init__(self, trials: list[Trial]) -> None:
        self.trials = trials

    def _now(self) -> dict[str, Trial]:
        return {t.trial_id: t for t in self.trials if t.status is TrialStatus.RUNNING}

    def __getitem__(self, key: str) -> Trial:
        return self._now()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())


def restored(factory: Factory, sched: TrialScheduler) -> TrialScheduler:
    copy = factory()
    copy.set_state(json.loads(json.dumps(sched.get_state())))
    return copy


_WAITING = (TrialStatus.PENDING, TrialStatus.PAUSED)


def _key(value: Any) -> Any:
    return value.trial_id if isinstance(value, Trial) else value


class Sim:
    """A tiny controller: slots, a searcher of `n` trials, pause/resume, all in memory.

    Every call goes to `sched` and, once `shadow` is set (a restored copy), to it as
    well; their answers must be identical.
    """

    def __init__(self, factory: Factory, n: int, slots: int, seed: int, horizon: int = 40) -> None:
        self.factory, self.n, self.slots, self.horizon = factory, n, slots, horizon
        self.sched = factory()
        self.shadow: TrialScheduler | None = None
        self.rng = random.Random(seed)
        self.trials: list[Trial] = []
        self.slopes: dict[str, float] = {}
        self.iters: dict[str, list[int]] = {}
        self.decisions: list[Any] = []
        self.starved = False
        self.ended_unresumed: list[str] = []
        self.cluster = Cluster({"cpu": 8.0}, _Running(self.trials), {"cpu": 1.0})
        self.sched.set_cluster(self.cluster)

    def both(self, name: str, *args: Any) -> Any:
        out = getattr(self.sched, name)(*args)
        if self.shadow is not None:
            other = getattr(self.shadow, name)(*args)
            assert _key(out) == _key(other), f"{name}: {out!r} != restored {other!r}"
        return out

    def fill(self) -> None:
        """As the controller: the scheduler first, then a new trial; once none comes and
        nothing runs (starved), the trials the scheduler does not resume end."""
        while (running := sum(t.status is TrialStatus.RUNNING for t in self.trials)) < self.slots:
            ready = Candidates(
                (t for t in self.trials if t.status in (TrialStatus.PENDING, TrialStatus.PAUSED)),
                starved=self.starved and not running,
            )
            chosen = self.both("choose_trial_to_run", ready) if ready else None
            if chosen is None:
                if len(self.trials) >= self.n:
                    if ready.starved:
                        for trial in ready:
                            trial.status = TrialStatus.TERMINATED
                            self.ended_unresumed.append(trial.trial_id)
                            self.both("on_trial_remove", trial)
                    self.starved = True
                    return
                self.starved = False
                chosen = make_trial(len(self.trials))
                self.trials.append(chosen)
                self.slopes[chosen.trial_id] = self.rng.uniform(0.1, 1.0)
                self.iters[chosen.trial_id] = []
                self.both("on_trial_add", chosen)
            chosen.status = TrialStatus.RUNNING

    def report(self, trial: Trial) -> None:
        it = (trial.last_result or {}).get("training_iteration", 0) + 1
        loss = 1.0 / (1 + self.slopes[trial.trial_id] * it)
        result = {"training_iteration": it, "loss": loss}
        trial.last_result = result
        self.iters[trial.trial_id].append(it)
        decision = self.both("on_trial_result", trial, result)
        self.decisions.append(decision)
        if isinstance(decision, Resize):  # as the controller: pause, then new resources
            trial.resources = decision.resources
            decision = Decision.PAUSE
        assert decision in (Decision.CONTINUE, Decision.PAUSE, Decision.STOP)
        if decision is Decision.PAUSE:
            trial.status = TrialStatus.PAUSED
            trial.stop_reason = PAUSED_BY_SCHEDULER
        elif decision is Decision.STOP or it >= self.horizon:
            trial.status = TrialStatus.TERMINATED
            self.both("on_trial_complete", trial, result)

    def run(self, restore_at: int | None = None, max_events: int = 20000) -> None:
        idle = 0
        for event in range(max_events):
            if restore_at is not None and event == restore_at:
                self.shadow = restored(self.factory, self.sched)
                self.shadow.set_cluster(self.cluster)
            self.fill()
            running = [t for t in self.trials if t.status is TrialStatus.RUNNING]
            if not running:
                idle += 1
                if idle > 3:
                    return
                continue
            idle = 0
            self.report(self.rng.choice(running))
        raise AssertionError("the experiment never ended (a scheduler blocked it)")


# -- lifecycle: full event sequence, then a state round trip ------------------------------
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_lifecycle_and_round_trip(name: str) -> None:
    sim = Sim(FACTORIES[name], n=30, slots=4, seed=3)
    sim.run(restore_at=150)
    assert all(t.status.is_finished for t in sim.trials), [t.status for t in sim.trials]
    for tid, its in sim.iters.items():
        assert its == list(range(1, len(its) + 1)), (tid, its)  # resumed where it paused
        if name in MAX_T:
            assert len(its) <= MAX_T[name]
    # an error leaves the trial out and blocks nobody
    sim.both("on_trial_error", sim.trials[0])
    sim.both("on_trial_remove", sim.trials[1])
    json.dumps(sim.sched.get_state())


@pytest.mark.parametrize("name", sorted(FACTORIES))
@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 25),
    slots=st.integers(1, 6),
    seed=st.integers(0, 10**6),
    restore_at=st.integers(0, 200),
)
def test_property_valid_bounded_restorable(
    name: str, n: int, slots: int, seed: int, restore_at: int
) -> None:
    sim = Sim(FACTORIES[name], n=n, slots=slots, seed=seed)
    sim.run(restore_at=restore_at)
    assert all(t.status.is_finished for t in sim.trials)
    for its in sim.iters.values():
        assert its == list(range(1, len(its) + 1))
        if name in MAX_T:
            assert len(its) <= MAX_T[name]


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=60, max_size=200, unique=True),
    seed=st.integers(0, 2**32),
)
def test_property_asha_keeps_about_one_in_eta(values: list[float], seed: int) -> None:
    random.Random(seed).shuffle(values)  # trials arrive in a random order, as in a random search
    sched = ASHAScheduler(metric="m", mode="max", max_t=10, grace_period=1, reduction_factor=4)
    kept = 0
    for i, v in enumerate(values):
        trial = make_trial(i)
        sched.on_trial_add(trial)
        d = sched.on_trial_result(trial, {"training_iteration": 1, "m": v})
        kept += d is Decision.CONTINUE
    # a value passes when >= the 75th percentile of those before it: about a quarter
    assert 1 <= kept <= len(values) // 2


def test_asha_stopping_form_rungs_and_direction() -> None:
    sched = ASHAScheduler(metric="loss", mode="min", max_t=100, grace_period=1, reduction_factor=4)
    assert sched._milestones == [[1, 4, 16, 64]]
    trials = [make_trial(i) for i in range(5)]
    for t in trials:
        sched.on_trial_add(t)
    decisions = [
        sched.on_trial_result(t, {"training_iteration": 1, "loss": loss})
        for t, loss in zip(trials, [0.5, 0.4, 0.9, 0.1, 0.45], strict=True)
    ]
    # lower is better: 0.9 is below the cutoff; 0.1 is the best; 0.45 is worse than most
    assert decisions == [
        Decision.CONTINUE,
        Decision.CONTINUE,
        Decision.STOP,
        Decision.CONTINUE,
        Decision.STOP,
    ]
    assert sched.on_trial_result(trials[0], {"training_iteration": 100, "loss": 0.0}) is (
        Decision.STOP
    )
    assert sched.on_trial_result(trials[0], {"loss": 0.0}) is Decision.CONTINUE  # no time_attr


def test_asha_promotion_pauses_and_promotes_top() -> None:
    sched = ASHAScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3, promotion=True)
    assert sched.needs_sync_decisions
    trials = [make_trial(i) for i in range(3)]
    for t, acc in zip(trials, [0.2, 0.9, 0.5], strict=True):
        sched.on_trial_add(t)
        assert sched.on_trial_result(t, {"training_iteration": 1, "acc": acc}) is Decision.PAUSE
        t.status = TrialStatus.PAUSED
    assert sched.choose_trial_to_run(trials) is trials[1]  # the top third of rung 1
    assert sched.choose_trial_to_run([trials[0], trials[2]]) is None  # a new trial instead


def test_asha_promotion_errored_trial_does_not_block() -> None:
    sched = ASHAScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3, promotion=True)
    trials = [make_trial(i) for i in range(4)]
    for t, acc in zip(trials, [0.9, 0.2, 0.5, 0.4], strict=True):
        sched.on_trial_add(t)
        sched.on_trial_result(t, {"training_iteration": 1, "acc": acc})
        t.status = TrialStatus.PAUSED
    trials[0].status = TrialStatus.ERROR
    sched.on_trial_error(trials[0])  # the best one failed: it no longer holds the slot
    sched.on_trial_add(t4 := make_trial(4))
    sched.on_trial_result(t4, {"training_iteration": 1, "acc": 0.1})
    assert sched.choose_trial_to_run(trials[1:]) is trials[2]


def test_hyperband_brackets_like_ray() -> None:
    hb = HyperBandScheduler(metric="m", mode="max", max_t=81, reduction_factor=3)
    for i in range(5 + 8):
        hb.on_trial_add(make_trial(i))
    assert [(b["s"], b["n0"], b["r"]) for b in hb._brackets.values()] == [(0, 5, 81), (1, 8, 27)]
    bohb = HyperBandForBOHB(metric="m", mode="max", max_t=81, reduction_factor=3)
    bohb.on_trial_add(make_trial(0))
    assert (bohb._brackets[0]["s"], bohb._brackets[0]["n0"], bohb._brackets[0]["r"]) == (4, 81, 1)


def test_hyperband_synchronous_halving() -> None:
    hb = HyperBandForBOHB(metric="m", mode="max", max_t=9, reduction_factor=3)
    trials = [make_trial(i) for i in range(9)]  # bracket s=2: 9 trials, r=1
    for t in trials:
        hb.on_trial_add(t)
    for i, t in enumerate(trials[:-1]):
        assert hb.on_trial_result(t, {"training_iteration": 1, "m": i}) is Decision.PAUSE
        t.status = TrialStatus.PAUSED
    # the last one completes the rung: the top 3 (7, 8, and the last with 8.5) go on
    assert hb.on_trial_result(trials[-1], {"training_iteration": 1, "m": 8.5}) is (
        Decision.CONTINUE
    )
    chosen = [hb.choose_trial_to_run(trials[:-1]) for _ in range(3)]
    assert {t.trial_id for t in chosen if t} == {"t006", "t007"}


def test_median_stopping_rule() -> None:
    sched = MedianStoppingRule(
        metric="m", mode="max", time_attr="t", grace_period=1, min_samples_required=2
    )
    trials = [make_trial(i) for i in range(4)]
    for t in trials:
        sched.on_trial_add(t)
    for step in (1, 2):
        for t, v in zip(trials[:3], [1.0, 2.0, 3.0], strict=True):
            assert sched.on_trial_result(t, {"t": step, "m": v}) in (
                Decision.CONTINUE,
                Decision.STOP,
            )
    assert sched.on_trial_result(trials[3], {"t": 1, "m": 0.5}) is Decision.STOP
    assert sched.on_trial_result(make_trial(9), {"t": 0.5, "m": 0.0}) is Decision.CONTINUE
    soft = MedianStoppingRule(metric="m", mode="max", time_attr="t", hard_stop=False)
    assert soft.needs_sync_decisions and not sched.needs_sync_decisions


class _SlowMedianStoppingRule(MedianStoppingRule):
    """The original algorithm (every other trial's running mean recomputed per result)."""

    def _result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        sign = self._sign()
        t = result_time(result, self.time_attr)
        if t is None:
            return Decision.CONTINUE
        assert self.metric is not None
        tid = trial.trial_id
        history = self._results.setdefault(tid, [])
        if tid not in self._last_start or (history and t <= history[-1][0]):
            self._last_start[tid] = t
            self._starts.append([tid, t])  # the saved state's logs, as the rule keeps them
        history.append([t, score(result, self.metric, sign)])
        self._log.append([tid, *history[-1]])
        if tid in self._stopped:
            return Decision.CONTINUE
        if t < self.grace_period:
            return Decision.CONTINUE
        gone = {tid, *self._gone}
        others = [i for i, h in self._results.items() if i not in gone and h[-1][0] >= t]
        if len(others) < self.min_samples_required:
            return self._insufficient(tid, t)
        median = statistics.median(self._slow_mean(i, t) for i in others)
        best = max(v for _, v in history)
        if best < median:
            if self.hard_stop:
                return Decision.STOP
            self._stopped[tid] = None
            self._stopped_log.append(tid)
            return Decision.PAUSE
        return Decision.CONTINUE

    def _slow_mean(self, tid: str, t: float) -> float:
        scoped = [v for time, v in self._results[tid] if self.grace_period <= time <= t]
        return statistics.fmean(scoped) if scoped else float("-inf")


_MEDIAN_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["result"] * 12 + ["error", "round_trip", "none"]),
        st.integers(0, 7),
        st.one_of(st.integers(0, 8), st.sampled_from([1.5, 2.5, 3.25, math.inf, math.nan])),
        st.one_of(st.sampled_from([0.0, 0.1, 0.5, 1.0, -0.3]), st.floats(-1e3, 1e3)),
    ),
    max_size=250,
)


@settings(max_examples=300, deadline=None)
@given(
    events=_MEDIAN_EVENTS,
    grace=st.sampled_from([0, 1, 2, 2.5]),
    samples=st.integers(1, 4),
    hard=st.booleans(),
    mode=st.sampled_from(["min", "max"]),
)
def test_property_median_incremental_matches_original(
    events: list[tuple[str, int, float, float]], grace: float, samples: int, hard: bool, mode: str
) -> None:
    """Cached sorted means give the very decisions (and state) of the original algorithm."""

    def build(cls: type[MedianStoppingRule]) -> MedianStoppingRule:
        return cls(
            metric="loss",
            mode=mode,
            time_attr="it",
            grace_period=grace,
            min_samples_required=samples,
            hard_stop=hard,
        )

    fast, slow = build(MedianStoppingRule), build(_SlowMedianStoppingRule)
    trials = [make_trial(i) for i in range(8)]
    for s in (fast, slow):
        for trial in trials:
            s.on_trial_add(trial)
    for kind, i, t, value in events:
        if kind == "error":
            fast.on_trial_error(trials[i])
            slow.on_trial_error(trials[i])
        elif kind == "round_trip":
            state = json.loads(json.dumps(fast.get_state()))
            fast = build(MedianStoppingRule)
            fast.set_state(state)
        else:
            result: dict[str, Any] = {"loss": value}
            if kind == "result":
                result["it"] = t
            got = fast.on_trial_result(trials[i], result)
            assert got is slow.on_trial_result(trials[i], dict(result))
    assert json.dumps(fast.get_state()) == json.dumps(slow.get_state())  # NaN-proof


# -- argument errors ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ASHAScheduler(max_t=0), "max_t=0"),
        (lambda: ASHAScheduler(grace_period=-1), "grace_period=-1"),
        (lambda: ASHAScheduler(reduction_factor=1), "reduction_factor=1"),
        (lambda: ASHAScheduler(brackets=0), "brackets=0"),
        (lambda: ASHAScheduler(grace_period=5, max_t=2), "grace_period=5"),
        (lambda: AsyncHyperBandScheduler(mode="best"), "mode='best'"),
        (lambda: HyperBandScheduler(max_t=-3), "max_t=-3"),
        (lambda: HyperBandScheduler(reduction_factor=0.5), "reduction_factor=0.5"),
        (lambda: MedianStoppingRule(grace_period=-1), "grace_period=-1"),
        (lambda: MedianStoppingRule(min_samples_required=0), "min_samples_required=0"),
        (lambda: MedianStoppingRule(time_attr=""), "time_attr=''"),
    ],
)
def test_argument_errors(build: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize(
    "cls", [ASHAScheduler, HyperBandScheduler, HyperBandForBOHB, MedianStoppingRule]
)
def test_metric_and_mode_required(cls: type[TrialScheduler]) -> None:
    sched = cls()
    with pytest.raises(ValueError, match="needs `metric`"):
        sched.on_trial_add(make_trial(0))
    sched.set_search_properties("loss", None)
    with pytest.raises(ValueError, match="needs `mode`"):
        sched.on_trial_add(make_trial(0))
    sched.set_search_properties("loss", "min")
    sched.on_trial_add(make_trial(0))


def test_hyperband_for_bohb_annotates_results_with_the_budget() -> None:
    sched = HyperBandForBOHB(metric="loss", mode="min", max_t=9, reduction_factor=3)
    trial = make_trial(0)
    sched.on_trial_add(trial)
    result: dict[str, Any] = {"training_iteration": 1, "loss": 0.5}
    sched.on_trial_result(trial, result)
    assert result["hyperband_info"] == {"budget": 1, "bracket": 0}  # largest bracket first
