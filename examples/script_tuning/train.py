"""A training script that knows nothing about tunefleet except three conventions.

It fits y = 3x + 2 by minibatch SGD with momentum on synthetic data (pure Python, so
the example runs in a second). Run it alone:

    python train.py --lr 0.05 --momentum 0.9 --batch_size 16 --epochs 20

Under `tunefleet run` (see run.yaml) the same script is tuned:

- the config arrives as ordinary arguments (``--lr 0.05 ...``);
- each epoch it prints ``tunefleet-report: {...}`` with its metrics, and with
  ``"checkpoint": FOLDER`` after saving its state into a new folder under
  ``$TUNEFLEET_CHECKPOINT_DIR`` (copied into the trial's checkpoints, then removed);
- it resumes from ``$TUNEFLEET_RESTORE_DIR`` when that is set (a retry, a PBT exploit).
"""

from __future__ import annotations

import argparse
import json
import os
import random


def make_data(n: int, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(x, 3 * x + 2 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(n))]


def mse(w: float, b: float, data: list[tuple[float, float]]) -> float:
    return sum((w * x + b - y) ** 2 for x, y in data) / len(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()

    train, val = make_data(256, seed=0), make_data(64, seed=1)
    state = {"epoch": 0, "w": 0.0, "b": 0.0, "vw": 0.0, "vb": 0.0}
    restore = os.environ.get("TUNEFLEET_RESTORE_DIR")
    if restore:  # continue where the checkpoint left off
        with open(os.path.join(restore, "state.json")) as f:
            state = json.load(f)
    checkpoint_dir = os.environ.get("TUNEFLEET_CHECKPOINT_DIR")
    rng = random.Random(state["epoch"])

    for epoch in range(int(state["epoch"]), args.epochs):
        rng.shuffle(train)
        for i in range(0, len(train), args.batch_size):
            batch = train[i : i + args.batch_size]
            gw = sum(2 * (state["w"] * x + state["b"] - y) * x for x, y in batch) / len(batch)
            gb = sum(2 * (state["w"] * x + state["b"] - y) for x, y in batch) / len(batch)
            state["vw"] = args.momentum * state["vw"] - args.lr * gw
            state["vb"] = args.momentum * state["vb"] - args.lr * gb
            state["w"] += state["vw"]
            state["b"] += state["vb"]
        state["epoch"] = epoch + 1
        metrics = {"val_loss": mse(state["w"], state["b"], val), "epoch": epoch + 1}
        if checkpoint_dir:  # a new folder each time: tunefleet copies it while we go on
            folder = os.path.join(checkpoint_dir, f"epoch_{epoch + 1}")
            os.makedirs(folder)
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump(state, f)
            metrics["checkpoint"] = folder
        print(f"epoch {epoch + 1}: val_loss={metrics['val_loss']:.5f}")
        print("tunefleet-report: " + json.dumps(metrics), flush=True)


if __name__ == "__main__":
    main()
