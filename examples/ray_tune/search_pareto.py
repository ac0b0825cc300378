# Differs: Ray Tune has no constraints= nor get_pareto_front(): the front is computed here.
"""Model-based search on a conditional space, two objectives, and a constraint.

A small MLP on scikit-learn's digits (numpy, no GPU): the optimizer is a choice of
sub-spaces (SGD with its momentum, or Adam with its betas), the hidden width trades
validation error against model size, and models over 40,000 parameters are
infeasible. OptunaSearch (multi-objective TPE) proposes configs; ASHA stops the
trials weak in validation error early. The Pareto front of error
vs size is printed at the end.

    pip install 'tunefleet[optuna]' scikit-learn
    python examples/search_pareto.py

The Ray Tune form of ``examples/search_pareto.py``; ``tunefleet port`` turns it into that
program (tests/e2e/test_ray_tune_examples.py runs it so).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.optuna import OptunaSearch


def train(config: dict[str, Any]) -> None:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    train_idx, val_idx = order[:1400], order[1400:]
    hidden = config["hidden"]
    w1 = rng.normal(0, 1 / 8, (64, hidden))
    w2 = rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10))
    params = [w1, w2]
    opt = config["optimizer"]
    state = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    size = w1.size + w2.size
    for epoch in range(1, 28):
        for start in range(0, len(train_idx), 64):
            batch = train_idx[start : start + 64]
            h = np.maximum(x[batch] @ w1, 0)
            logits = h @ w2
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(batch)), y[batch]] -= 1
            g2 = h.T @ p / len(batch)
            g1 = x[batch].T @ ((p @ w2.T) * (h > 0)) / len(batch)
            for i, (param, grad) in enumerate(zip(params, (g1, g2), strict=True)):
                if opt["name"] == "sgd":
                    state[0][i] = opt["momentum"] * state[0][i] + grad
                    param -= opt["lr"] * state[0][i]
                else:
                    b1, b2 = opt["beta1"], 0.999
                    state[0][i] = b1 * state[0][i] + (1 - b1) * grad
                    state[1][i] = b2 * state[1][i] + (1 - b2) * grad**2
                    param -= opt["lr"] * state[0][i] / (np.sqrt(state[1][i]) + 1e-8)
        predicted = (np.maximum(x[val_idx] @ w1, 0) @ w2).argmax(1)
        error = float((predicted != y[val_idx]).mean())
        ray.train.report(
            {"val_error": error, "params": size, "size_excess": size - 40_000, "epoch": epoch}
        )


def dominates(a: Any, b: Any) -> bool:
    """Whether result `a` is no worse than `b` in both objectives and better in one."""
    pa = (a.metrics["val_error"], a.metrics["params"])
    pb = (b.metrics["val_error"], b.metrics["params"])
    return all(x <= y for x, y in zip(pa, pb, strict=True)) and pa != pb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="where results go")
    parser.add_argument("--num-samples", type=int, default=24)
    args = parser.parse_args()
    space = {
        "hidden": tune.lograndint(8, 1024),
        "optimizer": tune.choice(
            [
                {
                    "name": "sgd",
                    "lr": tune.loguniform(1e-3, 1.0),
                    "momentum": tune.uniform(0, 0.99),
                },
                {
                    "name": "adam",
                    "lr": tune.loguniform(1e-4, 1e-1),
                    "beta1": tune.uniform(0.8, 0.99),
                },
            ]
        ),
    }
    grid = tune.Tuner(
        train,
        param_space=space,
        tune_config=tune.TuneConfig(
            search_alg=OptunaSearch(metric=["val_error", "params"], mode=["min", "min"], seed=0),
            scheduler=ASHAScheduler(
                metric="val_error", mode="min", max_t=27, grace_period=3, reduction_factor=3
            ),
            num_samples=args.num_samples,
        ),
        run_config=ray.train.RunConfig(storage_path=args.storage_path, verbose=1),
    ).fit()
    feasible = [r for r in grid if r.error is None and (r.metrics or {})["size_excess"] <= 0]
    front = sorted(
        (r for r in feasible if not any(dominates(o, r) for o in feasible)),
        key=lambda r: (r.metrics or {})["params"],
    )
    print(f"Pareto front ({len(front)} of {len(grid)} trials, feasible only):")
    for result in front:
        opt, metrics = result.config["optimizer"], result.metrics or {}
        print(
            f"  error {metrics['val_error']:.3f}  params {metrics['params']:>6}"
            f"  hidden {result.config['hidden']:>4}  {opt['name']} lr={opt['lr']:.3g}"
        )
    infeasible = sum(r.error is None and r not in feasible for r in grid)
    print(f"Infeasible trials (over 40,000 parameters): {infeasible}")


if __name__ == "__main__":
    main()
