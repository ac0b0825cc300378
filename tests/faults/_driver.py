"""A driver process of the fault suite: ``python -m tests.faults._driver SPEC.json``.

It runs the scenario's experiment (`_faulty.build`) to its end, or until the suite
signals or kills it, and prints ``DRIVER DONE`` when `fit()` returned.
"""

from __future__ import annotations

import json
import sys

import tunefleet as tune
from tests.faults._faulty import build

if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    tune.Tuner(**build(spec)).fit()
    print("DRIVER DONE", flush=True)
