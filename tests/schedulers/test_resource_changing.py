"""ResourceChangingScheduler: allocation functions, decisions, and real resizes on workers."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.schedulers import (
    ASHAScheduler,
    Candidates,
    Cluster,
    Decision,
    DistributeResources,
    DistributeResourcesToTopJob,
    FIFOScheduler,
    Resize,
    ResourceChangingScheduler,
)
from tunefleet.store import StoreReader
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus

BASE = {"cpu": 1.0, "gpu": 0.0}


def trial(i: int, loss: float | None = None, **resources: float) -> Trial:
    t = Trial(
        trial_id=f"t{i}",
        index=i,
        name=f"t{i}",
        config={},
        resources={**BASE, **resources},
        path="",
        status=TrialStatus.RUNNING,
    )
    t.last_result = {} if loss is None else {"loss": loss}
    return t


def cluster(capacity: dict[str, float], *running: Trial) -> Cluster:
    return Cluster(capacity, {t.trial_id: t for t in running}, BASE)


def cpus(allocation: tune.PlacementGroupFactory | None) -> float:
    """The CPUs an allocation function gave (None would keep the trial's resources)."""
    assert allocation is not None
    return allocation.required_resources.get("CPU", 0.0)


def test_distribute_resources_shares_spare_cpus_evenly() -> None:
    fn = DistributeResources()
    a, b = trial(0), trial(1)
    sched = FIFOScheduler()
    assert fn(cluster({"cpu": 8}, a, b), a, {}, sched) == tune.PlacementGroupFactory([{"CPU": 4}])
    assert cpus(fn(cluster({"cpu": 8}, a), a, {}, sched)) == 8.0
    # Ray's rule (issue 15): the equal share is rounded up to a whole step of 1 CPU
    assert cpus(fn(cluster({"cpu": 3}, a, b), a, {}, sched)) == 2.0
    reserved = DistributeResources(reserve_resources={"cpu": 2})
    assert cpus(reserved(cluster({"cpu": 8}, a, b), a, {}, sched)) == 3.0
    capped = DistributeResources(increase_by={"cpu": 2}, increase_by_times=1)
    assert cpus(capped(cluster({"cpu": 16}, a), a, {}, sched)) == 3.0
    assert fn(cluster({"cpu": 8}, a), a, {"training_iteration": 0}, sched) is None


def test_distribute_to_top_job_gives_the_spare_to_the_best() -> None:
    fn = DistributeResourcesToTopJob(metric="loss", mode="min")
    good, bad = trial(0, loss=0.1), trial(1, loss=0.9, cpu=3.0)
    c = cluster({"cpu": 6}, good, bad)
    sched = FIFOScheduler()
    # Ray's rule (issue 15): the best takes what is free; the others keep what they hold
    assert cpus(fn(c, good, {}, sched)) == 3.0
    assert cpus(fn(c, bad, {}, sched)) == 3.0
    short = cluster({"cpu": 3}, good, bad)  # more held than there is: the others shrink
    assert cpus(fn(short, bad, {}, sched)) == 2.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"increase_by_times": -2}, "increase_by_times=-2 must be >= -1"),
        ({"increase_by": {"memory": 1}}, "increase_by['memory']=1"),
        ({"reserve_resources": {"cpu": -1}}, "reserve_resources['cpu']=-1"),
    ],
)
def test_distribute_resources_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DistributeResources(**kwargs)


def test_scheduler_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="base_scheduler=42"):
        ResourceChangingScheduler(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        ResourceChangingScheduler(resources_allocation_function=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot wrap another"):
        ResourceChangingScheduler(ResourceChangingScheduler())


def test_resize_decision_then_resumed_first_and_state_round_trip() -> None:
    sched = ResourceChangingScheduler(ASHAScheduler(max_t=9, grace_period=1))
    sched.set_search_properties("loss", "min")
    a, b = trial(0), trial(1)
    running = {"t0": a}
    sched.set_cluster(Cluster({"cpu": 4}, running, BASE))
    for t in (a, b):
        sched.on_trial_add(t)
    decision = sched.on_trial_result(a, {"training_iteration": 1, "loss": 0.5})
    assert decision == Resize({"cpu": 4.0, "gpu": 0.0})
    assert sched.base_trial_resources == tune.PlacementGroupFactory([{"CPU": 1}])
    a.resources = {"cpu": 4.0, "gpu": 0.0}  # resized: the same proposal changes nothing
    assert sched.on_trial_result(a, {"training_iteration": 2, "loss": 0.4}) is Decision.CONTINUE
    # the resized trial, paused, runs before a pending one
    a.status, a.stop_reason = TrialStatus.PAUSED, PAUSED_BY_SCHEDULER
    b.status = TrialStatus.PENDING
    copy = ResourceChangingScheduler(ASHAScheduler(max_t=9, grace_period=1))
    copy.set_search_properties("loss", "min")
    copy.set_state(json.loads(json.dumps(sched.get_state())))
    for s in (sched, copy):
        assert s.choose_trial_to_run(Candidates([b, a])) is a
        assert s.choose_trial_to_run(Candidates([b])) is b  # then the base decides


def test_base_stop_passes_through() -> None:
    sched = ResourceChangingScheduler(ASHAScheduler(max_t=2, grace_period=1))
    sched.set_search_properties("loss", "min")
    a = trial(0)
    sched.set_cluster(Cluster({"cpu": 4}, {"t0": a}, BASE))
    sched.on_trial_add(a)
    assert sched.on_trial_result(a, {"training_iteration": 2, "loss": 0.5}) is Decision.STOP


def cpu_reporter(config: dict[str, Any]) -> None:
    """Checkpoints every step; reports the CPUs it was given."""
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "i").read_text())
    for i in range(start, config["steps"]):
        time.sleep(config["pause"])
        cpus = tune.get_context().get_trial_resources()["cpu"]
        with tempfile.TemporaryDirectory() as d:
            Path(d, "i").write_text(str(i + 1))
            tune.report(
                {"loss": 1.0 / (i + 1), "cpus": cpus, "i": i + 1},
                checkpoint=tune.Checkpoint.from_directory(d),
            )


def test_trials_get_more_cpus_as_others_finish(storage: str) -> None:
    grid = tune.Tuner(
        tune.with_resources(cpu_reporter, {"cpu": 1}),
        # the long trial takes 2 s, so the short one (resumed once, in a new worker on a
        # loaded machine too) has ended before it does
        param_space={"steps": tune.grid_search([2, 10]), "pause": 0.2},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=ResourceChangingScheduler()
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, resources={"cpu": 4}),
    ).fit()
    assert grid.num_errors == 0
    long = next(r for r in grid if r.config["steps"] == 10)
    df = long.metrics_dataframe
    its = list(df["training_iteration"])
    assert its == list(range(1, 11)), its  # resumed from its checkpoint each time
    assert list(df["i"]) == its
    cpus = list(df["cpus"])
    assert cpus[0] == 1.0 and cpus[-1] == 4.0, cpus  # alone at the end: every CPU
    assert cpus == sorted(cpus) or 2.0 in cpus, cpus
    events = StoreReader(grid.experiment_path).events(trial_id=long.trial_id)
    resized = [e for e in events if e["kind"] == "resized"]
    assert resized and resized[-1]["data"]["new"]["cpu"] == 4.0
