"""A Ray Tune script, as Ray Tune users write it: ``examples/from_ray_tune.py`` ported back.

``tunefleet port examples/ray_tune/from_ray_tune.py`` turns its four Ray imports into
the tunefleet ones of ``examples/from_ray_tune.py``; the body is the same: a function
trainable that saves and restores checkpoints, a search space, ASHA, a searcher
limited in concurrency, a checkpoint policy, and reading the best result and its
checkpoint.

    tunefleet port examples/ray_tune/from_ray_tune.py          # the diff
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from ray import tune
from ray.tune import Checkpoint
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter


def train_fn(config):
    start, weight = 0, 0.0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            with open(os.path.join(checkpoint_dir, "state.json")) as f:
                state = json.load(f)
            start, weight = state["step"], state["weight"]
    for step in range(start, 30):
        weight += config["lr"] * (config["target"] - weight)  # one "epoch" of learning
        loss = (config["target"] - weight) ** 2 + config["noise"]
        with tempfile.TemporaryDirectory() as checkpoint_dir:
            with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
                json.dump({"step": step + 1, "weight": weight}, f)
            tune.report({"loss": loss}, checkpoint=Checkpoint.from_directory(checkpoint_dir))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None)
    args = parser.parse_args(argv)

    tuner = tune.Tuner(
        train_fn,
        param_space={
            "lr": tune.loguniform(1e-3, 1.0),
            "target": 3.0,
            "noise": tune.choice([0.0, 0.01]),
        },
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=12,
            scheduler=ASHAScheduler(max_t=30, grace_period=3, reduction_factor=3),
            search_alg=ConcurrencyLimiter(BasicVariantGenerator(random_state=0), max_concurrent=2),
        ),
        run_config=tune.RunConfig(
            name="from_ray_tune",
            storage_path=args.storage_path,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            verbose=1,
        ),
    )
    results = tuner.fit()
    best = results.get_best_result()
    print(f"Best config: {best.config}")
    print(f"Best loss: {best.metrics['loss']:.4f}")
    with best.checkpoint.as_directory() as checkpoint_dir:
        state = json.loads(open(os.path.join(checkpoint_dir, "state.json")).read())  # noqa: SIM115
    print(f"Best checkpoint: step {state['step']}")
    print(f"Trials: {len(results)}, errors: {len(results.errors)}")


if __name__ == "__main__":
    main()
