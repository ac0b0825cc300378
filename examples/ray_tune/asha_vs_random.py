"""Time to solution: random search with ASHA against random search alone (FIFO).

Both runs get the same search space, the same trials (``BasicVariantGenerator`` with
one seed suggests the same configurations in the same order), the same concurrency and
the same maximum of epochs per trial. They differ only in the scheduler: FIFO trains
every trial to the end; ASHA stops a trial at a rung (epochs 2, 6, 18 here) when its
loss is not in the best third of the trials that reached that rung, so the free CPU
goes to new configurations sooner.

The trainable is a stand-in for a real training run, so that the comparison takes
seconds: each "epoch" sleeps ``--epoch-s`` and lowers the loss along a learning curve
whose floor depends on the learning rate (best near 0.01) and whose speed depends on
the batch size. Only learning rates between about 0.003 and 0.03 get under the target.

For each run it prints the wall time and the epochs spent (over all trials) until a
trial first reported a loss under ``--target``, and how many trials ASHA stopped early.

    python examples/asha_vs_random.py                 # 24 trials each, about 30 s
    python examples/asha_vs_random.py --smoke         # 12 trials, shorter epochs, for tests

The Ray Tune form of ``examples/asha_vs_random.py``; ``tunefleet port`` turns it into that
program (tests/e2e/test_ray_tune_examples.py runs it so).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator

MAX_EPOCHS = 30


def learning_curve(config: dict[str, Any], epoch: int) -> float:
    """The loss after `epoch` epochs: it falls towards a floor set by the learning rate."""
    floor = 0.05 + 0.3 * (math.log10(config["lr"]) + 2.0) ** 2  # lowest at lr = 0.01
    speed = 0.25 * 32 / config["batch_size"]  # smaller batches: more steps per epoch
    return floor + (1.0 - floor) * math.exp(-speed * epoch)


def train(config: dict[str, Any], started: float, epoch_s: float) -> None:
    for epoch in range(1, MAX_EPOCHS + 1):
        time.sleep(epoch_s)  # the cost of one epoch
        # `since_start`: seconds since the experiment was launched, for time-to-solution.
        ray.train.report(
            {"loss": learning_curve(config, epoch), "since_start": time.time() - started}
        )


def run(scheduler: Any, args: argparse.Namespace, label: str) -> dict[str, Any]:
    started = time.time()
    grid = tune.Tuner(
        tune.with_resources(
            tune.with_parameters(train, started=started, epoch_s=args.epoch_s), {"cpu": 1}
        ),
        param_space={
            "lr": tune.loguniform(1e-4, 1.0),
            "batch_size": tune.choice([32, 64, 128]),
        },
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=args.num_samples,
            max_concurrent_trials=2,
            search_alg=BasicVariantGenerator(random_state=args.seed),  # same trials in both
            scheduler=scheduler,
        ),
        run_config=ray.train.RunConfig(name=label, storage_path=args.storage_path, verbose=0),
    ).fit()
    total = time.time() - started

    # Every result of every trial, in the order they were reported.
    results = sorted(
        (row for result in grid for row in result.metrics_dataframe.to_dict("records")),
        key=lambda r: r["since_start"],
    )
    hit = next((i for i, r in enumerate(results) if r["loss"] <= args.target), None)
    early = sum(1 for r in grid if (r.metrics or {})["training_iteration"] < MAX_EPOCHS)
    return {
        "label": label,
        "seconds_to_target": None if hit is None else results[hit]["since_start"],
        "epochs_to_target": None if hit is None else hit + 1,
        "total_seconds": total,
        "total_epochs": len(results),
        "stopped_early": early,
        "trials": len(grid),
        "best_loss": (grid.get_best_result(scope="all").metrics or {})["loss"],
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=None, help="trials (default 24)")
    parser.add_argument("--epoch-s", type=float, default=None, help="seconds per epoch (0.05)")
    parser.add_argument("--target", type=float, default=0.1, help="the loss to reach (0.1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--smoke", action="store_true", help="12 trials x 0.02 s epochs")
    args = parser.parse_args(argv)
    args.num_samples = args.num_samples or (12 if args.smoke else 24)
    args.epoch_s = args.epoch_s if args.epoch_s is not None else (0.02 if args.smoke else 0.05)
    if args.num_samples < 1 or args.epoch_s < 0:
        parser.error(f"--num-samples={args.num_samples} must be >= 1, --epoch-s >= 0")

    runs = {
        "fifo": run(FIFOScheduler(), args, "asha_vs_random_fifo"),
        "asha": run(
            ASHAScheduler(max_t=MAX_EPOCHS, grace_period=2, reduction_factor=3),
            args,
            "asha_vs_random_asha",
        ),
    }
    print(f"Target loss {args.target}, {args.num_samples} trials of at most {MAX_EPOCHS} epochs")
    print(
        f"{'':5} {'time to target':>15} {'epochs to target':>17} {'total time':>11} "
        f"{'total epochs':>13} {'stopped early':>14}"
    )
    for r in runs.values():
        seconds = r["seconds_to_target"]
        to_target = "not reached" if seconds is None else f"{seconds:.1f} s"
        print(
            f"{r['label'][-4:].upper():5} {to_target:>15} {r['epochs_to_target'] or '-':>17} "
            f"{r['total_seconds']:9.1f} s {r['total_epochs']:>13} "
            f"{r['stopped_early']:>11}/{r['trials']}"
        )
    fifo, asha = runs["fifo"]["seconds_to_target"], runs["asha"]["seconds_to_target"]
    if fifo is not None and asha is not None:
        print(f"ASHA reached the target {fifo / asha:.1f}x as fast as FIFO")
    return runs


if __name__ == "__main__":
    main()
