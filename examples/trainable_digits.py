"""A class-based Trainable (a small CNN on handwritten digits), resumed after a crash.

``DigitsTrainable`` is a ``tune.Trainable``: ``setup`` builds the model and data,
``step`` trains one epoch and returns the validation metrics, ``save_checkpoint`` and
``load_checkpoint`` write and read the model, the optimizer and the epoch counter.
tunefleet checkpoints every epoch (``CheckpointConfig(checkpoint_frequency=1)``):
``save_checkpoint`` writes into a folder inside the trial's checkpoints folder, which
is renamed into place, never copied (the zero-copy path).

``--function`` runs the same training as a function trainable, ``train_digits``, which
takes that path itself: each epoch it asks ``tune.get_context().new_checkpoint_dir()``
for a fresh folder, saves into it and reports it; ``report()`` renames it into place
and hashes it in the background, so the checkpoint costs the trial about a
millisecond whatever its size (docs/checkpoints.md).

The data are scikit-learn's bundled digits (1,797 images of 8x8 pixels, no download),
split 80/20 once with a fixed seed. Four trials try two learning rates and two widths.

Kill the driver at any moment (Ctrl-C twice, ``kill -9``, a lost SSH session), then
run the same command with ``--resume``: ``tune.Tuner.restore`` continues the experiment.
Trials that had finished are not run again; those that were running continue from
their newest checkpoint, so their epoch counter goes on (each trial reports
``resumed_from``, the epoch it was restored at, 0 if it never was).

    python examples/trainable_digits.py               # 4 trials x 15 epochs, about 30 s
    python examples/trainable_digits.py --resume      # after a crash: continue it
    python examples/trainable_digits.py --smoke       # 4 trials x 10 short epochs, for tests
    python examples/trainable_digits.py --function    # the function trainable instead
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch
from sklearn.datasets import load_digits
from torch import nn

import tunefleet as tune

NAME = "trainable_digits"


class DigitsCNN(nn.Module):
    """Two 3x3 convolutions, one 2x2 pooling (8x8 -> 4x4), a linear classifier."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classify = nn.Linear(2 * width * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classify(self.features(x).flatten(1))
        return logits


class DigitsTrainable(tune.Trainable):
    def setup(self, config: dict[str, Any], **params: Any) -> None:
        torch.set_num_threads(1)  # trials run in parallel, one CPU each
        images, labels = load_digits(return_X_y=True)
        x = torch.tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
        y = torch.tensor(labels)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        cut = int(0.8 * len(x))
        self.x_train, self.y_train = x[order[:cut]], y[order[:cut]]
        self.x_val, self.y_val = x[order[cut:]], y[order[cut:]]
        # In smoke mode an epoch sees a quarter of the training set: quick, still learning.
        self.batches_per_epoch = config.get("batches_per_epoch")
        torch.manual_seed(config.get("seed", 0))
        self.model = DigitsCNN(config["width"])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config["lr"], momentum=0.9)
        self.epoch = 0  # ours, saved in the checkpoint: proof that a resume continued
        self.resumed_from = 0

    def step(self) -> dict[str, Any]:
        self.model.train()
        order = torch.randperm(len(self.x_train))
        batches = [order[i : i + 32] for i in range(0, len(order), 32)]
        for batch in batches[: self.batches_per_epoch]:
            self.optimizer.zero_grad()
            loss = nn.functional.cross_entropy(self.model(self.x_train[batch]), self.y_train[batch])
            loss.backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
        self.epoch += 1
        self.model.eval()
        with torch.no_grad():
            logits = self.model(self.x_val)
            val_loss = float(nn.functional.cross_entropy(logits, self.y_val))
            accuracy = float((logits.argmax(1) == self.y_val).float().mean())
        return {
            "val_loss": val_loss,
            "accuracy": accuracy,
            "epoch": self.epoch,
            "resumed_from": self.resumed_from,
        }

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "rng": torch.get_rng_state(),
        }
        torch.save(state, os.path.join(checkpoint_dir, "state.pt"))

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        assert isinstance(checkpoint, str)  # we saved a directory, not a dict
        state = torch.load(os.path.join(checkpoint, "state.pt"), weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.epoch = self.resumed_from = state["epoch"]


def train_digits(config: dict[str, Any]) -> None:
    """`DigitsTrainable`'s training as a function trainable, checkpointing on the
    zero-copy path; the run's ``stop`` ends it."""
    trainer = DigitsTrainable(config)
    restored = tune.get_checkpoint()
    if restored is not None:  # a resume or a retry: continue from the newest epoch
        with restored.as_directory() as d:
            trainer.load_checkpoint(d)
    while True:
        metrics = trainer.step()
        folder = tune.get_context().new_checkpoint_dir()  # fresh, inside the trial's storage
        trainer.save_checkpoint(folder)
        # renamed into place, not copied; do not write into `folder` after this
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run")
    parser.add_argument("--smoke", action="store_true", help="4 trials x 10 short epochs")
    parser.add_argument(
        "--function", action="store_true", help="the function trainable train_digits instead"
    )
    args = parser.parse_args(argv)
    epochs = 10 if args.smoke else 15
    storage = args.storage_path or os.environ.get("TUNEFLEET_STORAGE", "~/tunefleet_results")
    experiment = os.path.join(os.path.expanduser(storage), NAME)

    trainable = tune.with_resources(train_digits if args.function else DigitsTrainable, {"cpu": 1})
    if args.resume and tune.Tuner.can_restore(experiment):
        print(f"Resuming {experiment}")
        tuner = tune.Tuner.restore(experiment, trainable)
    else:
        if args.resume:
            print(f"Nothing to resume at {experiment}: starting a new run")
        tuner = tune.Tuner(
            trainable,
            param_space={
                "lr": tune.grid_search([0.02, 0.1]),
                "width": tune.grid_search([4, 8]),
                **({"batches_per_epoch": 12} if args.smoke else {}),
            },
            tune_config=tune.TuneConfig(metric="accuracy", mode="max", max_concurrent_trials=2),
            run_config=tune.RunConfig(
                name=NAME,
                storage_path=storage,
                stop={"training_iteration": epochs},
                checkpoint_config=tune.CheckpointConfig(
                    checkpoint_frequency=0 if args.function else 1,  # it reports its own
                    num_to_keep=2,
                ),
                verbose=1,
            ),
        )
    results = tuner.fit()

    for r in sorted(results, key=lambda r: r.trial_id):
        m = r.metrics or {}  # None: the trial reported nothing
        resumed = f", resumed at epoch {m['resumed_from']}" if m.get("resumed_from") else ""
        print(
            f"  {r.trial_id}: lr={r.config['lr']} width={r.config['width']} -> "
            f"{m.get('epoch')} epochs, accuracy {m.get('accuracy', float('nan')):.3f}{resumed}"
        )
    best = results.get_best_result()
    best_metrics = best.metrics or {}  # the best trial has reported
    print(f"Best config: {best.config}, accuracy {best_metrics['accuracy']:.3f}")
    print(f"Trials: {len(results)}, errors: {results.num_errors}")
    return {"experiment": experiment, "results": results}


if __name__ == "__main__":
    main()
