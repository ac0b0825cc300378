"""Synchronous PBT: the barrier, exploits on resume, failures at the barrier, state, a real run.

The scheduler is driven by a small in-memory controller (`PopulationSim`) that does
what the real one does (slots, a searcher of `n` trials, `Candidates.starved`,
`exploit_on_resume` copying the source's progress); the end-to-end test runs real
worker processes and reads the barrier back from the store's event log.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.schedulers import (
    Candidates,
    Decision,
    Exploit,
    PopulationBasedTraining,
    pbt_schedule,
)
from tunefleet.store import StoreReader
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus

Factory = Callable[[], PopulationBasedTraining]


def make_trial(i: int, x: float = 0.5) -> Trial:
    return Trial(trial_id=f"t{i}", index=i, name=f"t{i}", config={"x": x}, resources={}, path="")


def synch_pbt(**kwargs: Any) -> PopulationBasedTraining:
    args: dict[str, Any] = {
        "time_attr": "training_iteration",
        "metric": "score",
        "mode": "max",
        "perturbation_interval": 3,
        "hyperparam_mutations": {"x": tune.uniform(0.0, 1.0)},
        "synch": True,
        "seed": 0,
    }
    return PopulationBasedTraining(**{**args, **kwargs})


def pause(trial: Trial) -> None:
    trial.status = TrialStatus.PAUSED
    trial.stop_reason = PAUSED_BY_SCHEDULER


def report(s: PopulationBasedTraining, trial: Trial, it: int, score: float) -> Any:
    decision = s.on_trial_result(trial, {"training_iteration": it, "score": score})
    if decision is Decision.PAUSE:
        pause(trial)
    return decision


def started(s: PopulationBasedTraining, n: int) -> list[Trial]:
    trials = [make_trial(i, x=i / 10) for i in range(n)]
    for t in trials:
        s.on_trial_add(t)
        t.status = TrialStatus.RUNNING
    return trials


# -- the barrier, unit by unit ---------------------------------------------------------------
def test_trials_wait_at_the_boundary_then_the_bottom_exploits_the_top() -> None:
    s = synch_pbt()
    trials = started(s, 4)
    for it in (1, 2):
        assert all(report(s, t, it, i) is Decision.CONTINUE for i, t in enumerate(trials))
    for i, t in enumerate(trials[:3]):
        assert report(s, t, 3, i) is Decision.PAUSE
    # t3 still runs: the barrier waits, even when the controller says nothing else comes
    assert s.choose_trial_to_run(Candidates(trials[:3], starved=False)) is None
    assert report(s, trials[3], 3, 3.0) is Decision.PAUSE
    pool = Candidates(trials, starved=False)  # the searcher may still add a member
    assert s.choose_trial_to_run(pool) is None
    pool.starved = True  # no new trial comes and nothing runs: the barrier is complete
    first = s.choose_trial_to_run(pool)
    assert first is trials[0]  # the one that exploits runs first
    exploit = s.exploit_on_resume(first)
    assert isinstance(exploit, Exploit) and exploit.source_trial_id == "t3"
    assert 0.0 <= exploit.new_config["x"] <= 1.0
    pool.discard("t0")
    rest = []
    while (chosen := s.choose_trial_to_run(pool)) is not None:
        assert s.exploit_on_resume(chosen) is None
        rest.append(chosen.trial_id)
        pool.discard(chosen.trial_id)
    assert rest == ["t3", "t2", "t1"]  # best first
    # the next boundary is 3 later; nobody is held there yet
    for t in trials:
        t.status = TrialStatus.RUNNING
        assert report(s, t, 5, 1.0) is Decision.CONTINUE
    assert report(s, trials[0], 6, 1.0) is Decision.PAUSE


def test_new_and_interrupted_trials_run_while_others_wait() -> None:
    s = synch_pbt()
    trials = started(s, 2)
    for t in trials:
        report(s, t, 3, 1.0)
    late = make_trial(7)
    s.on_trial_add(late)  # the searcher added a member: it must catch up first
    assert s.choose_trial_to_run(Candidates([*trials, late], starved=True)) is late
    late.status = TrialStatus.RUNNING
    assert report(s, late, 1, 5.0) is Decision.CONTINUE
    late.status = TrialStatus.PAUSED  # Ctrl-C, then a driver restart
    late.stop_reason = "interrupted"
    assert s.choose_trial_to_run(Candidates([*trials, late], starved=True)) is late
    late.status = TrialStatus.RUNNING
    assert report(s, late, 3, 5.0) is Decision.PAUSE
    chosen = s.choose_trial_to_run(Candidates([*trials, late], starved=True))
    assert chosen is not None and chosen.trial_id in ("t0", "t1")
    exploit = s.exploit_on_resume(chosen)
    assert exploit is not None and exploit.source_trial_id == "t7"


@pytest.mark.parametrize("how", ["error", "complete", "remove"])
def test_a_trial_that_ends_at_or_before_the_barrier_blocks_nobody(how: str) -> None:
    s = synch_pbt(quantile_fraction=0.5)
    trials = started(s, 4)
    for i, t in enumerate(trials[:3]):
        report(s, t, 3, float(i))
    gone = trials[3]
    gone.status = TrialStatus.ERROR if how == "error" else TrialStatus.TERMINATED
    if how == "error":
        s.on_trial_error(gone)
    elif how == "complete":
        s.on_trial_complete(gone, None)
    else:
        s.on_trial_remove(gone)
    pool = Candidates(trials[:3], starved=True)
    order = []
    while (chosen := s.choose_trial_to_run(pool)) is not None:
        exploit = s.exploit_on_resume(chosen)
        order.append((chosen.trial_id, exploit and exploit.source_trial_id))
        pool.discard(chosen.trial_id)
    assert order == [("t0", "t2"), ("t2", None), ("t1", None)]  # 3 ranked: 1 exploits
    # and a trial at the barrier that fails is simply left out
    s2 = synch_pbt()
    trials = started(s2, 3)
    for i, t in enumerate(trials):
        report(s2, t, 3, float(i))
    trials[2].status = TrialStatus.ERROR
    s2.on_trial_error(trials[2])
    chosen = s2.choose_trial_to_run(Candidates(trials[:2], starved=True))
    exploit = s2.exploit_on_resume(trials[0])
    assert chosen is trials[0] and exploit is not None and exploit.source_trial_id == "t1"


def test_sources_wait_until_every_exploit_has_copied_them() -> None:
    s = synch_pbt(quantile_fraction=0.5)
    trials = started(s, 4)
    for i, t in enumerate(trials):
        report(s, t, 3, float(i))
    # t0 and t1 exploit; t1 is not ready yet (its process has not exited): nobody else
    # runs before it, so that the sources' checkpoints stay at the boundary
    pool = Candidates([trials[0], trials[2], trials[3]], starved=True)
    assert s.choose_trial_to_run(pool) is trials[0]
    pool.discard("t0")
    assert s.choose_trial_to_run(pool) is None
    pool.add(trials[1])
    assert s.choose_trial_to_run(pool) is trials[1]


def test_burn_in_sets_the_first_boundary() -> None:
    s = synch_pbt(burn_in_period=5)
    (t,) = started(s, 1)
    assert [report(s, t, it, 1.0) for it in (3, 4)] == [Decision.CONTINUE] * 2
    assert report(s, t, 5, 1.0) is Decision.PAUSE
    assert s.choose_trial_to_run(Candidates([t], starved=True)) is t  # alone: no exploit
    assert s.exploit_on_resume(t) is None
    t.status = TrialStatus.RUNNING
    assert report(s, t, 7, 1.0) is Decision.CONTINUE
    assert report(s, t, 8, 1.0) is Decision.PAUSE


def test_results_without_time_attr() -> None:
    s = synch_pbt()
    (t,) = started(s, 1)
    with pytest.raises(ValueError, match=r"time_attr='training_iteration' is missing"):
        s.on_trial_result(t, {"score": 1.0})
    lenient = synch_pbt(require_attrs=False)
    (t,) = started(lenient, 1)
    assert lenient.on_trial_result(t, {"score": 1.0}) is Decision.CONTINUE


def test_nan_score_ranks_last() -> None:
    s = synch_pbt()
    trials = started(s, 4)
    for i, t in enumerate(trials):
        report(s, t, 3, math.nan if i == 2 else float(i))
    chosen = s.choose_trial_to_run(Candidates(trials, starved=True))
    assert chosen is trials[2]
    chosen.status = TrialStatus.RUNNING
    # a NaN time is ignored: it would hold the next boundary forever
    assert s.on_trial_result(chosen, {"training_iteration": math.nan, "score": 1.0}) is (
        Decision.CONTINUE
    )
    assert report(s, chosen, 6, 1.0) is Decision.PAUSE
    assert math.isfinite(s.get_state()["boundary"])
    json.dumps(s.get_state())


def _key(value: Any) -> Any:
    return value.trial_id if isinstance(value, Trial) else value


# -- a population in memory: the barrier holds, and a restored copy decides the same -------
class PopulationSim:
    """Slots, a searcher of `n` trials, exploits applied on resume, random failures.

    `progress[t]` is (iteration, score); an exploit copies the source's. Every call
    also goes to a restored copy once `restore_at` is reached: answers must match.
    """

    def __init__(self, factory: Factory, n: int, slots: int, seed: int, horizon: int = 14) -> None:
        self.factory, self.n, self.slots, self.horizon = factory, n, slots, horizon
        self.sched = factory()
        self.shadow: PopulationBasedTraining | None = None
        self.rng = random.Random(seed)
        self.error_rate = 0.0
        self.trials: list[Trial] = []
        self.progress: dict[str, tuple[int, float]] = {}
        self.waiting_at: dict[str, int] = {}  # paused trial -> the boundary it waits at
        self.exploits: list[tuple[int, str, str]] = []  # (boundary, trial, source)
        self.starved = False

    def both(self, name: str, *args: Any) -> Any:
        out = getattr(self.sched, name)(*args)
        if self.shadow is not None:
            other = getattr(self.shadow, name)(*args)
            assert _key(out) == _key(other), f"{name}: {out!r} != restored {other!r}"
        return out

    def live(self) -> list[Trial]:
        return [t for t in self.trials if not t.status.is_finished]

    def fill(self) -> None:
        while (running := sum(t.status is TrialStatus.RUNNING for t in self.trials)) < self.slots:
            ready = Candidates(
                (t for t in self.trials if t.status in (TrialStatus.PENDING, TrialStatus.PAUSED)),
                starved=self.starved and not running,
            )
            chosen = self.both("choose_trial_to_run", ready) if ready else None
            if chosen is None:
                if len(self.trials) >= self.n:
                    assert not (ready and ready.starved), "the barrier never opened"
                    self.starved = True
                    return
                self.starved = False
                chosen = make_trial(len(self.trials), x=self.rng.random())
                self.trials.append(chosen)
                self.progress[chosen.trial_id] = (0, 0.0)
                self.both("on_trial_add", chosen)
            elif chosen.status is TrialStatus.PAUSED:
                self.resume(chosen)
            chosen.status = TrialStatus.RUNNING

    def resume(self, trial: Trial) -> None:
        boundary = self.waiting_at.pop(trial.trial_id, None)
        if boundary is not None:  # the whole live population reached the boundary
            assert all(self.progress[t.trial_id][0] >= boundary for t in self.live())
        exploit = self.both("exploit_on_resume", trial)
        if exploit is not None:
            source = next(t for t in self.trials if t.trial_id == exploit.source_trial_id)
            assert source.status is TrialStatus.PAUSED  # its checkpoint is the boundary's
            self.progress[trial.trial_id] = self.progress[source.trial_id]
            trial.config = exploit.new_config
            self.exploits.append((boundary or -1, trial.trial_id, source.trial_id))

    def report(self, trial: Trial) -> None:
        it, score = self.progress[trial.trial_id]
        it, score = it + 1, score + trial.config["x"]
        self.progress[trial.trial_id] = (it, score)
        decision = self.both("on_trial_result", trial, {"training_iteration": it, "score": score})
        assert decision in (Decision.CONTINUE, Decision.PAUSE)
        if decision is Decision.PAUSE:
            pause(trial)
            self.waiting_at[trial.trial_id] = it
        elif it >= self.horizon:
            trial.status = TrialStatus.TERMINATED
            self.both("on_trial_complete", trial, None)
        elif self.rng.random() < self.error_rate:
            trial.status = TrialStatus.ERROR
            self.both("on_trial_error", trial)

    def run(self, restore_at: int | None = None, max_events: int = 5000) -> None:
        for event in range(max_events):
            if event == restore_at:
                self.shadow = self.factory()
                self.shadow.set_state(json.loads(json.dumps(self.sched.get_state())))
            self.fill()
            running = [t for t in self.trials if t.status is TrialStatus.RUNNING]
            if not running:
                self.fill()  # starved now: the barrier opens or the run is over
                if not any(t.status is TrialStatus.RUNNING for t in self.trials):
                    return
                continue
            self.report(self.rng.choice(running))
        raise AssertionError("the population never finished")


def check_population(sim: PopulationSim) -> None:
    assert sim.trials and all(t.status.is_finished for t in sim.trials)
    for boundary, _, _ in sim.exploits:
        assert boundary % 3 == 0  # exploits happen at the boundaries only


def test_population_larger_than_the_slots_waits_for_everyone() -> None:
    sim = PopulationSim(synch_pbt, n=8, slots=3, seed=4)
    sim.run(restore_at=60)
    check_population(sim)
    assert {b for b, _, _ in sim.exploits} == {3, 6, 9, 12}
    per_round = [sum(b == r for b, _, _ in sim.exploits) for r in (3, 6, 9, 12)]
    assert per_round == [2, 2, 2, 2]  # the bottom 25 % of 8, every round


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 10),
    slots=st.integers(1, 5),
    seed=st.integers(0, 10**6),
    restore_at=st.integers(0, 150),
    errors=st.sampled_from([0.0, 0.02, 0.1]),
)
def test_property_barrier_holds_and_state_restores(
    n: int, slots: int, seed: int, restore_at: int, errors: float
) -> None:
    sim = PopulationSim(synch_pbt, n=n, slots=slots, seed=seed)
    sim.error_rate = errors
    sim.run(restore_at=restore_at)
    check_population(sim)


# -- a real run: worker processes, checkpoints copied at the barrier -----------------------
def shifting_target(config: dict[str, Any]) -> None:
    """Good lr is ~0.1 for the first 6 iterations, ~0.001 afterwards."""
    score, start = 0.0, 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            score, start = json.loads(Path(d, "s.json").read_text())
    for it in range(start + 1, 11):
        target = -1.0 if it <= 6 else -3.0
        score += 1.0 - abs(math.log10(config["lr"]) - target)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "s.json").write_text(json.dumps([score, it]))
            tune.report({"score": score}, checkpoint=tune.Checkpoint.from_directory(d))


def test_synch_pbt_end_to_end_waits_at_each_boundary(storage: str) -> None:
    scheduler = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=3,
        hyperparam_mutations={"lr": tune.loguniform(1e-4, 1.0)},
        synch=True,
        seed=0,
    )
    grid = tune.Tuner(
        shifting_target,
        param_space={"lr": tune.grid_search([1.0, 0.1, 0.01, 0.0001])},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", scheduler=scheduler, max_concurrent_trials=2
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    with StoreReader(grid.experiment_path) as reader:
        exploits = reader.events(kinds="exploit")
        events = reader.events(kinds=["paused", "started"])
        results = {tid: reader.results(tid) for tid in reader.trial_ids()}
    # one exploit per boundary (the bottom 25 % of 4), every one from the boundary's copy
    assert [(e["data"]["at_iteration"], e["data"]["iteration"]) for e in exploits] == [
        (3, 3),
        (6, 6),
        (9, 9),
    ]
    # the barrier: each trial's k-th pause comes before any trial's (k+1)-th start
    pauses: dict[str, list[int]] = {}
    starts: dict[str, list[int]] = {}
    for e in events:
        (pauses if e["kind"] == "paused" else starts).setdefault(e["trial_id"], []).append(e["seq"])
    assert all(len(p) == 3 for p in pauses.values()) and len(pauses) == 4
    for k in range(3):
        assert max(p[k] for p in pauses.values()) < min(s[k + 1] for s in starts.values())
    for tid, rows in results.items():  # 10 iterations each, rewound copies excepted
        assert rows[-1]["training_iteration"] == 10, tid
    best = grid.get_best_result()
    schedule = pbt_schedule(grid.experiment_path, metrics_of(best)["trial_id"], "lr")
    assert schedule[0]["from_iteration"] == 0 and schedule[-1]["to_iteration"] == 10
    for a, b in itertools.pairwise(schedule):
        assert a["to_iteration"] == b["from_iteration"] and a["to_iteration"] % 3 == 0
