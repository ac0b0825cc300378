"""Schedulers save their state by change, not by step (issue 18).

The controller saves a scheduler's `get_state()` at every step. What grows with the
trials (ASHA's rungs, HyperBand's trial -> bracket map, the median rule's histories)
is kept in `StateLog`s, appended as events happen; the rest (the head) stays the
size of the live trials. A state saved through the store and restored into a fresh
scheduler gives the very decisions of the uninterrupted one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tunefleet._state_log import StateLog, split
from tunefleet.schedulers import (
    ASHAScheduler,
    Decision,
    Exploit,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from tunefleet.schedulers._candidates import Candidates
from tunefleet.store import ExperimentStore
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus

Factory = Callable[[], TrialScheduler]

FACTORIES: dict[str, Factory] = {
    "asha": lambda: ASHAScheduler(metric="loss", mode="min", max_t=9, reduction_factor=3),
    "asha_brackets": lambda: ASHAScheduler(
        metric="loss", mode="min", max_t=9, reduction_factor=3, brackets=2, seed=3
    ),
    "asha_promotion": lambda: ASHAScheduler(
        metric="loss", mode="min", max_t=9, reduction_factor=3, promotion=True
    ),
    "asha_pareto": lambda: ASHAScheduler(
        metric=["loss", "size"], mode=["min", "min"], max_t=9, reduction_factor=3, promotion=True
    ),
    "hyperband": lambda: HyperBandScheduler(metric="loss", mode="min", max_t=9),
    "bohb": lambda: HyperBandForBOHB(metric="loss", mode="min", max_t=9),
    "pbt": lambda: PopulationBasedTraining(
        time_attr="training_iteration",
        metric="loss",
        mode="min",
        perturbation_interval=2,
        hyperparam_mutations={"x": [1, 2, 3]},
        seed=1,
    ),
    "median": lambda: MedianStoppingRule(
        metric="loss", mode="min", time_attr="training_iteration", grace_period=2
    ),
    "median_soft": lambda: MedianStoppingRule(
        metric="loss",
        mode="min",
        time_attr="training_iteration",
        grace_period=2,
        min_time_slice=1,
        hard_stop=False,
    ),
}


def make_trial(i: int) -> Trial:
    return Trial(
        trial_id=f"t{i:05d}",
        index=i,
        name=f"t{i}",
        config={"x": i},
        resources={"cpu": 1.0, "gpu": 0.0},
        path="",
    )


class Driver:
    """A lean controller: 4 slots, `n` trials, pause/resume, the waiting trials kept as
    the controller keeps them (a `Candidates` updated per event, never rebuilt).

    Every call goes to each scheduler in `scheds` (a restored copy joins later); their
    answers must be the same. `on_event` is called after each event.
    """

    def __init__(self, sched: TrialScheduler, n: int, seed: int = 0) -> None:
        self.scheds = [sched]
        self.n, self.rng = n, random.Random(seed)
        self.trials: list[Trial] = []
        self.running: list[Trial] = []
        self.waiting = Candidates()
        self.slopes: dict[str, float] = {}
        self.answers: list[Any] = []
        self.results = 0

    def both(self, name: str, *args: Any) -> Any:
        outs = [getattr(s, name)(*args) for s in self.scheds]
        keys = [o.trial_id if isinstance(o, Trial) else o for o in outs]
        assert all(k == keys[0] for k in keys), f"{name}: {keys} differ after a restore"
        self.answers.append(keys[0])
        return outs[0]

    def fill(self) -> bool:
        """Start trials until the slots are full; False once the experiment is over."""
        while len(self.running) < 4:
            self.waiting.starved = len(self.trials) >= self.n and not self.running
            chosen = self.both("choose_trial_to_run", self.waiting) if self.waiting else None
            if chosen is None:
                if len(self.trials) < self.n:
                    chosen = make_trial(len(self.trials))
                    self.trials.append(chosen)
                    self.slopes[chosen.trial_id] = self.rng.uniform(0.1, 1.0)
                    self.both("on_trial_add", chosen)
                elif self.running:
                    return True
                else:  # the trials no scheduler resumes end
                    for trial in list(self.waiting):
                        trial.status = TrialStatus.TERMINATED
                        self.waiting.discard(trial.trial_id)
                        self.both("on_trial_complete", trial, trial.last_result)
                    return False
            self.waiting.discard(chosen.trial_id)
            chosen.status = TrialStatus.RUNNING
            self.running.append(chosen)
        return True

    def report(self) -> None:
        trial = self.running[self.rng.randrange(len(self.running))]
        it = (trial.last_result or {}).get("training_iteration", 0) + 1
        slope = self.slopes[trial.trial_id]
        result = {"training_iteration": it, "loss": 1.0 / (1 + slope * it), "size": 1 - slope}
        trial.last_result = result
        self.results += 1
        decision = self.both("on_trial_result", trial, result)
        if isinstance(decision, Exploit):  # PBT: runs on with the new config
            trial.config = decision.new_config
        elif decision is Decision.PAUSE:
            self.running.remove(trial)
            trial.status, trial.stop_reason = TrialStatus.PAUSED, PAUSED_BY_SCHEDULER
            self.waiting.add(trial)
        elif decision is Decision.STOP or it >= 9:
            self.running.remove(trial)
            trial.status = TrialStatus.TERMINATED
            self.both("on_trial_complete", trial, result)

    def run(self, on_event: Callable[[int], None] = lambda event: None) -> None:
        event = 0
        while self.fill():
            self.report()
            on_event(event)
            event += 1


def head_size(sched: TrialScheduler) -> int:
    """Bytes of the saved head: the state with its `StateLog`s taken out."""
    head, _ = split(sched.get_state())
    return len(json.dumps(head))


def logs_of(sched: TrialScheduler) -> dict[str, StateLog]:
    return split(sched.get_state())[1]


# -- the head is bounded by the live trials; the logs hold the history ------------------------
@pytest.mark.parametrize("name", ["asha", "asha_promotion", "hyperband", "median", "pbt"])
def test_the_saved_head_does_not_grow_with_the_finished_trials(name: str) -> None:
    sizes, logs, results = {}, {}, {}
    for n in (300, 3000):
        driver = Driver(FACTORIES[name](), n)
        seen: list[int] = []

        def sample(
            event: int, sched: TrialScheduler = driver.scheds[0], seen: list[int] = seen
        ) -> None:
            if event % 25 == 0:
                seen.append(head_size(sched))

        driver.run(sample)
        sizes[n] = max(seen)
        logs[n] = {path: len(log) for path, log in logs_of(driver.scheds[0]).items()}
        results[n] = driver.results
    # ten times the trials, the same head: it holds the live trials (at most 4 running,
    # plus those waiting in a HyperBand bracket), whose number varies a little
    assert sizes[3000] <= sizes[300] * 1.25 + 16, sizes
    assert all(isinstance(log, StateLog) for log in logs_of(FACTORIES[name]()).values())
    if name.startswith("asha"):
        assert logs[3000]["joins"] == 3000 and logs[3000]["records"] >= 3000
        assert logs[300]["records"] * 5 < logs[3000]["records"]
    elif name == "pbt":  # nothing grows: an ended trial leaves the state
        assert logs[3000] == {}
    elif name == "hyperband":
        assert logs[3000]["joins"] == 3000 and logs[3000]["cuts"] > logs[300]["cuts"] * 5
    else:
        assert logs[3000]["results"] == results[3000] and logs[300]["results"] == results[300]


def test_a_version_2_asha_state_is_logs_of_records() -> None:
    sched = ASHAScheduler(metric="loss", mode="min", max_t=9, reduction_factor=3, promotion=True)
    driver = Driver(sched, 30)
    driver.run()
    state = sched.get_state()
    head, logs = split(state)
    assert head["version"] == 2 and set(logs) == {"records", "promotions", "joins", "pauses"}
    assert head["rng"] == {"seed": 0, "draws": 30}
    b, k, trial_id, value = state["records"][0]
    assert (b, k) == (0, 0) and [trial_id, 0] in state["joins"]
    assert value < 0  # a loss, stored as "higher is better"
    assert all(p[1] == 0 for p in state["promotions"][:3])


# -- restoring through the store gives the same decisions -------------------------------------
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_a_state_restored_from_the_store_decides_as_the_uninterrupted_run(
    name: str, tmp_path: Path
) -> None:
    driver = Driver(FACTORIES[name](), 120, seed=5)
    store = ExperimentStore(tmp_path)
    written: list[int] = []

    def save(event: int) -> None:
        before = store.state_bytes_written
        store.save_state("scheduler", driver.scheds[0].get_state())
        store.flush()
        written.append(store.state_bytes_written - before)
        if event == 150:  # a fresh scheduler from what the store holds joins the run
            saved = store.load_state("scheduler")
            assert saved is not None
            fresh = FACTORIES[name]()
            fresh.set_state(saved)
            driver.scheds.append(fresh)

    driver.run(save)
    store.close()
    assert len(driver.scheds) == 2 and len(driver.answers) > 400
    first, second = (split(s.get_state()) for s in driver.scheds)
    assert json.dumps(first[0]) == json.dumps(second[0])
    assert {p: list(v) for p, v in first[1].items()} == {p: list(v) for p, v in second[1].items()}
    # a save costs what changed: the last saves cost no more than the early ones
    assert max(written[-50:]) <= max(written[:100]) + 64, (written[:5], written[-5:])


def test_a_version_1_state_still_loads() -> None:
    """States saved before the logs (version 1) restore into the same decisions."""
    v1: dict[str, dict[str, Any]] = {
        "asha": {
            "metric": "loss",
            "mode": "min",
            "rungs": [[{"t00000": -0.5, "t00001": -0.4}, {"t00000": -0.3}]],
            "promoted": [[["t00000"], []]],
            "bracket": {"t00000": 0, "t00001": 0},
            "level": {"t00000": 1, "t00001": 0},
            "paused_at": {"t00001": 0},
            "rng": [3, [0] * 624 + [624], None],
        },
        "hyperband": {
            "metric": "loss",
            "mode": "min",
            "brackets": [
                {"s": 0, "n0": 3, "r": 9, "halves": 0, "halved": False, "size": 3}
                | {"live": {"t00002": [1, -0.2]}, "waiting": [], "promoted": [], "cut": []},
            ],
            "band_len": 1,
            "of": {"t00000": 0, "t00001": 0, "t00002": 0},
            "starved": False,
        },
        "median": {
            "metric": "loss",
            "mode": "min",
            "results": {"t00000": [[1, -0.5], [2, -0.4]]},
            "stopped": [],
            "last_start": {"t00000": 1},
            "gone": [],
            "others_waiting": False,
        },
    }
    asha = ASHAScheduler(metric="loss", mode="min", max_t=9, reduction_factor=3, promotion=True)
    asha.set_state(v1["asha"])
    state = asha.get_state()
    assert state["version"] == 2 and state["pauses"] == [["t00001", 0]]
    assert state["promotions"] == [[0, 0, "t00000"]] and len(state["records"]) == 3
    hb = HyperBandScheduler(metric="loss", mode="min", max_t=9)
    hb.set_state(v1["hyperband"])
    assert hb.get_state()["joins"] == [["t00000", 0], ["t00001", 0], ["t00002", 0]]
    assert hb.on_trial_result(make_trial(2), {"training_iteration": 9, "loss": 0.1}) is (
        Decision.STOP
    )
    median = MedianStoppingRule(metric="loss", mode="min", time_attr="training_iteration")
    median.set_state(v1["median"])
    assert median.get_state()["results"] == [["t00000", 1, -0.5], ["t00000", 2, -0.4]]
    for sched in (asha, hb, median):
        bad = {**sched.get_state(), "version": 7}
        with pytest.raises(
            ValueError, match=r"state version 7 is not supported \(expected 1 or 2\)"
        ):
            type(sched)().set_state(bad)


def test_a_real_run_saves_the_rungs_as_records(tmp_path: Path) -> None:
    """A simulated 300-trial ASHA run: the store holds the rungs as log rows and a small
    head, and a scheduler restored from it holds what the run's scheduler held."""
    import tunefleet as tune
    from tunefleet.backends.simulated import SimulatedTrainable
    from tunefleet.schedulers._asha_state import asha_view
    from tunefleet.store import StoreReader

    def f(config: dict[str, Any], budget: int) -> dict[str, float]:
        return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}

    sched = ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3)
    grid = tune.Tuner(
        SimulatedTrainable(f, cost=1.0, max_budget=9, workers=4),
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=300, scheduler=sched),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="asha", verbose=0),
    ).fit()
    assert len(grid) == 300
    with StoreReader(tmp_path / "asha") as reader:
        saved = reader.state("scheduler")
    assert saved is not None and saved["version"] == 2
    head, logs = split(saved)
    assert len(json.dumps(head)) < 600 and len(logs["joins"]) == 300
    rungs = asha_view(saved)["rungs"][0]
    # the result that ends a trial (at max_t) is not the scheduler's: rung 3 stays empty
    assert len(rungs) == 3 and len(rungs[0]) == 300 and 0 < len(rungs[1]) < 300
    fresh = ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3)
    fresh.set_state(saved)
    assert json.dumps(fresh.get_state()) == json.dumps(sched.get_state())
