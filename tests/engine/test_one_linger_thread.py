"""A worker sends its trials' batched results from one thread, started once.

Reports that come faster than every 2 ms are batched; the tail of a batch is sent a
linger (5 ms) later by a background thread. That thread used to be started for each
trial attempt, a cost every short trial paid; now one thread per worker process
serves each attempt in turn. Real worker processes; every result still arrives.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import tunefleet as tune

REPORTS = 25


def quick(config: dict[str, Any]) -> None:
    for i in range(REPORTS):  # fast: batched, the last ones sent by the linger thread
        lingerers = [t for t in threading.enumerate() if t.name == "tunefleet-linger"]
        tune.report(
            {
                "loss": config["x"] + i,
                "lingerers": len(lingerers),
                "linger_ident": lingerers[0].ident if lingerers else 0,
                "threads": threading.active_count(),
            }
        )


def test_one_linger_thread_per_worker_and_every_result_arrives(tmp_path: Path) -> None:
    grid = tune.Tuner(
        quick,
        param_space={"x": tune.grid_search(list(range(6)))},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    pids = {r.metrics["pid"] for r in grid}
    assert len(pids) < len(grid)  # the worker was reused
    for result in grid:
        history = result.metrics_dataframe
        assert history is not None and list(history["training_iteration"]) == list(
            range(1, REPORTS + 1)
        )
        assert set(history["lingerers"]) <= {0, 1}
    idents: dict[int, set[int]] = {}
    for result in grid:
        history = result.metrics_dataframe
        assert history is not None
        seen = {int(i) for i in history["linger_ident"] if i}
        idents.setdefault(result.metrics["pid"], set()).update(seen)
    assert all(len(ids) <= 1 for ids in idents.values()), idents  # one thread per worker
    assert any(idents.values())  # and some tails were sent by it
