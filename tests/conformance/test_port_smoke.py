"""The conformance pipeline end to end: a Ray Tune module, ported at collection, runs."""

from ray import train, tune
from ray.train import RunConfig
from ray.tune import Tuner


def objective(config):
    for step in range(3):
        train.report({"score": config["x"] * (step + 1)})


def test_tuner_with_train_report(tmp_path):
    tuner = Tuner(
        objective,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    )
    results = tuner.fit()
    best = results.get_best_result()
    assert best.config["x"] == 2
    assert best.metrics["score"] == 6
    assert len(results) == 2


def test_tune_run(tmp_path):
    analysis = tune.run(
        objective,
        config={"x": tune.choice([3])},
        num_samples=1,
        metric="score",
        mode="max",
        storage_path=str(tmp_path),
        verbose=0,
    )
    assert analysis.best_config == {"x": 3}
    assert analysis.best_result["score"] == 9
