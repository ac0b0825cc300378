"""PBT and PB2 never use a trial the stop condition has ended (Ray Tune's order).

A trial whose result meets `stop` is completed for the scheduler at that result: it
leaves the ranking at once, is never a donor, and no exploit changes its config
(its `Result.config` is what ran). An exploit copies the checkpoint the scheduler
chose, so no trial resumes from a checkpoint past the stop. The simulated runs have
no real time in their clock (the same events in the same order on every run); the
real-process runs check the same with and without reused workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import meet, meeting
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import PB2, Exploit, PopulationBasedTraining
from tunefleet.schedulers._base import SchedulerDecision
from tunefleet.store import StoreReader
from tunefleet.trial import Trial

STOP = 4


class SeenPBT(PopulationBasedTraining):
    """PBT recording the (trial, training_iteration) of each result it is shown."""

    seen: list[tuple[str, int]]

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        self.seen.append((trial.trial_id, result["training_iteration"]))
        return super().on_trial_result(trial, result)


FAST, SLOW = 1.0, 0.1  # the best trial's q and the worst's (score: q * iteration)


def cost(config: dict[str, Any], budget: int) -> float:
    """The best trial (FAST) takes its last step while the worst (SLOW) takes the step
    to its first exploit boundary: both results come at t=5, the best's first."""
    if config["q"] == FAST:
        return 2.0 if budget == STOP else 1.0
    if config["q"] == SLOW:
        return {1: 3.5, 2: 1.5}.get(budget, 1.0)
    return 3.0


def histories(grid: tune.ResultGrid) -> dict[str, list[int]]:
    return {r.metrics["trial_id"]: list(r.metrics_dataframe["training_iteration"]) for r in grid}


def test_a_trial_stopped_at_the_boundary_is_never_a_donor(tmp_path: Path) -> None:
    pbt = SeenPBT(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"q": tune.uniform(0.05, 0.6)},
        seed=0,
    )
    pbt.seen = []
    sim = SimulatedTrainable(
        lambda config, budget: {"score": config["q"] * budget, "cur_q": config["q"]},
        cost=cost,
        workers=4,
        overhead_scale=0,
    )
    grid = tune.Tuner(
        sim,
        param_space={"q": tune.grid_search([FAST, SLOW, 0.5, 0.4])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"training_iteration": STOP},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
            verbose=0,
        ),
    ).fit()
    assert grid.num_errors == 0
    fast = next(r.metrics["trial_id"] for r in grid if r.config["q"] == FAST)
    with StoreReader(grid.experiment_path) as reader:
        exploits = [e["data"] for e in reader.events(kinds="exploit")]
    assert exploits, "the slow trial should have exploited at its boundary"
    assert all(e["source"] != fast for e in exploits), exploits
    assert all(e["iteration"] < STOP for e in exploits), exploits
    # the stopped result never reached the scheduler's ranking
    assert all(it < STOP for _, it in pbt.seen), pbt.seen
    for tid, history in histories(grid).items():
        assert history[-1] == STOP and max(history) == STOP, (tid, history)
    for r in grid:  # what ran last is the config it ends with
        assert r.config["q"] == r.metrics["cur_q"]


def test_pb2_does_not_change_the_config_at_the_result_that_ends_a_trial(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    sim = SimulatedTrainable(
        lambda config, budget: {"score": budget * config["x"], "cur_x": config["x"]},
        cost=1.0,
        workers=4,
        overhead_scale=0,
    )
    grid = tune.Tuner(
        sim,
        param_space={"x": tune.grid_search([0.1, 0.2, 0.3, 0.9])},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=PB2(
                time_attr="training_iteration",
                perturbation_interval=2,  # boundaries at 2 and at 4, the stop
                quantile_fraction=0.5,
                hyperparam_bounds={"x": [0.0, 1.0]},
                seed=0,
            ),
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"training_iteration": STOP},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
            verbose=0,
        ),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    with StoreReader(grid.experiment_path) as reader:
        exploits = [e["data"] for e in reader.events(kinds="exploit")]
    assert exploits and all(e["at_iteration"] < STOP for e in exploits), exploits
    for r in grid:
        assert r.metrics["training_iteration"] == STOP
        assert r.config["x"] == r.metrics["cur_x"], (r.config, r.metrics)


class Acc(tune.Trainable):
    """pbt_example's shape: a class trainable whose steps add its lr, reused or not."""

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.lr, self.acc = config["lr"], 0.0
        meet(config, config["lr"])  # the whole population is known before any exploit

    def step(self) -> dict[str, Any]:
        self.acc += self.lr
        return {"mean_accuracy": self.acc}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"acc": self.acc}

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        assert isinstance(checkpoint, dict)
        self.acc = checkpoint["acc"]

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.lr = new_config["lr"]
        return True


@pytest.mark.parametrize("reuse", [True, False])
def test_real_trials_never_run_past_the_stop(tmp_path: Path, reuse: bool) -> None:
    grid = tune.Tuner(
        tune.with_resources(Acc, {"cpu": 0.5}),  # all four at once
        param_space={"lr": tune.grid_search([0.001, 0.004, 0.01, 0.02]), **meeting(tmp_path, 4)},
        tune_config=tune.TuneConfig(
            metric="mean_accuracy",
            mode="max",
            reuse_actors=reuse,
            scheduler=PopulationBasedTraining(
                time_attr="training_iteration",
                perturbation_interval=2,
                hyperparam_mutations={"lr": tune.uniform(1e-4, 0.02)},
                seed=0,
            ),
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"training_iteration": 6},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2),
            verbose=0,
        ),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    for tid, history in histories(grid).items():
        assert history[-1] == 6 and max(history) == 6, (tid, history)
    with StoreReader(grid.experiment_path) as reader:
        exploits = [e["data"] for e in reader.events(kinds="exploit")]
    assert all(e["iteration"] < 6 for e in exploits), exploits


@pytest.mark.parametrize("leave", ["on_trial_complete", "on_trial_error", "on_trial_remove"])
def test_a_trial_that_left_is_neither_ranked_nor_a_donor(leave: str) -> None:
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="score",
        mode="max",
        perturbation_interval=2,
        quantile_fraction=0.5,
        hyperparam_mutations={"lr": [0.1, 0.2]},
        seed=0,
    )
    trials = [
        Trial(trial_id=f"t{i}", index=i, name=f"t{i}", config={"lr": 0.1}, resources={}, path="")
        for i in range(4)
    ]
    for t in trials:
        pbt.on_trial_add(t)
    for i, t in enumerate(trials[1:], 1):  # t3 best, t2 next
        pbt.on_trial_result(t, {"training_iteration": 2, "score": float(i)})
    best = trials[3]
    if leave == "on_trial_complete":
        pbt.on_trial_complete(best, {"training_iteration": 2, "score": 3.0, "done": True})
    else:
        getattr(pbt, leave)(best)
    for seed in range(20):  # whatever the draw, the source is a trial still in the run
        pbt._draws = seed
        decision = pbt.on_trial_result(trials[0], {"training_iteration": 2, "score": -1.0})
        assert isinstance(decision, Exploit) and decision.source_trial_id == "t2"
        pbt._last_perturbation.pop("t0")
