"""Real small problems for ``real_efficiency.py``: they train for real, on the CPU.

- ``digits``: a one-hidden-layer MLP in plain numpy on scikit-learn's bundled digits
  (1,797 8x8 images, 10 classes; a fixed 600 for validation, the other 1,197 for
  training, each also shifted by one pixel in the 4 directions: 5,985 training images),
  trained by minibatch SGD with momentum and weight decay; budget = epochs; metric =
  validation error (a fraction). Plain numpy so the
  same code runs in ``.venv`` (tunefleet) and ``.venv-peers`` (Ray Tune, Optuna).
- ``lstm``: the LSTM forecaster of ``examples/lstm_sunspots.py`` on the yearly sunspot
  numbers; budget = epochs; metric = validation RMSE in sunspots. Needs torch, so only
  ``.venv`` runs it; torch is imported only when this problem is used.

Each problem is a *model* object with ``train_epoch() -> metric`` (one epoch, then the
validation metric), ``epoch`` (epochs done), ``save(dir)`` / ``load(dir)`` (for the
schedulers that pause). Given its config and ``seed`` a run is deterministic: the same
config gives the same learning curve in every framework.

The search spaces are neutral (``SPACES``): ``tune_space`` turns one into tunefleet's
or Ray Tune's domains (same names), ``optuna_suggest`` into Optuna's ``suggest_*``
calls, ``sample`` draws a config with a ``random.Random``.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

Config = dict[str, Any]
Spec = tuple[Any, ...]

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
TAG = "TUNEFLEET_REAL"  # prefix of the JSON lines the peer scripts print


def emit(record: dict[str, Any]) -> None:
    """One JSON line for ``real_efficiency.py`` (a result, or a run's summary)."""
    print(f"{TAG} {json.dumps(record)}", flush=True)


def add_peer_args(parser: Any) -> None:
    """The command line shared by the peer scripts (``benchmarks/peers/*``)."""
    parser.add_argument("--problem", default="digits", choices=["digits"])
    parser.add_argument("--seed", type=int, default=0, help="seed of the random search")
    parser.add_argument("--budget", type=float, default=30.0, help="wall-clock seconds")
    parser.add_argument("--max-t", type=int, default=81, help="epochs of a full trial")
    parser.add_argument("--grace", type=int, default=1, help="first rung, in epochs")
    parser.add_argument("--eta", type=int, default=3, help="reduction factor")
    parser.add_argument("--concurrency", type=int, default=2, help="trials at a time")
    parser.add_argument("--data", help=".npz of the digits split (default: scikit-learn)")


# --- search spaces -------------------------------------------------------------------

SPACES: dict[str, dict[str, Spec]] = {
    "digits": {
        "lr": ("loguniform", 1e-3, 1.0),
        "width": ("choice", [16, 32, 64, 128, 256]),
        "weight_decay": ("loguniform", 1e-6, 1e-1),
        "batch_size": ("choice", [16, 32, 64, 128, 256]),
        "momentum": ("uniform", 0.0, 0.95),
    },
    # the space of examples/lstm_sunspots.py
    "lstm": {
        "lr": ("loguniform", 1e-4, 1e-1),
        "hidden": ("choice", [16, 32, 64]),
        "layers": ("randint", 1, 4),  # 1, 2 or 3: the upper bound is excluded
        "dropout": ("uniform", 0.0, 0.3),
    },
}

METRICS = {"digits": "val_error", "lstm": "val_rmse"}
DESCRIPTIONS = {
    "digits": (
        "numpy MLP 64-width-10 on sklearn digits (1,197 train images x 5 one-pixel shifts, "
        "600 validation), "
        "SGD with momentum; lr log 1e-3..1, width 16..256, weight decay log 1e-6..0.1, "
        "batch 16..256, momentum 0..0.95; metric: validation error"
    ),
    "lstm": (
        "torch LSTM forecaster of examples/lstm_sunspots.py on the yearly sunspots "
        "(1700-2008, last 20% validation); lr log 1e-4..0.1, hidden 16/32/64, layers 1-3, "
        "dropout 0..0.3; metric: validation RMSE (sunspots)"
    ),
}


def tune_space(spec: dict[str, Spec], tune: Any) -> dict[str, Any]:
    """The space as domains of ``tune`` (``tunefleet`` or ``ray.tune``: same names)."""
    space: dict[str, Any] = {}
    for name, (kind, *args) in spec.items():
        space[name] = tune.choice(args[0]) if kind == "choice" else getattr(tune, kind)(*args)
    return space


def optuna_suggest(spec: dict[str, Spec], trial: Any) -> Config:
    """One config through Optuna's ``trial.suggest_*`` calls."""
    config: Config = {}
    for name, (kind, *args) in spec.items():
        if kind == "loguniform":
            config[name] = trial.suggest_float(name, args[0], args[1], log=True)
        elif kind == "uniform":
            config[name] = trial.suggest_float(name, args[0], args[1])
        elif kind == "randint":
            config[name] = trial.suggest_int(name, args[0], args[1] - 1)
        else:
            config[name] = trial.suggest_categorical(name, args[0])
    return config


def sample(spec: dict[str, Spec], rng: random.Random) -> Config:
    """A random config, drawn as the frameworks' random search draws it."""
    config: Config = {}
    for name, (kind, *args) in spec.items():
        if kind == "loguniform":
            config[name] = math.exp(rng.uniform(math.log(args[0]), math.log(args[1])))
        elif kind == "uniform":
            config[name] = rng.uniform(args[0], args[1])
        elif kind == "randint":
            config[name] = rng.randrange(args[0], args[1])
        else:
            config[name] = rng.choice(args[0])
    return config


# --- (a) digits: a numpy MLP -----------------------------------------------------------

DIGITS_VALIDATION = 600  # images held out, by a fixed permutation


def load_digits_data(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """The digits split: ``x_train, y_train, x_val, y_val`` (float32 pixels in [0, 1]).

    From scikit-learn when it is importable; else from ``path``, an ``.npz`` written
    by ``save_digits_data`` (the peers' environment has no scikit-learn).
    """
    if path is not None:
        with np.load(path) as f:
            return {k: f[k] for k in f.files}
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    val, train = order[:DIGITS_VALIDATION], order[DIGITS_VALIDATION:]
    x_train, y_train = _shifted(x[train]), np.tile(y[train], 5)
    return {"x_train": x_train, "y_train": y_train, "x_val": x[val], "y_val": y[val]}


def _shifted(x: np.ndarray) -> np.ndarray:
    """The images and their copies moved one pixel up, down, left and right (zeros in)."""
    images = x.reshape(-1, 8, 8)
    out = [images]
    for axis, step in ((1, 1), (1, -1), (2, 1), (2, -1)):
        moved = np.roll(images, step, axis=axis)
        edge = 0 if step == 1 else -1
        if axis == 1:
            moved[:, edge, :] = 0.0
        else:
            moved[:, :, edge] = 0.0
        out.append(moved)
    return np.concatenate(out).reshape(-1, 64)


def save_digits_data(path: str | Path) -> None:
    np.savez(path, **load_digits_data())  # type: ignore[arg-type]  # numpy's stub types **kwds poorly


class DigitsMLP:
    """64 -> width (ReLU) -> 10 (softmax), SGD with momentum and L2 weight decay.

    Diverged weights (a large lr) stay diverged; their predictions are class 0, so the
    error is about 0.9 (finite, as a real run would report it).
    """

    def __init__(self, config: Config, data: dict[str, np.ndarray], seed: int = 0) -> None:
        self.lr = float(config["lr"])
        self.momentum = float(config["momentum"])
        self.wd = float(config["weight_decay"])
        self.batch = int(config["batch_size"])
        width = int(config["width"])
        self.data = data
        self.rng = np.random.default_rng(seed)
        d_in, d_out = data["x_train"].shape[1], 10
        self.params = {
            "w1": (self.rng.standard_normal((d_in, width)) * math.sqrt(2.0 / d_in)).astype(
                np.float32
            ),
            "b1": np.zeros(width, np.float32),
            "w2": (self.rng.standard_normal((width, d_out)) * math.sqrt(1.0 / width)).astype(
                np.float32
            ),
            "b2": np.zeros(d_out, np.float32),
        }
        self.velocity = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.epoch = 0

    def train_epoch(self) -> float:
        """One pass over the training images; returns the validation error."""
        p, v = self.params, self.velocity
        x, y = self.data["x_train"], self.data["y_train"]
        lr, mu, wd = np.float32(self.lr), np.float32(self.momentum), np.float32(self.wd)
        with np.errstate(all="ignore"):
            order = self.rng.permutation(len(y))
            for start in range(0, len(y), self.batch):
                idx = order[start : start + self.batch]
                xb, yb = x[idx], y[idx]
                h = np.maximum(xb @ p["w1"] + p["b1"], 0.0)
                logits = h @ p["w2"] + p["b2"]
                logits -= logits.max(axis=1, keepdims=True)
                prob = np.exp(logits)
                prob /= prob.sum(axis=1, keepdims=True)
                prob[np.arange(len(yb)), yb] -= 1.0
                g_logits = prob / np.float32(len(yb))
                grads = {"w2": h.T @ g_logits, "b2": g_logits.sum(axis=0)}
                g_h = (g_logits @ p["w2"].T) * (h > 0)
                grads["w1"] = xb.T @ g_h
                grads["b1"] = g_h.sum(axis=0)
                for k in ("w1", "w2"):
                    grads[k] += wd * p[k]
                for k, g in grads.items():
                    v[k] *= mu
                    v[k] -= lr * g
                    p[k] += v[k]
        self.epoch += 1
        return self.validation_error()

    def validation_error(self) -> float:
        p = self.params
        with np.errstate(all="ignore"):
            h = np.maximum(self.data["x_val"] @ p["w1"] + p["b1"], 0.0)
            logits = np.nan_to_num(h @ p["w2"] + p["b2"], nan=-np.inf)
        pred = logits.argmax(axis=1)
        return float(np.mean(pred != self.data["y_val"]))

    def save(self, directory: str | Path) -> None:
        arrays = {f"p_{k}": a for k, a in self.params.items()}
        arrays.update({f"v_{k}": a for k, a in self.velocity.items()})
        np.savez(Path(directory) / "mlp.npz", **arrays)  # type: ignore[arg-type]
        state = {"epoch": self.epoch, "rng": self.rng.bit_generator.state}
        (Path(directory) / "state.json").write_text(json.dumps(state))

    def load(self, directory: str | Path) -> None:
        with np.load(Path(directory) / "mlp.npz") as f:
            self.params = {k: f[f"p_{k}"] for k in self.params}
            self.velocity = {k: f[f"v_{k}"] for k in self.velocity}
        state = json.loads((Path(directory) / "state.json").read_text())
        self.epoch = int(state["epoch"])
        self.rng.bit_generator.state = state["rng"]


# --- (b) lstm: the sunspot forecaster of examples/lstm_sunspots.py ----------------------


def load_sunspots() -> list[float]:
    if str(EXAMPLES_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLES_DIR))
    from lstm_sunspots import load_series

    series: list[float] = load_series()[1]
    return series


class SunspotsLSTM:
    """The example's model and training epoch, one call per epoch; metric: val RMSE."""

    def __init__(self, config: Config, values: list[float], seed: int = 0) -> None:
        if str(EXAMPLES_DIR) not in sys.path:
            sys.path.insert(0, str(EXAMPLES_DIR))
        import torch
        from lstm_sunspots import BATCH_SIZE, Data, build

        torch.set_num_threads(1)  # trials run in parallel, one CPU each
        torch.manual_seed(seed)
        self.torch, self.batch_size = torch, BATCH_SIZE
        self.data = Data(values)
        self.model, self.optimizer = build(config)
        self.loss_fn = torch.nn.MSELoss()
        self.epoch = 0

    def train_epoch(self) -> float:
        torch, data, model = self.torch, self.data, self.model
        model.train()
        for batch in torch.randperm(len(data.x_train)).split(self.batch_size):
            self.optimizer.zero_grad()
            loss = self.loss_fn(model(data.x_train[batch]), data.y_train[batch])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            self.optimizer.step()
        model.eval()
        with torch.no_grad():
            err = data.to_sunspots(model(data.x_val)).squeeze(-1) - data.raw_val
            rmse = float(torch.sqrt(torch.mean(err**2)))
        self.epoch += 1
        return rmse if math.isfinite(rmse) else 1e6

    def save(self, directory: str | Path) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "rng": self.torch.get_rng_state(),
        }
        self.torch.save(state, Path(directory) / "lstm.pt")

    def load(self, directory: str | Path) -> None:
        state = self.torch.load(Path(directory) / "lstm.pt", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.torch.set_rng_state(state["rng"])
        self.epoch = int(state["epoch"])


def make_model(problem: str, config: Config, data: Any) -> DigitsMLP | SunspotsLSTM:
    """``data``: ``load_digits_data()`` for digits, ``load_sunspots()`` for lstm."""
    if problem == "digits":
        return DigitsMLP(config, data)
    if problem == "lstm":
        return SunspotsLSTM(config, data)
    raise ValueError(f"unknown problem {problem!r}: choose from digits, lstm")


def load_data(problem: str, digits_path: str | Path | None = None) -> Any:
    return load_digits_data(digits_path) if problem == "digits" else load_sunspots()
