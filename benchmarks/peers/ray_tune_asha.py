"""Ray Tune's ASHAScheduler on the digits MLP of ``real_problems.py``, for ``real_efficiency.py``.

Run by ``benchmarks/real_efficiency.py`` with the peer virtual environment's Python
(``.venv-peers``, made by ``make bench-peers``); Ray is never a tunefleet dependency.
It prints one ``TUNEFLEET_REAL`` JSON line per result (wall seconds since the start of
the tuning call, the validation error) and a summary line.

Setup as a Ray Tune user would write it: ``ray.init(num_cpus=concurrency)`` (no
dashboard), one CPU per trial, ``TuneConfig(max_concurrent_trials=concurrency,
time_budget_s=..., num_samples=1_000_000, reuse_actors=True)``, Ray's
``ASHAScheduler(time_attr="training_iteration", max_t, grace_period,
reduction_factor)`` (stopping form, one bracket), Ray's random search
(``BasicVariantGenerator(random_state=seed)``), the data passed with
``tune.with_parameters``. The clock starts just before ``ray.init`` (Ray's start-up
counts against the budget: a user waits for it too), so ``time_budget_s`` is the
budget less the start-up.

    .venv-peers/bin/python benchmarks/peers/ray_tune_asha.py --seed 0 --budget 30
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# One CPU per trial: BLAS reads these when numpy is imported (by real_problems).
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import real_problems as rp

BENCH_DIR = Path(__file__).resolve().parent.parent


def train(config: dict[str, Any], data: Any, max_t: int, metric: str) -> None:
    """The trainable: one epoch per report, as long as ASHA lets it run."""
    from ray import tune

    model = rp.make_model("digits", config, data)
    while model.epoch < max_t:
        value = model.train_epoch()
        tune.report({metric: value, "t_report": time.time()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rp.add_peer_args(parser)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network call, no prompt
    # Ray's workers import real_problems (the trainable refers to it by name).
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), path]))
    data = rp.load_digits_data(args.data)
    metric = rp.METRICS[args.problem]

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import BasicVariantGenerator

    class Recorder(tune.Callback):
        """Keeps every result in the driver; printed after the run (no I/O during it)."""

        def __init__(self) -> None:
            self.results: list[dict[str, Any]] = []
            self.trials = 0

        def on_trial_start(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
            self.trials += 1

        def on_trial_result(
            self, iteration: int, trials: Any, trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            self.results.append(
                {
                    "t_report": result["t_report"],
                    "value": result[metric],
                    "trial": trial.trial_id,
                    "iter": result["training_iteration"],
                }
            )

    recorder = Recorder()
    # Ray's session files in a short path of their own (socket paths must fit 107 bytes).
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp" if os.path.isdir("/tmp") else None)
    storage = tempfile.mkdtemp(prefix="ray-real-")
    errors = 0
    try:
        t0 = time.time()
        ray.init(num_cpus=args.concurrency, include_dashboard=False, _temp_dir=ray_tmp)
        init_s = time.time() - t0
        trainable = tune.with_parameters(train, data=data, max_t=args.max_t, metric=metric)
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space=rp.tune_space(rp.SPACES[args.problem], tune),
            tune_config=tune.TuneConfig(
                metric=metric,
                mode="min",
                num_samples=1_000_000,
                max_concurrent_trials=args.concurrency,
                time_budget_s=max(1.0, args.budget - (time.time() - t0)),
                reuse_actors=True,
                search_alg=BasicVariantGenerator(random_state=args.seed),
                scheduler=ASHAScheduler(
                    time_attr="training_iteration",
                    max_t=args.max_t,
                    grace_period=args.grace,
                    reduction_factor=args.eta,
                ),
            ),
            run_config=tune.RunConfig(
                name="real", storage_path=storage, verbose=0, callbacks=[recorder]
            ),
        )
        results = tuner.fit()
        wall_s = time.time() - t0
        errors = sum(r.error is not None for r in results)
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        shutil.rmtree(storage, ignore_errors=True)
    for r in recorder.results:
        rp.emit(
            {
                "kind": "result",
                "t": r["t_report"] - t0,
                "value": r["value"],
                "trial": r["trial"],
                "iter": r["iter"],
            }
        )
    rp.emit(
        {
            "kind": "summary",
            "framework": "ray_tune",
            "version": ray.__version__,
            "setup_s": init_s,
            "wall_s": wall_s,
            "trials": recorder.trials,
            "errors": errors,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
