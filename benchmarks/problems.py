"""Synthetic multi-fidelity problems for ``search_efficiency.py``.

Each problem is a blackbox ``f(config, budget) -> {"loss": ...}`` (budget = epochs,
1 .. ``max_budget``), its search space, and a cost in virtual seconds per budget step
that depends on the config, so that some trials are stragglers. ``true_loss`` is the
same value without noise; the benchmark uses it only to estimate the optimum.

The noise is a function of ``(config, budget)`` only (seeded by a hash of both), as
the simulated backend requires.

The ``tab-*`` problems are real learning curves, tabulated on this machine
(``tabulated.py``, ``tabulate_curves.py``); they are not in the default set.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tabulated  # siblings: the script's folder is on sys.path

import tunefleet as tune

Config = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """A synthetic problem: a blackbox, its space, its cost per step and its noise."""

    name: str
    description: str
    true_loss: Callable[[Config, int], float]
    cost: Callable[[Config, int], float]
    param_space: dict[str, Any]
    sample: Callable[[random.Random], Config]
    max_budget: int = 81
    noise: float = 0.0
    # the configs of the references (targets, optimum); None: random ones (`sample`)
    reference_configs: Callable[[], list[Config]] | None = None

    def f(self, config: Config, budget: int) -> dict[str, float]:
        """The blackbox: the noise-free loss plus Gaussian noise fixed by (config, budget)."""
        loss = self.true_loss(config, budget)
        if self.noise:
            key = f"{self.name}|{sorted(config.items())!r}|{budget}".encode()
            loss += self.noise * random.Random(zlib.crc32(key)).gauss(0.0, 1.0)
        return {"loss": loss}


# --- (1) learning curves with late bloomers -----------------------------------------


def _curve(config: Config, budget: int) -> float:
    # loss(b) = final + (start - final) * exp(-b / tau). A large learning rate learns
    # fast (small tau) but ends worse; a small one, or dropout, learns slowly and may
    # end better: the curves cross.
    u = math.log10(config["lr"])  # -4 .. 0
    width, dropout = config["width"], config["dropout"]
    final = 0.05 + 0.12 * (u + 2.5) ** 2 + 0.25 / width + 0.8 * (dropout - 0.2) ** 2
    tau = 10.0 * 10.0 ** (-(u + 4.0) / 2.0) * (1.0 + 2.0 * dropout)  # 0.1 .. 20 epochs
    start = 2.3
    return float(final + (start - final) * math.exp(-budget / tau))


def _curve_cost(config: Config, budget: int) -> float:
    return 1.0 + 0.5 * float(config["width"])  # 1.5 .. 5 s per epoch


def _curve_sample(rng: random.Random) -> Config:
    return {
        "lr": 10.0 ** rng.uniform(-4.0, 0.0),
        "width": rng.randint(1, 8),
        "dropout": rng.uniform(0.0, 0.5),
    }


LEARNING_CURVES = Problem(
    name="learning-curves",
    description=(
        "final + (2.3 - final) * exp(-epoch / tau); lr (log 1e-4..1), width (1..8), "
        "dropout (0..0.5); fast starters end worse; noise sd 0.01; 1.5-5 s per epoch"
    ),
    true_loss=_curve,
    cost=_curve_cost,
    param_space={
        "lr": tune.loguniform(1e-4, 1.0),
        "width": tune.randint(1, 9),  # 1..8: the upper bound is excluded
        "dropout": tune.uniform(0.0, 0.5),
    },
    sample=_curve_sample,
    noise=0.01,
)


# --- (2) learning curves without fast bad starters ------------------------------------

_BEST_LOG_LR = -2.5  # the lr with the lowest final loss in `_curve`


def _curve_mild(config: Config, budget: int) -> float:
    # `_curve` with one change: a learning rate above the best final one (10^-2.5) is
    # no faster than it (in real training, raising lr past its best value makes it
    # unstable rather than faster), so the fast starters are not the bad configs by
    # construction. Small learning rates and dropout are still late bloomers.
    u = math.log10(config["lr"])
    width, dropout = config["width"], config["dropout"]
    final = 0.05 + 0.12 * (u + 2.5) ** 2 + 0.25 / width + 0.8 * (dropout - 0.2) ** 2
    tau = 10.0 * 10.0 ** (-(min(u, _BEST_LOG_LR) + 4.0) / 2.0) * (1.0 + 2.0 * dropout)
    return float(final + (2.3 - final) * math.exp(-budget / tau))


LEARNING_CURVES_MILD = Problem(
    name="learning-curves-mild",
    description=(
        "learning-curves, but no lr learns faster than the best one (10^-2.5): "
        "curves cross (small lr, dropout) without fast starters ending worst"
    ),
    true_loss=_curve_mild,
    cost=_curve_cost,
    param_space=LEARNING_CURVES.param_space,
    sample=_curve_sample,
    noise=0.01,
)


# --- (3, 4) multi-fidelity Branin -----------------------------------------------------

BRANIN_MIN = 0.397887


def _branin(x1: float, x2: float) -> float:
    b, c = 5.1 / (4 * math.pi**2), 5 / math.pi
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x1) + 10


def _weight(budget: int, max_budget: int) -> float:
    # 1 at budget 1, 0 at max_budget: how far the low fidelity is from the truth
    return ((max_budget - budget) / (max_budget - 1)) ** 2


def _branin_good(config: Config, budget: int) -> float:
    # true value + a positive bias that shrinks with budget and varies little with the
    # config (a fifth of Branin at the mirrored point): low budgets rank configs well
    x1, x2 = config["x1"], config["x2"]
    bias = 20.0 + 0.2 * _branin(5.0 - x1, x2)
    return _branin(x1, x2) + _weight(budget, 81) * bias


def _branin_bad(config: Config, budget: int) -> float:
    # at budget 1 the value is 20 + Branin at the mirrored point x1 -> 5 - x1, whose
    # minima lie elsewhere: low budgets rank configs badly until late
    x1, x2 = config["x1"], config["x2"]
    true = _branin(x1, x2)
    return true + _weight(budget, 81) * (20.0 + _branin(5.0 - x1, x2) - true)


def _branin_cost(config: Config, budget: int) -> float:
    return 1.0 + 3.0 * float(config["x2"]) / 15.0  # 1 .. 4 s per step


def _branin_sample(rng: random.Random) -> Config:
    return {"x1": rng.uniform(-5.0, 10.0), "x2": rng.uniform(0.0, 15.0)}


_BRANIN_SPACE = {"x1": tune.uniform(-5.0, 10.0), "x2": tune.uniform(0.0, 15.0)}

BRANIN_GOOD = Problem(
    name="branin-good",
    description=(
        "Branin + w(b) * (20 + 0.2 * Branin(5 - x1, x2)), w = ((81 - b) / 80)^2; "
        "noise sd 0.1; 1-4 s per step"
    ),
    true_loss=_branin_good,
    cost=_branin_cost,
    param_space=_BRANIN_SPACE,
    sample=_branin_sample,
    noise=0.1,
)

BRANIN_BAD = Problem(
    name="branin-bad",
    description=(
        "Branin + w(b) * (20 + Branin(5 - x1, x2) - Branin), w = ((81 - b) / 80)^2: "
        "low budgets see the mirrored function; noise sd 0.1; 1-4 s per step"
    ),
    true_loss=_branin_bad,
    cost=_branin_cost,
    param_space=_BRANIN_SPACE,
    sample=_branin_sample,
    noise=0.1,
)

PROBLEMS: dict[str, Problem] = {
    p.name: p for p in (LEARNING_CURVES, LEARNING_CURVES_MILD, BRANIN_GOOD, BRANIN_BAD)
}
DEFAULT_PROBLEMS = tuple(PROBLEMS)  # the synthetic ones; the tabulated ones are opt-in
# real learning curves (tabulated.py): "tab-digits-mlp", "tab-gbm", "tab-gbm-late", and
# the same tables with a blended lookup: "tab-digits-mlp-idw", "tab-gbm-idw", "tab-gbm-late-idw"
PROBLEMS.update((p.name, p) for p in tabulated.problems())
