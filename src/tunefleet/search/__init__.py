"""Search algorithms: where the configurations of new trials come from.

The searchers built on optional libraries (Optuna, HyperOpt, SciPy, Nevergrad,
HEBO, ZOOpt, Ax) are imported on first use, so `import tunefleet` stays light; each names the
extra to install when its library is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tunefleet.search._base import FINISHED, Searcher
from tunefleet.search._basic_variant import BasicVariantGenerator

if TYPE_CHECKING:
    from tunefleet.search._ax import AxSearch
    from tunefleet.search._bayesopt import BayesOptSearch
    from tunefleet.search._bohb import TuneBOHB
    from tunefleet.search._hebo import HEBOSearch
    from tunefleet.search._hyperopt import HyperOptSearch
    from tunefleet.search._limiter import ConcurrencyLimiter
    from tunefleet.search._nevergrad import NevergradSearch
    from tunefleet.search._optuna import OptunaSearch
    from tunefleet.search._qmc import QMCSearch
    from tunefleet.search._repeater import Repeater
    from tunefleet.search._zoopt import ZOOptSearch

_LAZY = {
    "AxSearch": "tunefleet.search._ax",
    "BayesOptSearch": "tunefleet.search._bayesopt",
    "ConcurrencyLimiter": "tunefleet.search._limiter",
    "HEBOSearch": "tunefleet.search._hebo",
    "HyperOptSearch": "tunefleet.search._hyperopt",
    "NevergradSearch": "tunefleet.search._nevergrad",
    "OptunaSearch": "tunefleet.search._optuna",
    "QMCSearch": "tunefleet.search._qmc",
    "Repeater": "tunefleet.search._repeater",
    "TuneBOHB": "tunefleet.search._bohb",
    "ZOOptSearch": "tunefleet.search._zoopt",
}

__all__ = [
    "FINISHED",
    "AxSearch",
    "BasicVariantGenerator",
    "BayesOptSearch",
    "ConcurrencyLimiter",
    "HEBOSearch",
    "HyperOptSearch",
    "NevergradSearch",
    "OptunaSearch",
    "QMCSearch",
    "Repeater",
    "Searcher",
    "TuneBOHB",
    "ZOOptSearch",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tunefleet.search' has no attribute {name!r}")
