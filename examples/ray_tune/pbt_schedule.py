# Differs: no pbt_schedule in Ray Tune (the best trial's lineage): it prints its own lrs.
"""Population Based Training learns a learning-rate schedule.

The toy: SGD on a noisy quadratic, followed in expectation. One SGD step with learning
rate ``lr`` turns the loss ``x`` into ``(1 - lr)^2 x + NOISE * lr^2``: a large ``lr``
shrinks the loss fast but leaves it at a floor of about ``NOISE * lr / 2``; a small one
has a low floor but gets there slowly. So no constant ``lr`` is best: the best schedule
starts large and decays. One training iteration is 10 steps; a trial runs 40.

Eight trials start with learning rates drawn log-uniformly in [1e-4, 1] and run at once
(a quarter of a CPU each: the toy is cheap). Every 4 iterations, PBT lets a trial in
the worst quarter copy the checkpoint (its loss ``x``) of a trial in the best quarter,
and perturb its learning rate (times 0.8 or 1.2, or resampled). A trial's final model
thus went through several learning rates: this script prints the best trial's
learning rate by iteration and compares its loss with each initial learning rate held
constant.

    python examples/pbt_schedule.py                   # about 10 s
    python examples/pbt_schedule.py --smoke           # shorter iterations, for tests

The Ray Tune form of ``examples/pbt_schedule.py``; ``tunefleet port`` turns it into that
program (tests/e2e/test_ray_tune_examples.py runs it so).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import ray
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining
from ray.tune.search.basic_variant import BasicVariantGenerator

NOISE = 1e-2  # the gradient noise's variance
STEPS = 10  # SGD steps per training iteration
ITERATIONS = 40
START = 1.0  # the loss before training


def train_steps(x: float, lr: float) -> float:
    """The expected loss after one training iteration at learning rate `lr`."""
    for _ in range(STEPS):
        x = (1.0 - lr) ** 2 * x + NOISE * lr * lr
    return x


def train(config: dict[str, Any]) -> None:
    x, done = START, 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:  # a resume, or PBT's copy of a better trial
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            x, done = json.load(f)
    for iteration in range(done + 1, ITERATIONS + 1):
        x = train_steps(x, config["lr"])
        time.sleep(config["pause"])  # the cost of training, so that trials interleave
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump([x, iteration], f)
            ray.train.report({"loss": x}, checkpoint=ray.train.Checkpoint.from_directory(d))


def replay(schedule: list[dict[str, Any]]) -> float:
    """The loss a schedule of (from_iteration, to_iteration, lr) segments leads to."""
    x = START
    for segment in schedule:
        for _ in range(segment["from_iteration"], segment["to_iteration"]):
            x = train_steps(x, segment["value"])
    return x


def constant(lr: float) -> float:
    return replay([{"from_iteration": 0, "to_iteration": ITERATIONS, "value": lr}])


def initial_lrs(grid: Any) -> list[float]:
    """Each trial's first lr: the config of its first result, before any exploit."""
    return [float(r.metrics_dataframe["config/lr"].iloc[0]) for r in grid]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="iterations of 0.02 s, for tests")
    args = parser.parse_args(argv)

    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=4,
        hyperparam_mutations={"lr": tune.loguniform(1e-4, 1.0)},
        seed=args.seed,
    )
    grid = tune.Tuner(
        tune.with_resources(train, {"cpu": 0.25}),  # all eight at once on two CPUs
        param_space={"lr": tune.loguniform(1e-4, 1.0), "pause": 0.02 if args.smoke else 0.1},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=8,
            scheduler=pbt,
            search_alg=BasicVariantGenerator(random_state=args.seed),
        ),
        run_config=ray.train.RunConfig(
            name="pbt_schedule", storage_path=args.storage_path, verbose=0
        ),
    ).fit()

    best = grid.get_best_result()
    best_loss = float((best.metrics or {})["loss"])  # the best trial has reported
    # Its own lr at each iteration (Ray Tune keeps no record of whose checkpoint it took).
    history = best.metrics_dataframe
    schedule = [
        {"from_iteration": int(i) - 1, "to_iteration": int(i), "value": float(lr)}
        for i, lr in zip(history["training_iteration"], history["config/lr"], strict=True)
    ]
    print(f"Best trial {best.trial_id}: loss {best_loss:.3e}, its schedule:")
    for seg in schedule[:: max(1, len(schedule) // 10)]:
        print(f"  iteration {seg['to_iteration']:>2}: lr {seg['value']:.4f}")
    held = min(initial_lrs(grid), key=constant)
    print(
        f"Best initial lr held constant ({held:.4f}): loss {constant(held):.3e}, "
        f"{constant(held) / best_loss:.1f}x the PBT schedule's"
    )
    return {
        "best_loss": best_loss,
        "schedule": schedule,
        "best_constant_loss": constant(held),
        "errors": grid.num_errors,
    }


if __name__ == "__main__":
    main()
