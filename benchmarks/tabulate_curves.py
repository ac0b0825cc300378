"""Tabulate real learning curves: train models here, record every epoch, store a table.

Each task trains ``--configs`` random configs of its search space on one of
scikit-learn's bundled data sets (no download) and records, per config, the validation
loss after every epoch (budget step) and the CPU seconds one step took. The tables go to
``benchmarks/data/curves-<task>.json.gz``; ``tabulated.py`` turns each into a problem of
``search_efficiency.py`` (nearest tabulated config, virtual time = the CPU seconds).

Tasks:

``digits-mlp``
    The numpy MLP of ``real_problems.py`` (one hidden ReLU layer, SGD with momentum and
    weight decay) on the 1,197 unshifted training digits, 600 for validation; 27
    epochs; loss = validation cross-entropy (capped at 5; diverged runs get 5).
``gbm``
    ``GradientBoostingClassifier`` on breast_cancer (398 training, 171 validation
    samples, stratified), shallow trees (depth 1..3), learning rate 0.01..0.5 (log); a
    step = 2 boosting stages, 81 steps (162 trees, one fit, the curve from
    ``staged_predict_proba``); loss = validation log loss.
``gbm-late`` (late bloomers)
    The same with deep trees (depth 3..8, leaves of 1..8 samples) and learning rates
    0.002..1: the fast starters (high learning rate) overfit and their log loss climbs,
    the slow ones end best, so the first steps rank configs badly (see ``--report``).

A config's values are rounded to 6 significant digits before training, so the table
holds the exact configs it was trained with. Losses are rounded to 4 significant
digits, seconds to 3. The losses are exactly reproducible (seeded: config stream and
model seeds); the seconds are measured, so they vary from run to run.

    nice -n 5 .venv/bin/python benchmarks/tabulate_curves.py --task digits-mlp --configs 2500
    nice -n 5 .venv/bin/python benchmarks/tabulate_curves.py --task gbm --configs 1200
    nice -n 5 .venv/bin/python benchmarks/tabulate_curves.py --task gbm-late --configs 1000
    .venv/bin/python benchmarks/tabulate_curves.py --report   # rank correlations
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # one CPU: BLAS reads these when numpy is first imported
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"

import numpy as np  # after the thread settings
import real_problems as rp  # (siblings: the script's folder is on sys.path)

DATA_DIR = Path(__file__).resolve().parent / "data"
Config = dict[str, Any]
Curve = tuple[list[float], float]  # (loss after each step, CPU seconds per step)

NLL_CAP = 5.0  # cross-entropy of a diverged MLP (uniform guessing is ln 10 = 2.30)

MLP_SPACE: dict[str, rp.Spec] = {
    "lr": ("loguniform", 1e-3, 1.0),
    "width": ("choice", [16, 32, 64, 128]),
    "weight_decay": ("loguniform", 1e-6, 1e-1),
    "batch_size": ("choice", [16, 32, 64, 128, 256]),
    "momentum": ("uniform", 0.0, 0.95),
}
SPACES: dict[str, dict[str, rp.Spec]] = {
    "digits-mlp": MLP_SPACE,
    "gbm": {  # shallow trees
        "learning_rate": ("loguniform", 0.01, 0.5),
        "max_depth": ("randint", 1, 4),  # 1..3
        "subsample": ("uniform", 0.5, 1.0),
        "min_samples_leaf": ("randint", 1, 33),  # 1..32
        "max_features": ("uniform", 0.1, 1.0),
    },
    "gbm-late": {  # deep trees, wide learning rates: fast starters overfit, late bloomers win
        "learning_rate": ("loguniform", 0.002, 1.0),
        "max_depth": ("randint", 3, 9),  # 3..8
        "subsample": ("uniform", 0.3, 1.0),
        "min_samples_leaf": ("randint", 1, 9),  # 1..8
        "max_features": ("uniform", 0.1, 1.0),
    },
}
MAX_BUDGET = {"digits-mlp": 27, "gbm": 81, "gbm-late": 81}
GBM_TREES_PER_STEP = 2
METRIC = {
    "digits-mlp": "validation cross-entropy",
    "gbm": "validation log loss",
    "gbm-late": "validation log loss",
}


def round_config(spec: dict[str, rp.Spec], config: Config) -> Config:
    """Floats to 6 significant digits (what the table stores); the rest as drawn."""
    return {
        k: float(f"{v:.6g}") if spec[k][0] in ("loguniform", "uniform") else v
        for k, v in config.items()
    }


# --- the MLPs ----------------------------------------------------------------------------


def digits_split() -> dict[str, np.ndarray]:
    """The digits split of ``real_problems`` without the shifted copies (1,197 train)."""
    data = rp.load_digits_data()
    n = len(data["y_train"]) // 5  # the originals come first, then 4 shifted copies
    return {**data, "x_train": data["x_train"][:n], "y_train": data["y_train"][:n]}


def cross_entropy(model: rp.DigitsMLP) -> float:
    p, data = model.params, model.data
    with np.errstate(all="ignore"):
        h = np.maximum(data["x_val"] @ p["w1"] + p["b1"], 0.0)
        logits = (h @ p["w2"] + p["b2"]).astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        nll = -float(np.mean(logp[np.arange(len(data["y_val"])), data["y_val"]]))
    return nll if math.isfinite(nll) and nll < NLL_CAP else NLL_CAP


def mlp_curve(task: str, config: Config, data: dict[str, np.ndarray]) -> Curve:
    epochs = MAX_BUDGET[task]
    model = rp.DigitsMLP(config, data)
    losses, cpu = [], 0.0
    for _ in range(epochs):
        started = time.process_time()
        model.train_epoch()  # returns the error; the table keeps the cross-entropy
        cpu += time.process_time() - started
        losses.append(cross_entropy(model))
    return losses, cpu / epochs


# --- gradient boosting -----------------------------------------------------------------


def gbm_split() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    x, y = load_breast_cancer(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=0.3, random_state=0, stratify=y
    )
    return {"x_train": x_train, "y_train": y_train, "x_val": x_val, "y_val": y_val}


def gbm_curve(task: str, config: Config, data: dict[str, np.ndarray]) -> Curve:
    from sklearn.ensemble import GradientBoostingClassifier

    steps = MAX_BUDGET[task]
    model = GradientBoostingClassifier(
        n_estimators=steps * GBM_TREES_PER_STEP, random_state=0, **config
    )
    started = time.process_time()
    model.fit(data["x_train"], data["y_train"])
    cpu = time.process_time() - started
    y = data["y_val"]
    losses = []
    for i, proba in enumerate(model.staged_predict_proba(data["x_val"])):
        if (i + 1) % GBM_TREES_PER_STEP == 0:
            p = np.clip(proba[np.arange(len(y)), y], 1e-15, 1.0)
            losses.append(-float(np.mean(np.log(p))))
    return losses, cpu / steps


TRAIN: dict[str, tuple[Callable[[], dict[str, np.ndarray]], Callable[..., Curve]]] = {
    "digits-mlp": (digits_split, mlp_curve),
    "gbm": (gbm_split, gbm_curve),
    "gbm-late": (gbm_split, gbm_curve),
}


# --- the table -------------------------------------------------------------------------


def table_path(task: str, directory: Path = DATA_DIR) -> Path:
    return directory / f"curves-{task}.json.gz"


def tabulate(task: str, configs: int, seed: int, progress: bool = True) -> dict[str, Any]:
    """Train `configs` random configs of `task` (config stream seeded by `seed`)."""
    spec = SPACES[task]
    load, train = TRAIN[task]
    data = load()
    rng = random.Random(f"{task}|{seed}")
    columns: dict[str, list[Any]] = {name: [] for name in spec}
    losses, seconds = [], []
    started = time.perf_counter()
    for i in range(configs):
        config = round_config(spec, rp.sample(spec, rng))
        curve, per_step = train(task, config, data)
        for name, value in config.items():
            columns[name].append(value)
        losses.append([float(f"{v:.4g}") for v in curve])
        seconds.append(float(f"{per_step:.3g}"))
        if progress and (i + 1) % 100 == 0:
            print(f"{task}: {i + 1}/{configs} in {time.perf_counter() - started:.0f} s", flush=True)
    return {
        "task": task,
        "metric": METRIC[task],
        "max_budget": MAX_BUDGET[task],
        "space": {name: list(s) for name, s in spec.items()},
        "seed": seed,
        "configs": columns,
        "loss": losses,
        "step_cpu_s": seconds,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def save(table: dict[str, Any], path: Path) -> None:
    """Gzipped JSON with no timestamp in the header: the same table, the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(table, separators=(",", ":")).encode()
    with path.open("wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as z:
        z.write(raw)


def load_table(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        table: dict[str, Any] = json.load(f)
    return table


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho with average ranks for ties."""

    def ranks(x: np.ndarray) -> np.ndarray:
        _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
        ends = np.cumsum(counts)
        return ((ends - counts + ends - 1) / 2.0)[inverse]  # the mean rank of each tie

    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def report(path: Path) -> str:
    table = load_table(path)
    loss = np.array(table["loss"])
    budget = table["max_budget"]
    tenth = max(1, round(budget / 10))
    final = loss[:, -1]
    return (
        f"{table['task']}: {len(loss)} configs x {budget} steps, {table['metric']}; "
        f"final p1/p5/median {np.percentile(final, 1):.4g}/{np.percentile(final, 5):.4g}/"
        f"{np.median(final):.4g}; Spearman with the final loss: step 1 "
        f"{spearman(loss[:, 0], final):+.2f}, step {tenth} (10 %) "
        f"{spearman(loss[:, tenth - 1], final):+.2f}, step {budget // 3} "
        f"{spearman(loss[:, budget // 3 - 1], final):+.2f}; CPU s per step median "
        f"{np.median(table['step_cpu_s']):.3g}; tabulated in {table['wall_s']:,.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", nargs="+", choices=sorted(SPACES), default=list(SPACES))
    parser.add_argument("--configs", type=int, default=2000, help="configs per task")
    parser.add_argument("--seed", type=int, default=0, help="seed of the config stream")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="folder of the tables")
    parser.add_argument("--report", action="store_true", help="only print the tables' figures")
    args = parser.parse_args(argv)
    for task in args.task:
        path = table_path(task, args.out)
        if not args.report:
            save(tabulate(task, args.configs, args.seed), path)
        if path.exists():
            print(report(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
