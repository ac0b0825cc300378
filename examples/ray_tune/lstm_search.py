"""The sunspot LSTM again, tuned with a chosen searcher and scheduler, then reloaded.

It reuses the model, data and trainable of ``lstm_sunspots.py`` (``make demo``) and adds:

- ``--search random|tpe|bo``: random search (``BasicVariantGenerator``), Optuna's TPE
  (``OptunaSearch``) or Gaussian-process Bayesian optimisation (``BayesOptSearch``),
  over the same space: learning rate, hidden size, layers, dropout.
- ``--scheduler asha|none``: ASHA stops the trials whose validation loss is poor at a
  rung, so the budget goes to the promising ones; ``none`` runs every trial to the end
  (FIFO). Either way a plateau stopper ends a trial whose validation loss stopped moving.
- A checkpoint every epoch; tunefleet keeps each trial's best one by ``val_loss``.
- The best trial's best checkpoint is loaded back into a fresh model and evaluated on
  the validation years: its RMSE is the one the trial reported at that epoch.

    python examples/lstm_search.py                     # TPE + ASHA, 12 trials, ~15 s on 2 CPUs
    python examples/lstm_search.py --search bo --scheduler none
    python examples/lstm_search.py --smoke             # tiny models, for tests

The Ray Tune form of ``examples/lstm_search.py``; ``tunefleet port`` turns it into that
program (tests/e2e/test_ray_tune_examples.py runs it so).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

import torch
from lstm_sunspots import Data, build, load_series, train_lstm
from ray import train, tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.bayesopt import BayesOptSearch
from ray.tune.search.optuna import OptunaSearch
from ray.tune.stopper import TrialPlateauStopper

SEED = 0


def make_searcher(name: str, num_samples: int) -> Any:
    if name == "random":
        return BasicVariantGenerator(random_state=SEED)
    if name == "tpe":
        return OptunaSearch(sampler="tpe", seed=SEED)
    # Gaussian process: a few random points first, then the model proposes.
    return BayesOptSearch(random_state=SEED, random_search_steps=max(2, num_samples // 3))


def make_scheduler(name: str, epochs: int) -> Any:
    if name == "none":
        return FIFOScheduler()
    # Rungs at 1/4 and 1/2 of the epochs (smoke: 1, 2): half the trials go on at each.
    return ASHAScheduler(max_t=epochs, grace_period=max(1, epochs // 4), reduction_factor=2)


def evaluate(checkpoint: train.Checkpoint, values: list[float]) -> float:
    """Load a checkpoint into a fresh model: its validation RMSE, in sunspots."""
    with checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "checkpoint.pt"), weights_only=False)
    model, _ = build(state["config"])
    model.load_state_dict(state["model"])
    model.eval()
    data = Data(values)
    with torch.no_grad():
        err = data.to_sunspots(model(data.x_val)).squeeze(-1) - data.raw_val
    return float(torch.sqrt(torch.mean(err**2)))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", choices=("random", "tpe", "bo"), default="tpe")
    parser.add_argument("--scheduler", choices=("asha", "none"), default="asha")
    parser.add_argument("--num-samples", type=int, default=None, help="trials (default 12)")
    parser.add_argument("--epochs", type=int, default=None, help="most epochs (default 30)")
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--smoke", action="store_true", help="4 tiny trials x 4 epochs")
    args = parser.parse_args(argv)
    num_samples = args.num_samples or (4 if args.smoke else 12)
    epochs = args.epochs or (4 if args.smoke else 30)
    if num_samples < 1 or epochs < 1:
        parser.error(f"--num-samples={num_samples} and --epochs={epochs} must be >= 1")

    years, values = load_series()
    param_space = {
        "lr": tune.loguniform(1e-3, 3e-2),
        "hidden": tune.choice([8, 16] if args.smoke else [16, 32, 64]),
        "layers": tune.randint(1, 2 if args.smoke else 3),  # the upper bound is excluded
        "dropout": tune.uniform(0.0, 0.3),
    }
    tuner = tune.Tuner(
        tune.with_resources(
            tune.with_parameters(train_lstm, values=values, epochs=epochs), {"cpu": 1}
        ),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            metric="val_loss",
            mode="min",
            num_samples=num_samples,
            max_concurrent_trials=2,
            search_alg=make_searcher(args.search, num_samples),
            scheduler=make_scheduler(args.scheduler, epochs),
        ),
        run_config=train.RunConfig(
            name=f"lstm_search_{args.search}_{args.scheduler}",
            storage_path=args.storage_path,
            # Early stopping: a trial whose last 4 val_loss values barely move is done.
            stop=TrialPlateauStopper("val_loss", std=0.002, num_results=4, grace_period=8),
            checkpoint_config=train.CheckpointConfig(
                num_to_keep=1, checkpoint_score_attribute="val_loss", checkpoint_score_order="min"
            ),
            verbose=1,
        ),
    )
    results = tuner.fit()

    print(f"\nSearch: {args.search}, scheduler: {args.scheduler}, {len(results)} trials")
    ran = {r.trial_id: int((r.metrics or {}).get("training_iteration", 0)) for r in results}
    early = sorted(t for t, n in ran.items() if n < epochs)
    for r in sorted(results, key=lambda r: (r.metrics or {}).get("val_loss", math.inf)):
        c, m = r.config, r.metrics or {}
        print(
            f"  {r.trial_id}: lr={c['lr']:.4f} hidden={c['hidden']} layers={c['layers']} "
            f"dropout={c['dropout']:.2f} -> {ran[r.trial_id]:>2} epochs, "
            f"last val_rmse {m.get('val_rmse', math.nan):6.2f}"
        )
    print(f"Stopped early: {len(early)} of {len(results)} trials (by ASHA or the plateau stopper)")

    best = results.get_best_result(scope="all")  # the lowest val_loss at any epoch
    checkpoint, stored = min(best.best_checkpoints, key=lambda cm: cm[1]["val_loss"])
    reloaded = evaluate(checkpoint, values)
    print(f"Best trial (lowest val_loss at any epoch): {best.trial_id} {best.config}")
    print(f"Stored val_rmse at epoch {stored['training_iteration']}: {stored['val_rmse']:.6f}")
    print(f"Reloaded from {checkpoint.path}: val_rmse {reloaded:.6f}")
    print(f"Naive 'same as last year' val_rmse: {Data(values).naive_rmse:.4f}")
    print(f"Results stored in: {results.experiment_path}")
    return {
        "trials": len(results),
        "errors": results.num_errors,
        "epochs_run": ran,
        "stopped_early": early,
        "stored_val_rmse": float(stored["val_rmse"]),
        "reloaded_val_rmse": reloaded,
        "best_trial": best.trial_id,
        "years": (years[0], years[-1]),
    }


if __name__ == "__main__":
    main()
