"""Ray Tune in one page: tune a toy objective, no deep-learning library needed.

What it shows:

- a function trainable that reports a metric each iteration with ``train.report``;
- a search space mixing grid search (every value is tried) and random sampling
  (``num_samples`` draws for each grid point): 2 optimizers x 4 samples = 8 trials;
- the FIFO scheduler (run every trial to its end) and a stop dict
  (``{"training_iteration": 20}``: each trial stops after 20 reports, although its
  loop would go on);
- reading the results: the best trial's config and metrics, and where they are stored.

    python examples/quickstart.py                      # a few seconds
    python examples/quickstart.py --storage-path /tmp/tf_results

The Ray Tune form of ``examples/quickstart.py``; ``tunefleet port`` turns it into that
program (tests/e2e/test_ray_tune_examples.py runs it so).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ray import train, tune
from ray.tune.schedulers import FIFOScheduler


def objective(config: dict[str, Any]) -> None:
    """A pretend training run: the loss falls with the steps, fastest near lr=0.01."""
    speed = {"sgd": 0.5, "adam": 1.0}[config["optimizer"]]
    distance = (math.log10(config["lr"]) + 2.0) ** 2  # 0 at lr = 0.01
    for step in range(1, 1000):  # the stop dict ends it long before 1000
        loss = distance + 1.0 / (1.0 + speed * step) + 0.01 * config["width"] / 64
        train.report({"loss": loss, "step": step})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--storage-path", default=None, help="where results go (default ~/ray_results)"
    )
    parser.add_argument("--num-samples", type=int, default=4, help="samples per grid point")
    args = parser.parse_args(argv)

    tuner = tune.Tuner(
        objective,
        param_space={
            "optimizer": tune.grid_search(["sgd", "adam"]),  # grid: both are tried
            "lr": tune.loguniform(1e-4, 1e-1),  # random: sampled per trial
            "width": tune.randint(8, 65),  # 8..64
        },
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=args.num_samples,
            scheduler=FIFOScheduler(),
            max_concurrent_trials=2,
        ),
        run_config=train.RunConfig(
            name="quickstart",
            storage_path=args.storage_path,
            stop={"training_iteration": 20},
            verbose=1,
        ),
    )
    results = tuner.fit()

    best = results.get_best_result()
    metrics = best.metrics or {}
    print()
    print(f"Trials: {len(results)}, errors: {results.num_errors}")
    print(f"Best config: {best.config}")
    print(
        f"Best loss: {metrics.get('loss', float('nan')):.4f} "
        f"after {metrics.get('training_iteration', '?')} iterations"
    )
    print(f"Results stored in: {results.experiment_path}")


if __name__ == "__main__":
    main()
