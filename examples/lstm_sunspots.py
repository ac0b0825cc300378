"""Tune a PyTorch LSTM that forecasts the yearly sunspot number, with tunefleet.

What it shows:

- A Ray Tune script that runs unchanged with tunefleet: it only says
  ``import tunefleet as tune`` where Ray Tune says ``from ray import tune``.
- Several trials in parallel (2 at a time, one CPU each, ``torch.set_num_threads(1)``
  inside each trial), each trying a learning rate (log-uniform), a hidden size (choice),
  a number of LSTM layers (randint) and a dropout rate (uniform).
- ``tune.report`` every epoch with the validation loss, the validation RMSE in sunspot
  units, and a checkpoint (model + optimizer + epoch + RNG state).
- Resuming from ``tune.get_checkpoint()``, which is what lets tunefleet retry a
  crashed trial (or resume a paused one) from its last epoch instead of from scratch.
- Reading the results: the best trial (by its best epoch's val_loss), that epoch's
  metrics and checkpoint, which is then loaded to forecast the year after the data ends.
- Reproducible runs: ``--seed`` seeds the random search (Ray's
  ``BasicVariantGenerator(random_state=...)``) and each trial's torch generator
  (deterministic algorithms, one thread), so two runs with the same arguments sample
  the same configs in the same order and report the same metrics.

The data (``data/sunspots_yearly.csv``, 1700-2008, public domain; see
``data/README.md``) is made stationary-ish with ``log1p``, standardised with the
training part's mean and deviation, and cut into windows of ``WINDOW`` years; the
model reads a window and predicts the next year. The split is by time: the last 20%
of the years are the validation set (their windows may start in the training years,
as a forecaster's would).

    python examples/lstm_sunspots.py                   # 8 trials x 30 epochs, ~1-2 min on 2 CPUs
    python examples/lstm_sunspots.py --num-samples 16 --epochs 50
    python examples/lstm_sunspots.py --smoke           # 2 tiny trials x 3 epochs, for tests
    python examples/lstm_sunspots.py --seed 1          # other configs and initial weights

Results go to ``--storage-path`` (default ``~/tunefleet_results``) under the
experiment name ``lstm_sunspots``; ``tunefleet show lstm_sunspots`` lists them.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

import tunefleet as tune

DATA_FILE = Path(__file__).resolve().parent / "data" / "sunspots_yearly.csv"
WINDOW = 20  # years of history the model reads (about two solar cycles)
VALIDATION_FRACTION = 0.2  # the last 20% of the years
BATCH_SIZE = 32


def load_series(path: Path = DATA_FILE) -> tuple[list[int], list[float]]:
    """Years and yearly mean sunspot numbers from the CSV (``year,sunspots``)."""
    years: list[int] = []
    values: list[float] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            years.append(int(row["year"]))
            values.append(float(row["sunspots"]))
    return years, values


class Data:
    """The series cut into (window -> next year) pairs, split by time.

    ``x_*`` has shape (samples, WINDOW, 1) and ``y_*`` (samples, 1), both in the
    normalised space (log1p, then standardised with the training part's statistics).
    """

    def __init__(self, values: list[float], window: int = WINDOW) -> None:
        raw = torch.tensor(values, dtype=torch.float32)
        n_val = max(1, round(len(values) * VALIDATION_FRACTION))
        first_val = len(values) - n_val  # index of the first validation target
        logged = torch.log1p(raw)
        self.mean = float(logged[:first_val].mean())
        self.std = float(logged[:first_val].std())
        z = (logged - self.mean) / self.std
        targets = torch.arange(window, len(values))
        x = torch.stack([z[t - window : t] for t in targets.tolist()]).unsqueeze(-1)
        y = z[targets].unsqueeze(-1)
        train = targets < first_val
        self.x_train, self.y_train = x[train], y[train]
        self.x_val, self.y_val = x[~train], y[~train]
        self.raw_val = raw[targets[~train]]
        # A baseline for context: "next year is like this year".
        self.naive_rmse = float(
            torch.sqrt(torch.mean((raw[targets[~train] - 1] - self.raw_val) ** 2))
        )
        self.last_window = z[-window:].reshape(1, window, 1)

    def to_sunspots(self, z: torch.Tensor) -> torch.Tensor:
        """Undo the normalisation: back to sunspot numbers."""
        return torch.expm1(z * self.std + self.mean).clamp(min=0.0)


class Forecaster(nn.Module):
    """An LSTM over the window, then a linear head on its last hidden state."""

    def __init__(self, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(
            input_size=1,
            hidden_size=hidden,
            num_layers=layers,
            dropout=dropout if layers > 1 else 0.0,  # PyTorch applies it between layers
            batch_first=True,
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        prediction: torch.Tensor = self.head(self.dropout(out[:, -1, :]))
        return prediction


def build(config: dict[str, Any]) -> tuple[Forecaster, torch.optim.Optimizer]:
    model = Forecaster(int(config["hidden"]), int(config["layers"]), float(config["dropout"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=float(config["lr"]))
    return model, optimizer


def train_lstm(config: dict[str, Any], values: list[float], epochs: int, seed: int = 0) -> None:
    """The trainable: one trial, run by tunefleet in a worker process."""
    torch.set_num_threads(1)  # trials run in parallel, one CPU each
    # Same seed, same config: same weights, same batches, same metrics. (Every trial
    # starts from the same generator state, so trials differ only by their configs.)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    data = Data(values)
    model, optimizer = build(config)

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:  # a retry, a resume or a restart: continue where it was
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "checkpoint.pt"), weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = state["epoch"] + 1

    loss_fn = nn.MSELoss()
    n_train = len(data.x_train)
    for epoch in range(start, epochs):
        model.train()
        total = 0.0
        for batch in torch.split(torch.randperm(n_train), BATCH_SIZE):
            optimizer.zero_grad()
            loss = loss_fn(model(data.x_train[batch]), data.y_train[batch])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item() * len(batch)

        model.eval()
        with torch.no_grad():
            pred = model(data.x_val)
            val_loss = float(loss_fn(pred, data.y_val))
            err = data.to_sunspots(pred).squeeze(-1) - data.raw_val
            val_rmse = float(torch.sqrt(torch.mean(err**2)))
        if not math.isfinite(val_loss):
            val_loss = val_rmse = float("inf")

        with tempfile.TemporaryDirectory() as d:
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                    "rng": torch.get_rng_state(),
                    "config": dict(config),
                },
                os.path.join(d, "checkpoint.pt"),
            )
            tune.report(
                {
                    "val_loss": val_loss,
                    "val_rmse": val_rmse,
                    "train_loss": total / n_train,
                    "epoch": epoch,
                },
                checkpoint=tune.Checkpoint.from_directory(d),
            )


def forecast_next_year(checkpoint: tune.Checkpoint, values: list[float]) -> float:
    """Load a trial's checkpoint and predict the year after the data ends."""
    with checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "checkpoint.pt"), weights_only=False)
    model, _ = build(state["config"])
    model.load_state_dict(state["model"])
    model.eval()
    data = Data(values)
    with torch.no_grad():
        return float(data.to_sunspots(model(data.last_window)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tune an LSTM sunspot forecaster.")
    parser.add_argument("--num-samples", type=int, default=None, help="trials (default 8)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per trial (default 30)")
    parser.add_argument(
        "--storage-path", default=None, help="where results go (default ~/tunefleet_results)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=2, help="trials at a time (default 2, one CPU each)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the search and the trials (default 0)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny run for tests: 2 trials x 3 epochs"
    )
    args = parser.parse_args(argv)
    if args.num_samples is None:
        args.num_samples = 2 if args.smoke else 8
    if args.epochs is None:
        args.epochs = 3 if args.smoke else 30
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    years, values = load_series()

    if args.smoke:  # small models, so the run takes seconds
        param_space: dict[str, Any] = {
            "lr": tune.loguniform(1e-3, 3e-2),
            "hidden": tune.choice([8, 16]),
            "layers": tune.randint(1, 2),  # 1 (the upper bound is excluded, as in Ray)
            "dropout": tune.uniform(0.0, 0.3),
        }
    else:
        param_space = {
            "lr": tune.loguniform(1e-4, 1e-1),
            "hidden": tune.choice([16, 32, 64]),
            "layers": tune.randint(1, 4),  # 1, 2 or 3 (the upper bound is excluded, as in Ray)
            "dropout": tune.uniform(0.0, 0.3),
        }

    trainable = tune.with_resources(
        tune.with_parameters(train_lstm, values=values, epochs=args.epochs, seed=args.seed),
        {"cpu": 1},
    )
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            metric="val_loss",
            mode="min",
            num_samples=args.num_samples,
            max_concurrent_trials=args.concurrency,
            # Ray Tune's default random search, seeded: same seed, same configs in order.
            search_alg=tune.search.BasicVariantGenerator(random_state=args.seed),
        ),
        run_config=tune.RunConfig(
            name="lstm_sunspots",
            storage_path=args.storage_path,
            stop={"training_iteration": args.epochs},
            # Keep the best checkpoint by val_loss (and always the latest, to resume).
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=1,
                checkpoint_score_attribute="val_loss",
                checkpoint_score_order="min",
            ),
            verbose=1,
        ),
    )
    results = tuner.fit()

    # The best trial is the one whose best epoch has the lowest val_loss (scope="all"),
    # and that epoch's checkpoint is the one CheckpointConfig kept.
    best = results.get_best_result(scope="all")
    checkpoint = best.get_best_checkpoint("val_loss", "min")
    if checkpoint is None:  # only if the trial's checkpoints were deleted meanwhile
        raise SystemExit(f"trial {best.trial_id} has no checkpoint left in {best.path}")
    saved = next(m for c, m in best.best_checkpoints if c.path == checkpoint.path)
    print()
    print(f"Data: {len(values)} years ({years[0]}-{years[-1]}), last 20% for validation")
    print(f"Best trial: {best.trial_id} (lowest val_loss at any epoch)")
    print(f"Best config: {best.config}")
    print(
        f"Best val_rmse: {saved['val_rmse']:.2f} sunspots "
        f"(val_loss {saved['val_loss']:.4f}, epoch {saved['epoch']}); "
        f"naive 'same as last year' forecast: {Data(values).naive_rmse:.2f}"
    )
    print(f"Best checkpoint: {checkpoint.path}")
    forecast = forecast_next_year(checkpoint, values)
    print(
        f"Forecast for {years[-1] + 1} from trial {best.trial_id}'s checkpoint at epoch "
        f"{saved['epoch']} (val_loss {saved['val_loss']:.4f}): {forecast:.1f} sunspots"
    )
    print(f"Trials: {len(results)}, errors: {results.num_errors}")
    print(f"Results stored in: {results.experiment_path}")


if __name__ == "__main__":
    main()
