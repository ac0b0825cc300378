"""Ray Tune's trial schedulers guide and API reference (Ray form, ported at collection).

Constructors take Ray's documented arguments; ASHA stops trials early and never runs
one past max_t; the median rule stops a trial below the median; PBT exploits, and its
trials restore from checkpoints.
"""

import os
import tempfile
import time
from pathlib import Path

import pytest
from ray import train, tune
from ray.train import Checkpoint, CheckpointConfig, RunConfig
from ray.tune.schedulers import (
    PB2,
    ASHAScheduler,
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)

# -- constructors and constants ------------------------------------------------------------


def test_decision_constants():
    assert TrialScheduler.CONTINUE == "CONTINUE"
    assert TrialScheduler.PAUSE == "PAUSE"
    assert TrialScheduler.STOP == "STOP"


def test_asha_is_async_hyperband():
    assert ASHAScheduler is AsyncHyperBandScheduler


def test_asha_arguments():
    ASHAScheduler(
        time_attr="training_iteration",
        metric="loss",
        mode="min",
        max_t=100,
        grace_period=1,
        reduction_factor=4,
        brackets=1,
        stop_last_trials=True,
    )


def test_asha_defaults_need_no_arguments():
    ASHAScheduler()


def test_hyperband_arguments():
    HyperBandScheduler(
        time_attr="training_iteration",
        metric="loss",
        mode="min",
        max_t=81,
        reduction_factor=3,
        stop_last_trials=True,
    )


def test_hyperband_for_bohb_arguments():
    HyperBandForBOHB(time_attr="training_iteration", max_t=81, reduction_factor=3)


def test_median_stopping_rule_arguments():
    MedianStoppingRule(
        time_attr="time_total_s",
        metric="loss",
        mode="min",
        grace_period=60.0,
        min_samples_required=3,
        min_time_slice=0,
        hard_stop=True,
    )


def test_pbt_arguments():
    PopulationBasedTraining(
        time_attr="time_total_s",
        metric="loss",
        mode="min",
        perturbation_interval=60.0,
        burn_in_period=0.0,
        hyperparam_mutations={"lr": tune.uniform(0.0001, 0.1), "momentum": [0.8, 0.9, 0.99]},
        quantile_fraction=0.25,
        resample_probability=0.25,
        perturbation_factors=(1.2, 0.8),
        custom_explore_fn=lambda config: config,
        log_config=True,
        require_attrs=True,
        synch=False,
    )


def test_pb2_arguments():
    pytest.importorskip("sklearn")
    PB2(
        time_attr="time_total_s",
        metric="loss",
        mode="min",
        perturbation_interval=60.0,
        hyperparam_bounds={"lr": [0.0001, 0.1]},
        quantile_fraction=0.25,
        log_config=True,
        require_attrs=True,
        synch=False,
    )


def test_fifo_scheduler():
    FIFOScheduler()


# -- metric and mode -----------------------------------------------------------------------


def test_scheduler_keeps_its_metric():
    scheduler = ASHAScheduler(metric="loss", mode="min")
    assert scheduler.metric == "loss"


def test_set_search_properties_fills_metric_and_mode():
    scheduler = ASHAScheduler()
    assert scheduler.set_search_properties("loss", "min") is True
    assert scheduler.metric == "loss"


def test_set_search_properties_refused_when_scheduler_has_its_own():
    scheduler = ASHAScheduler(metric="loss", mode="min")
    assert scheduler.set_search_properties("acc", "max") is False


def test_metric_in_both_scheduler_and_tune_config_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="TuneConfig"):
        tune.Tuner(
            lambda config: {"loss": 1.0},
            tune_config=tune.TuneConfig(
                metric="loss", mode="min", scheduler=ASHAScheduler(metric="loss", mode="min")
            ),
            run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()


def test_pbt_without_metric_is_an_error():
    scheduler = PopulationBasedTraining(hyperparam_mutations={"lr": [0.1, 0.2]})
    with pytest.raises(ValueError):
        scheduler.set_search_properties(None, None)


def test_mode_must_be_min_or_max():
    with pytest.raises(ValueError):
        ASHAScheduler(metric="loss", mode="best")


# -- ASHA end to end -----------------------------------------------------------------------


def climb(config):
    for step in range(1, 21):
        train.report({"score": config["quality"] * step})


@pytest.fixture(scope="module")
def asha_grid(tmp_path_factory):
    return tune.Tuner(
        climb,
        param_space={"quality": tune.grid_search([4.0, 3.0, 2.0, 1.0])},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2),
            max_concurrent_trials=1,
        ),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("asha")), verbose=0),
    ).fit()


def _iterations(grid):
    return {r.config["quality"]: r.metrics["training_iteration"] for r in grid}


def test_asha_no_trial_passes_max_t(asha_grid):
    assert max(_iterations(asha_grid).values()) <= 8


def test_asha_best_trial_reaches_max_t(asha_grid):
    assert _iterations(asha_grid)[4.0] == 8


def test_asha_stops_worse_trials_early(asha_grid):
    assert _iterations(asha_grid)[1.0] < 8


def test_asha_best_result(asha_grid):
    assert asha_grid.get_best_result().config["quality"] == 4.0
    assert asha_grid.num_errors == 0


# -- the median stopping rule --------------------------------------------------------------


@pytest.fixture(scope="module")
def median_grid(tmp_path_factory):
    return tune.Tuner(
        climb,
        param_space={"quality": tune.grid_search([3.0, 2.0, 1.0])},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=MedianStoppingRule(
                time_attr="training_iteration", grace_period=2, min_samples_required=1
            ),
            max_concurrent_trials=1,
        ),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("median")), verbose=0),
    ).fit()


def test_median_rule_lets_the_first_trial_finish(median_grid):
    assert _iterations(median_grid)[3.0] == 20


def test_median_rule_stops_a_trial_below_the_median(median_grid):
    its = _iterations(median_grid)
    assert its[1.0] < 20


# -- PBT end to end ------------------------------------------------------------------------


def pbt_trainable(config):
    step, score, restored_from = 0, 0.0, ""
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            step, score = (float(x) for x in Path(d, "state").read_text().split())
            step = int(step)
            restored_from = Path(d, "owner").read_text()
    me = tune.get_context().get_trial_id()
    if restored_from:
        Path(config["meet"], "exploited").touch()
    while step < 6:
        step += 1
        score += config["lr"]
        if step == 1 and not restored_from:  # the population meets before any exploit
            Path(config["meet"], me).touch()
            deadline = time.monotonic() + 60
            while len(os.listdir(config["meet"])) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        if step == 3 and config["lr"] == 1.0 and not restored_from:
            # The leader goes on once the other trial has exploited it: else, on a busy
            # machine, it could reach its stop (and leave PBT) before the other trial's
            # first perturbation boundary.
            deadline = time.monotonic() + 60
            while not Path(config["meet"], "exploited").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state").write_text(f"{step} {score}")
            Path(d, "owner").write_text(me)
            train.report(
                {"score": score, "restored_from": restored_from, "me": me},
                checkpoint=Checkpoint.from_directory(d),
            )


@pytest.fixture(scope="module")
def pbt_grid(tmp_path_factory):
    meet = tmp_path_factory.mktemp("meet")
    return tune.Tuner(
        tune.with_resources(pbt_trainable, {"cpu": 0.5}),
        param_space={"lr": tune.grid_search([1.0, 0.01]), "meet": str(meet)},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=PopulationBasedTraining(
                time_attr="training_iteration",
                perturbation_interval=2,
                hyperparam_mutations={"lr": [1.0, 0.5, 0.01]},
                quantile_fraction=0.5,
            ),
        ),
        # As Ray's PBT guides do: the stop condition ends a trial at its last result, so
        # PBT never takes a trial that has ended as a donor. Without it, a trial whose
        # function returns after its last report can be picked in the moment before its
        # end arrives (in Ray too), and its exploiter restarts at step 6 with nothing left.
        run_config=RunConfig(
            storage_path=str(tmp_path_factory.mktemp("pbt")),
            verbose=0,
            stop={"training_iteration": 6},
        ),
    ).fit()


def test_pbt_runs_every_trial_to_its_end(pbt_grid):
    assert pbt_grid.num_errors == 0
    assert all(r.metrics["training_iteration"] == 6 for r in pbt_grid)


def test_pbt_exploits_by_restoring_another_trials_checkpoint(pbt_grid):
    restored = [
        row
        for r in pbt_grid
        for row in r.metrics_dataframe[["restored_from", "me"]].itertuples()
        if row.restored_from and row.restored_from != row.me
    ]
    assert restored, "no trial restored from another trial's checkpoint"


def test_pbt_exploiting_trial_takes_a_mutated_config(pbt_grid):
    worst = min(pbt_grid, key=lambda r: r.metrics["score"])
    assert worst.config["lr"] in (1.0, 0.5, 0.01)
    assert pbt_grid.get_best_result().metrics["score"] >= 3.0


# -- PBT in pbt_example's form: the stop condition wins over the scheduler -----------------


class PBTBenchmarkExample(tune.Trainable):
    """pbt_example.py's shape: a class trainable, reused, checkpointed every 2 steps."""

    def setup(self, config):
        self.lr = config["lr"]
        self.accuracy = 0.0
        self.steps = 0

    def step(self):
        self.steps += 1
        if self.steps == 1:  # the population meets: all four run together
            Path(self.config["meet"], str(self.config["lr"])).touch()
            deadline = time.monotonic() + 60
            while len(os.listdir(self.config["meet"])) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        self.accuracy += self.lr
        return {"mean_accuracy": self.accuracy, "cur_lr": self.lr}

    def save_checkpoint(self, checkpoint_dir):
        return {"accuracy": self.accuracy, "lr": self.lr}

    def load_checkpoint(self, checkpoint):
        self.accuracy = checkpoint["accuracy"]

    def reset_config(self, new_config):
        self.lr = new_config["lr"]
        self.config = new_config
        return True


@pytest.fixture(scope="module")
def pbt_example_grid(tmp_path_factory):
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"lr": tune.uniform(0.0001, 0.02)},
    )
    meet = tmp_path_factory.mktemp("meet_example")
    return tune.Tuner(
        tune.with_resources(PBTBenchmarkExample, {"cpu": 0.5}),  # all four at once
        run_config=RunConfig(
            storage_path=str(tmp_path_factory.mktemp("pbt_example")),
            stop={"training_iteration": 6},
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_frequency=2),
        ),
        tune_config=tune.TuneConfig(
            scheduler=pbt, metric="mean_accuracy", mode="max", reuse_actors=True
        ),
        param_space={"lr": tune.grid_search([0.001, 0.005, 0.01, 0.02]), "meet": str(meet)},
    ).fit()


def test_pbt_example_no_trial_runs_past_the_stop(pbt_example_grid):
    # Ray checks the stop condition before the scheduler: a stopped trial is never a
    # donor, so no trial resumes from a checkpoint at (or past) the stop
    assert pbt_example_grid.num_errors == 0
    for result in pbt_example_grid:
        history = list(result.metrics_dataframe["training_iteration"])
        assert history[-1] == 6 and max(history) == 6, history


def test_pbt_example_config_is_what_ran_last(pbt_example_grid):
    # no exploit at the result that ends a trial: its config is the one it ran with
    for result in pbt_example_grid:
        assert result.config["lr"] == result.metrics["cur_lr"]
