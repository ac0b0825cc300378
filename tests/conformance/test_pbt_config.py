"""Ray Tune's PopulationBasedTraining fills in each `hyperparam_mutations` key a trial's
config lacks (Ray's test_trial_scheduler_pbt.py, "no config"), so the mutations alone can
define those hyperparameters (Ray form, ported at collection)."""

import random

import numpy as np
from ray import train, tune
from ray.tune.schedulers import PopulationBasedTraining


def reads_mutated_keys(config):
    for step in range(3):
        value = config["a"] * config["b"] * (config["c"]["c1"] + config["c"]["c2"])
        train.report({"mean_accuracy": value + step, "seen": dict(config["c"], a=config["a"])})


def test_pbt_samples_the_mutated_keys_a_config_lacks(tmp_path):
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="mean_accuracy",
        mode="max",
        perturbation_interval=1,
        hyperparam_mutations={
            "a": tune.uniform(0, 0.3),
            "b": [1, 2, 3],
            "c": {"c1": lambda: np.random.uniform(0.5), "c2": tune.choice([2, 3, 4])},
        },
    )
    analysis = tune.run(
        reads_mutated_keys,
        num_samples=3,
        scheduler=pbt,
        stop={"training_iteration": 3},
        storage_path=str(tmp_path),
        verbose=0,
    )
    assert all(t.status == "TERMINATED" for t in analysis.trials)
    for trial in analysis.trials:
        config = trial.config
        assert 0 <= config["a"] <= 0.3
        assert config["b"] in (1, 2, 3)
        assert config["c"]["c2"] in (2, 3, 4)
        assert isinstance(config["c"]["c1"], float)


def test_keys_the_config_sets_are_kept(tmp_path):
    pbt = PopulationBasedTraining(
        metric="mean_accuracy",
        mode="max",
        perturbation_interval=100,  # no exploit: the configs stay as they started
        hyperparam_mutations={"a": [0.1, 0.2], "b": lambda: random.choice([5, 6])},
    )

    def trainable(config):
        train.report({"mean_accuracy": config["a"], "b": config["b"]})

    grid = tune.Tuner(
        trainable,
        param_space={"a": 0.7},
        tune_config=tune.TuneConfig(scheduler=pbt, num_samples=2),
        run_config=train.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert [r.config["a"] for r in grid] == [0.7, 0.7]
    assert all(r.config["b"] in (5, 6) and r.metrics["b"] == r.config["b"] for r in grid)
