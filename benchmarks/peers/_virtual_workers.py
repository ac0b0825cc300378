"""Simulated workers in virtual time for the peers' ask-and-tell loops on the tables.

A peer (``optuna_tabulated.py``, ``syne_tune_tabulated.py``) gives ``simulate`` two
functions: ``ask(now)`` starts a trial and returns its handle and config; ``tell(handle,
step, loss)`` reports the loss of a finished step and says whether the trial goes on
(the peer tells its library a trial at the max budget is complete, and returns False).
``simulate`` keeps a heap of the running trials by the virtual time their next step ends
(the step's CPU seconds in the table, as tunefleet's ``tab-*`` problems); a freed worker
asks at once; the clock stops at the budget: no result after it.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tabulated

TAG = "TUNEFLEET_TABULATED"
Ask = Callable[[float], tuple[Any, dict[str, Any]]]
Tell = Callable[[Any, int, float], bool]


def simulate(
    table: tabulated.Table, budget: float, workers: int, ask: Ask, tell: Tell
) -> dict[str, Any]:
    """Run until the budget; returns ``search_efficiency``'s record of a run (no seed)."""
    started = time.perf_counter()
    points: list[tuple[float, float, float]] = []
    timing = {"searcher_s": 0.0, "suggest_s": 0.0, "suggestions": 0, "started": 0}
    # running trials: (virtual end of the next step, sequence, handle, config, that step)
    running: list[tuple[float, int, Any, dict[str, Any], int]] = []

    def start(now: float) -> None:
        t0 = time.perf_counter()
        handle, config = ask(now)
        took = time.perf_counter() - t0
        timing["searcher_s"] += took
        timing["suggest_s"] += took
        timing["suggestions"] += 1
        seq = timing["suggestions"]
        heapq.heappush(running, (now + table.cost(config, 1), seq, handle, config, 1))

    for _ in range(workers):
        start(0.0)
    while running and running[0][0] <= budget:
        now, seq, handle, config, step = heapq.heappop(running)
        loss = table.loss_at(config, step)
        points.append((now, loss, loss))
        timing["started"] += step == 1
        t0 = time.perf_counter()
        going_on = tell(handle, step, loss) and step < table.max_budget
        timing["searcher_s"] += time.perf_counter() - t0
        if going_on:
            ends = now + table.cost(config, step + 1)
            heapq.heappush(running, (ends, seq, handle, config, step + 1))
        else:
            start(now)
    return {
        "points": points,
        "trials": timing["started"],  # started: reported a result
        "results": len(points),
        "errors": [],
        "no_result": [str(i) for i in range(timing["suggestions"] - timing["started"])],
        "wall_s": time.perf_counter() - started,
        "searcher_s": timing["searcher_s"],
        "searcher_cpu_s": 0.0,
        "suggest_s": timing["suggest_s"],
        "suggest_cpu_s": 0.0,
        "suggestions": timing["suggestions"],
        "suggest_p50_s": 0.0,
        "suggest_max_s": 0.0,
        "last_timestamp": points[-1][0] if points else 0.0,
    }


def peer_args(doc: str, variants: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--task", required=True, choices=tabulated.TABLES)
    parser.add_argument("--variant", required=True, choices=variants)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--budget", type=float, required=True, help="virtual seconds")
    parser.add_argument("--workers", type=int, default=4)
    return parser.parse_args()


def emit(record: dict[str, Any]) -> None:
    print(f"{TAG} {json.dumps(record)}", flush=True)
