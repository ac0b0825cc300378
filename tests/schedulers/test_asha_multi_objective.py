"""ASHA with several objectives (MO-ASHA): rungs ranked by non-dominated sorting."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunefleet as tune
from tests.helpers.results import metrics_of
from tests.schedulers.test_schedulers import Factory, Sim, make_trial, restored
from tunefleet._metrics import dominates, non_dominated_sort
from tunefleet.schedulers import ASHAScheduler, Decision
from tunefleet.schedulers._asha_state import asha_view
from tunefleet.schedulers._pareto import ParetoRung, fronts
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus

TWO: dict[str, Any] = {"metric": ["loss", "latency"], "mode": ["min", "min"]}


def result(it: int, loss: float, latency: float) -> dict[str, Any]:
    return {"training_iteration": it, "loss": loss, "latency": latency}


def feed(sched: ASHAScheduler, points: list[tuple[float, float]], it: int = 1) -> list[Decision]:
    """One new trial per point, each reporting it at iteration `it`."""
    decisions = []
    for i, (loss, latency) in enumerate(points):
        trial = make_trial(i)
        sched.on_trial_add(trial)
        decisions.append(sched.on_trial_result(trial, result(it, loss, latency)))
    return decisions


def paused(indices: list[int]) -> list[Trial]:
    trials = [make_trial(i) for i in indices]
    for t in trials:
        t.status, t.stop_reason = TrialStatus.PAUSED, PAUSED_BY_SCHEDULER
    return trials


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda m: st.lists(st.lists(st.integers(0, 4), min_size=m, max_size=m), max_size=40)
    )
)
def test_fronts_are_debs_fronts(raw: list[list[int]]) -> None:
    points = [[float(v) for v in p] for p in raw]  # small integers: many ties and duplicates
    assert fronts(points) == non_dominated_sort(points)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=30))
def test_rank_counted_is_the_place_in_the_order(raw: list[tuple[int, int]]) -> None:
    points = {f"t{i}": [float(a), float(b)] for i, (a, b) in enumerate(raw)}
    counted = {i: ParetoRung(points).rank(i) for i in points}  # without the sorted order
    rung = ParetoRung(points)
    assert counted == {i: place for place, i in enumerate(rung.order())}
    assert all(rung.ahead(i) <= counted[i] for i in points)


def test_rung_order_is_fronts_then_crowding_then_arrival() -> None:
    # higher is better: all four on the front, then one dominated by "c"
    rung = ParetoRung()
    for trial_id, point in [("a", [0, -10]), ("b", [-1, -9]), ("c", [-5, -5]), ("d", [-10, 0])]:
        rung.record(trial_id, [float(v) for v in point])
    rung.record("e", [-6.0, -6.0])
    # extremes first (infinite distance, by arrival), then the less crowded c (1.8 > 1.0)
    assert rung.order() == ["a", "d", "c", "b", "e"]
    assert [rung.ahead(i) for i in "adcbe"] == [0, 0, 2, 3, 4]
    rung.discard("a")
    assert rung.order()[0] == "b"  # b is an extreme now
    huge = ParetoRung({"x": [1e308, -1e308], "y": [-1e308, 1e308], "z": [0.0, 0.0]})
    assert huge.order() == ["x", "y", "z"]  # a gap too wide for floats is no NaN


def test_stopping_form_dominated_stops_front_continues() -> None:
    sched = ASHAScheduler(**TWO, max_t=9, grace_period=1, reduction_factor=3)
    decisions = feed(
        sched,
        [
            (1.0, 1.0),  # first arrival: continues
            (2.0, 2.0),  # dominated by the first
            (0.5, 3.0),  # on the front (best loss)
            (3.0, 0.5),  # on the front (best latency)
            (1.5, 1.5),  # dominated
            (0.9, 0.9),  # on the front, but its middle is crowded: not in the top 2 of 6
        ],
    )
    assert decisions == [
        Decision.CONTINUE,
        Decision.STOP,
        Decision.CONTINUE,
        Decision.CONTINUE,
        Decision.STOP,
        Decision.STOP,
    ]
    assert sched.on_trial_result(make_trial(2), result(3, 0.4, 2.0)) is Decision.CONTINUE
    assert sched.on_trial_result(make_trial(0), result(3, 0.9, 2.5)) is Decision.STOP  # dominated
    assert sched.on_trial_result(make_trial(3), result(9, 0.1, 0.1)) is Decision.STOP  # max_t


def test_modes_apply_per_objective() -> None:
    sched = ASHAScheduler(
        metric=["acc", "latency"], mode=["max", "min"], max_t=9, reduction_factor=3
    )
    trials = [make_trial(i) for i in range(2)]
    for t in trials:
        sched.on_trial_add(t)
    ok = sched.on_trial_result(trials[0], {"training_iteration": 1, "acc": 0.9, "latency": 1.0})
    worse = {"training_iteration": 1, "acc": 0.8, "latency": 2.0}  # lower acc, slower
    assert ok is Decision.CONTINUE and sched.on_trial_result(trials[1], worse) is Decision.STOP
    assert asha_view(sched.get_state())["rungs"][0][0] == {"t000": [0.9, -1.0], "t001": [0.8, -2.0]}


def test_promotion_form_promotes_the_top_third_by_nsga_order() -> None:
    sched = ASHAScheduler(**TWO, max_t=9, reduction_factor=3, promotion=True)
    front = [(0.0, 3.0), (3.0, 0.0), (1.0, 1.0)]
    dominated = [(1.0, 4.0), (2.0, 2.0), (4.0, 1.0), (3.0, 5.0), (4.0, 4.0), (5.0, 3.0)]
    assert feed(sched, front + dominated) == [Decision.PAUSE] * 9
    waiting = paused(list(range(9)))
    promoted = []
    while (chosen := sched.choose_trial_to_run(waiting)) is not None:
        promoted.append(chosen.trial_id)
        waiting.remove(chosen)
    # floor(9 / 3) = 3: the front, extremes first, then (1, 1); nobody dominated
    assert promoted == ["t000", "t001", "t002"]


def test_promotion_form_promotes_about_one_in_eta() -> None:
    rng = random.Random(7)
    sched = ASHAScheduler(**TWO, max_t=9, reduction_factor=4, promotion=True)
    points = [(rng.random(), rng.random()) for _ in range(120)]
    decisions = feed(sched, points)
    waiting = paused([i for i, d in enumerate(decisions) if d is Decision.PAUSE])
    promoted = len(points) - len(waiting)
    while (chosen := sched.choose_trial_to_run(waiting)) is not None:
        promoted += 1
        waiting.remove(chosen)
    # the final top quarter, plus the few that were in the top when they arrived
    assert len(points) // 4 <= promoted <= len(points) // 2


def test_a_result_without_every_objective_is_ignored() -> None:
    sched = ASHAScheduler(**TWO, max_t=9, reduction_factor=3)
    trial = make_trial(0)
    sched.on_trial_add(trial)
    before = json.dumps(sched.get_state())
    for partial in (
        {"training_iteration": 1, "loss": 0.5},
        {"training_iteration": 9, "loss": 0.5, "latency": "fast"},
        {"training_iteration": 9, "loss": 0.5, "latency": float("nan")},
    ):
        assert sched.on_trial_result(trial, partial) is Decision.CONTINUE
    assert json.dumps(sched.get_state()) == before


def test_objectives_from_tune_config_and_a_list_of_one() -> None:
    sched = ASHAScheduler(max_t=9)
    assert sched.set_search_properties(["loss", "latency"], "min")
    assert sched.get_state()["mode"] == ["min", "min"]
    own = ASHAScheduler(metric="loss", mode="min", max_t=9)  # its own metric wins
    own.set_search_properties(["loss", "latency"], ["min", "min"])
    assert own.metric == "loss"
    with pytest.raises(ValueError, match="optimises one metric"):  # half its own: refused
        ASHAScheduler(metric="loss", max_t=9).set_search_properties(["loss", "latency"], "min")
    # a list of one metric is the single-objective rule, decision for decision
    rng = random.Random(3)
    losses = [(rng.random(), 0.0) for _ in range(40)]
    single = ASHAScheduler(metric="loss", mode="min", max_t=9, reduction_factor=3)
    listed = ASHAScheduler(max_t=9, reduction_factor=3)
    listed.set_search_properties(["loss"], ["min"])
    assert feed(listed, losses) == feed(single, losses)
    assert listed.get_state() == single.get_state()


@pytest.mark.parametrize(
    ("metric", "mode", "message"),
    [
        (["loss", "latency"], ["min"], r"mode=\['min'\] does not match metric="),
        ("loss", ["min", "min"], "is a list but metric='loss' is not"),
        (["loss", "latency"], None, "needs mode= as well"),
        (["loss", "latency"], ["min", "up"], r"mode\[1\]='up' is not valid"),
        (["loss", "loss"], "min", "names a metric twice"),
        ([], "min", r"metric=\[\] is not valid"),
    ],
)
def test_mismatched_objectives_are_refused(metric: Any, mode: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^AsyncHyperBandScheduler: .*{message}"):
        ASHAScheduler(metric=metric, mode=mode)
    if mode is not None and metric:  # the same check on the experiment's objectives
        with pytest.raises(ValueError, match=message):
            ASHAScheduler().set_search_properties(metric, mode)


# -- properties over generated experiments ------------------------------------------------------
MO_FACTORIES: dict[str, Factory] = {
    "stopping": lambda: ASHAScheduler(**TWO, max_t=27, reduction_factor=3),
    "brackets": lambda: ASHAScheduler(**TWO, max_t=27, reduction_factor=3, brackets=3, seed=1),
    "promotion": lambda: ASHAScheduler(**TWO, max_t=27, reduction_factor=3, promotion=True),
    "three_promotion": lambda: ASHAScheduler(
        metric=["loss", "latency", "memory"],
        mode=["min", "min", "max"],
        max_t=27,
        reduction_factor=3,
        promotion=True,
    ),
}


class ParetoSim(Sim):
    """`Sim` with results of several objectives; now and then one lacks the latency."""

    def report(self, trial: Trial) -> None:
        it = (trial.last_result or {}).get("training_iteration", 0) + 1
        slope = self.slopes[trial.trial_id]
        metrics = {"loss": 1.0 / (1 + slope * it), "latency": slope, "memory": it % 3 * slope}
        if self.rng.random() < 0.1:  # ignored: it decides nothing, for both copies
            partial = {"training_iteration": it, "loss": metrics["loss"]}
            assert self.both("on_trial_result", trial, partial) is Decision.CONTINUE
        result = {"training_iteration": it, **metrics}
        trial.last_result = result
        self.iters[trial.trial_id].append(it)
        decision = self.both("on_trial_result", trial, result)
        assert decision in (Decision.CONTINUE, Decision.PAUSE, Decision.STOP)
        if decision is Decision.PAUSE:
            trial.status, trial.stop_reason = TrialStatus.PAUSED, PAUSED_BY_SCHEDULER
        elif decision is Decision.STOP or it >= self.horizon:
            trial.status = TrialStatus.TERMINATED
            self.both("on_trial_complete", trial, result)


@pytest.mark.parametrize("name", sorted(MO_FACTORIES))
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
    sim = ParetoSim(MO_FACTORIES[name], n=n, slots=slots, seed=seed)
    sim.run(restore_at=restore_at)  # the restored copy must answer every call the same
    assert all(t.status.is_finished for t in sim.trials)
    for its in sim.iters.values():
        assert its == list(range(1, len(its) + 1))  # resumed where it paused
        assert len(its) <= 27  # never past max_t
    sim.both("on_trial_error", sim.trials[0])
    state = json.loads(json.dumps(sim.sched.get_state()))
    assert restored(MO_FACTORIES[name], sim.sched).get_state() == state


# -- end to end -----------------------------------------------------------------------------
def loss_and_latency(config: dict[str, Any]) -> None:
    # higher x: lower loss, slower; y only adds loss, so high y is dominated
    for it in range(1, 21):
        tune.report(loss=1 - config["x"] + config["y"] + 1 / it, latency=config["x"])


def test_two_objectives_end_to_end(tmp_path: Path) -> None:
    grid = tune.Tuner(
        loss_and_latency,
        param_space={"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(
            metric=["loss", "latency"],
            mode=["min", "min"],
            scheduler=ASHAScheduler(max_t=9, grace_period=1),
            num_samples=12,
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 12
    lengths = [len(r.metrics_dataframe) for r in grid]
    assert max(lengths) == 9 and min(lengths) < 9  # the first at every rung goes on
    front = grid.get_pareto_front()
    last = {r.path: [-metrics_of(r)["loss"], -metrics_of(r)["latency"]] for r in grid}
    assert front and all(not any(dominates(p, last[r.path]) for p in last.values()) for r in front)
