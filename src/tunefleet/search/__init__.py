"""Search algorithms: where the configurations of new trials come from.

The searchers built on optional libraries (Optuna, HyperOpt, bayesian-optimization,
SciPy) are imported on first use, so `import tunefleet` stays light; each names the
extra to install when its library is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tunefleet.search._base import FINISHED, Searcher
from tunefleet.search._basic_variant import BasicVariantGenerator

if TYPE_CHECKING:
    from tunefleet.search._bayesopt import BayesOptSearch
    from tunefleet.search._bohb import TuneBOHB
    from tunefleet.search._hyperopt import HyperOptSearch
    from tunefleet.search._limiter import ConcurrencyLimiter
    from tunefleet.search._optuna import OptunaSearch
    from tunefleet.search._qmc import QMCSearch
    from tunefleet.search._repeater import Repeater

_LAZY = {
    "BayesOptSearch": "tunefleet.search._bayesopt",
    "ConcurrencyLimiter": "tunefleet.search._limiter",
    "HyperOptSearch": "tunefleet.search._hyperopt",
    "OptunaSearch": "tunefleet.search._optuna",
    "QMCSearch": "tunefleet.search._qmc",
    "Repeater": "tunefleet.search._repeater",
    "TuneBOHB": "tunefleet.search._bohb",
}

__all__ = [
    "FINISHED",
    "BasicVariantGenerator",
    "BayesOptSearch",
    "ConcurrencyLimiter",
    "HyperOptSearch",
    "OptunaSearch",
    "QMCSearch",
    "Repeater",
    "Searcher",
    "TuneBOHB",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tunefleet.search' has no attribute {name!r}")
