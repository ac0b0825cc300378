"""Problems made of real learning curves, tabulated by ``tabulate_curves.py``.

A table (``benchmarks/data/curves-<task>.json.gz``) holds random configs of a task's
search space, each with its validation loss after every step and the CPU seconds a step
took when it was trained on this machine. As a problem of ``search_efficiency.py``
(``tab-<task>``):

- ``f(config, budget)`` is the tabulated loss at ``budget`` of the NEAREST tabulated
  config: in a space where every numeric parameter is scaled to [0, 1] (on a log scale
  for log-uniform ones, integers as numbers), squared distances, plus 1 for each
  categorical parameter that differs. Ties go to the first row: a lookup is
  deterministic. A tabulated config finds itself (distance 0).
- ``cost(config, budget)`` is that config's CPU seconds per step times ``TIME_SCALE``
  (1,000: one virtual second per CPU millisecond, as if the data set were a thousand
  times larger), so times read as whole numbers; every figure is a ratio of times.
- ``true_loss`` is the table value (no noise: the table is the truth), and the
  references (targets, optimum, median) are the table's own configs: the table is a
  random sample of the space, and every config maps onto one of its rows, so the
  table's lowest loss (at any step: real curves climb back up, and the incumbent is a
  result at any budget) is the problem's optimum.

``tab-<task>-idw`` is the same table with a smoother lookup: a config's curve (and its
step cost) is the inverse-squared-distance blend of its ``IDW_NEIGHBOURS`` nearest
tabulated configs, so two nearby configs are two different (similar) models, as on the
real task, where the nearest lookup makes them one row. A tabulated config still finds
its own curve (its weight dominates), so the references are the same; but the blend
pulls the best rows' curves towards their neighbours', so the optimum is reached only
on a tabulated config itself, and regrets are higher than on ``tab-<task>``.
"""

from __future__ import annotations

import functools
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import real_problems as rp  # siblings: the script's folder is on sys.path
from tabulate_curves import DATA_DIR, MAX_BUDGET, METRIC, SPACES, load_table, table_path

if TYPE_CHECKING:
    from problems import Problem

Config = dict[str, Any]
TIME_SCALE = 1000.0  # virtual seconds per CPU second
TASKS = ("digits-mlp", "gbm", "gbm-late")
IDW_NEIGHBOURS = 8  # tab-<task>-idw: the tabulated configs a curve is blended from
IDW_SUFFIX = "-idw"
TABLES = (*TASKS, *(task + IDW_SUFFIX for task in TASKS))  # each with its lookup


class Table:
    """One tabulated task: its configs, curves and step costs, with its lookup (the
    nearest row, or a blend of `neighbours` rows)."""

    def __init__(self, task: str, path: Path | None = None, neighbours: int = 1) -> None:
        raw = load_table(path or table_path(task, DATA_DIR))
        self.task = task
        self.neighbours = neighbours  # 1: the nearest row; more: a blend of that many
        self.spec: dict[str, rp.Spec] = {k: tuple(v) for k, v in raw["space"].items()}
        self.max_budget = int(raw["max_budget"])
        self.loss = np.asarray(raw["loss"], dtype=float)  # (configs, max_budget)
        self.step_s = np.asarray(raw["step_cpu_s"], dtype=float) * TIME_SCALE
        columns = raw["configs"]
        self.rows: list[Config] = [
            dict(zip(columns, values, strict=True))
            for values in zip(*columns.values(), strict=True)
        ]
        self.numeric = [k for k, (kind, *_) in self.spec.items() if kind != "choice"]
        self.categorical = [k for k, (kind, *_) in self.spec.items() if kind == "choice"]
        self._points = np.array([self._scaled(c) for c in self.rows]).reshape(len(self.rows), -1)
        self._codes = np.array(
            [[c[k] for k in self.categorical] for c in self.rows], dtype=object
        ).reshape(len(self.rows), -1)
        self._index: dict[tuple[Any, ...], int] = {}
        self._blends: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}

    def _scaled(self, config: Config) -> list[float]:
        out = []
        for k in self.numeric:
            kind, lo, hi = self.spec[k]
            v = float(config[k])
            if kind == "loguniform":
                out.append((math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)))
            elif kind == "randint":
                out.append((v - lo) / max(1, hi - 1 - lo))
            else:
                out.append((v - lo) / (hi - lo))
        return out

    def _distances(self, config: Config) -> np.ndarray:
        d: np.ndarray = ((self._points - np.array(self._scaled(config))) ** 2).sum(axis=1)
        if self.categorical:
            codes = np.array([config[k] for k in self.categorical], dtype=object)
            d = d + (self._codes != codes).sum(axis=1)
        return d

    def index(self, config: Config) -> int:
        """The row of the nearest tabulated config (cached per config)."""
        key = tuple(config[k] for k in self.spec)
        if (row := self._index.get(key)) is None:
            row = self._index[key] = int(np.argmin(self._distances(config)))  # first of equals
        return row

    def blend(self, config: Config, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `k` nearest rows and their weights (1 / squared distance, summing to 1;
        cached per config): a tabulated config's own row takes all but ~1e-12 of it."""
        key = (k, *(config[c] for c in self.spec))
        if (got := self._blends.get(key)) is None:
            d = self._distances(config)
            rows = np.argsort(d, kind="stable")[:k]
            weights = 1.0 / (d[rows] + 1e-12)
            got = self._blends[key] = (rows, weights / weights.sum())
        return got

    def loss_at(self, config: Config, budget: int) -> float:
        if self.neighbours > 1:
            rows, weights = self.blend(config, self.neighbours)
            return float(self.loss[rows, budget - 1] @ weights)
        return float(self.loss[self.index(config), budget - 1])

    def cost(self, config: Config, budget: int) -> float:
        if self.neighbours > 1:
            rows, weights = self.blend(config, self.neighbours)
            return float(self.step_s[rows] @ weights)
        return float(self.step_s[self.index(config)])


@functools.cache
def table(task: str) -> Table:
    """The task's committed table, loaded on first use; ``<task>-idw``: the same table
    with the blended lookup."""
    base = task.removesuffix(IDW_SUFFIX)
    return Table(base, neighbours=1 if base == task else IDW_NEIGHBOURS)


def problem(task: str) -> Problem:
    """The ``tab-<task>`` problem (`task` may end in ``-idw``); its table is read on the
    first call of any of its functions."""
    from problems import Problem  # here: problems.py registers these problems on import

    import tunefleet as tune  # here: the peers' environment reads the tables without it

    base = task.removesuffix(IDW_SUFFIX)
    spec = SPACES[base]

    def sample(rng: random.Random) -> Config:
        return rp.sample(spec, rng)

    lookup = (
        "nearest tabulated config"
        if base == task
        else f"curve blended from the {IDW_NEIGHBOURS} nearest tabulated configs (1/d^2)"
    )
    return Problem(
        name=f"tab-{task}",
        description=(
            f"real curves tabulated on this CPU ({METRIC[base]}; tabulate_curves.py), "
            f"{lookup}; 1 virtual s = 1 CPU ms"
        ),
        true_loss=lambda config, budget: table(task).loss_at(config, budget),
        cost=lambda config, budget: table(task).cost(config, budget),
        param_space=rp.tune_space(spec, tune),
        sample=sample,
        max_budget=MAX_BUDGET[base],
        reference_configs=lambda: table(task).rows,
    )


def problems() -> list[Problem]:
    return [problem(task) for task in TABLES]
