# Differs: Ray has no nan_policy, so the NaN trial is recorded and flagged, not an error.
"""Trials that fail, and a run that goes on: each failure named by its cause.

Four trials of one trainable, chosen by ``mode``:

- ``ok``: trains and ends TERMINATED;
- ``raises``: raises ``ValueError`` at iteration 3 -> ERROR, EXCEPTION with the traceback;
- ``nan``: reports a NaN loss: recorded, and flagged in the tables (Ray Tune has no
  ``nan_policy`` to make it an error);
- ``oom``: allocates past its declared memory (``{"memory": 300 MB}``) -> ERROR, OOM
  with the trial's peak and limit; the other trials keep running.

    python examples/error_handling.py                  # about 10 s
    python examples/error_handling.py --storage-path /tmp/tf_results

The summary at the end names each cause in one line; ``tunefleet errors <experiment>``
prints the full traceback or stderr tail of each failed trial.

The Ray Tune form of ``examples/error_handling.py``; ``tunefleet port`` turns it into
that program, less ``nan_policy`` (tests/e2e/test_ray_tune_examples.py runs it).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import ray
from ray import tune
from ray.train import FailureConfig, RunConfig


def train(config: dict[str, Any]) -> None:
    hoard = []
    for step in range(1, 6):
        time.sleep(0.1)
        if config["mode"] == "raises" and step == 3:
            raise ValueError(f"bad batch at step {step}")
        if config["mode"] == "oom" and step >= 2:
            for _ in range(20):  # 20 x 50 MB, well past the 300 MB it asked for
                chunk = bytearray(50 * 2**20)
                chunk[::4096] = b"x" * len(chunk[::4096])  # touch every page: real memory
                hoard.append(chunk)
                time.sleep(0.02)
        loss = float("nan") if config["mode"] == "nan" and step == 2 else 1.0 / step
        ray.train.report({"loss": loss})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None)
    args = parser.parse_args(argv)
    grid = tune.Tuner(
        tune.with_resources(train, {"cpu": 1, "memory": 300 * 10**6}),
        param_space={"mode": tune.grid_search(["ok", "raises", "nan", "oom"])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
        run_config=RunConfig(
            storage_path=args.storage_path,
            verbose=1,
            failure_config=FailureConfig(max_failures=0),
        ),
    ).fit()
    for result in grid:
        cause = "finished" if result.error is None else str(result.error)
        print(f"{result.config['mode']:>6}: {cause}")
    print(f"Best: {grid.get_best_result().config}")


if __name__ == "__main__":
    main()
