"""A searcher's saved state costs what changed, not the number of trials (issue 18).

The controller saves `get_state()` of the searcher at every step. A real run on the
simulated backend, then its experiment database read: the head of the searcher's
state (the `state` row, rewritten when it changes) holds only the live trials, so its
size does not depend on how many trials ran; the finished trials are rows of
`state_log`, one each, written once. The same for `TuneBOHB` under `HyperBandForBOHB`,
with hundreds of trials paused at once: its head is its counters, and each suggestion,
result and trial end one row.

And what the store writes of OptunaSearch's state: committing at every step (what a
slow sampler gets at many trials, each step slower than the commit interval), the
bytes of state written per trial do not grow with the trials, and stay about the
rows of the trial's ask, start and end: the head is not rewritten as trials come and
go.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.engine import commit, experiment
from tunefleet.store import ExperimentStore
from tunefleet.trial import Trial

optuna = pytest.importorskip("optuna")


def objective(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


def head_size(db: sqlite3.Connection) -> int:
    """The bytes of the searcher's head as last committed."""
    row = db.execute("SELECT length(value) FROM state WHERE key = 'searcher'").fetchone()
    return 0 if row is None else int(row[0])


class HeadSizes(tune.Callback):
    """Reads the experiment database as each trial ends: the searcher's head then (the
    step before this one committed it, with the trials still running in it)."""

    def __init__(self, path: Path) -> None:
        self.path, self.sizes = path, list[int]()

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as db:
            self.sizes.append(head_size(db))


def run(
    tmp_path: Path, trials: int, method: str = "optuna"
) -> tuple[list[int], dict[str, Any], dict[str, int]]:
    """The searcher's head sizes as trials ended, its last head, its log rows by path."""
    from tunefleet.search import OptunaSearch, TuneBOHB

    sim = SimulatedTrainable(
        objective, cost=1.0, max_budget=9 if method == "bohb" else 3, workers=4
    )
    scheduler = None
    if method == "bohb":  # random configs (the model costs O(n) a suggestion), same state
        search: tune.search.Searcher = TuneBOHB(seed=0, bohb_config={"random_fraction": 1.0})
        scheduler = tune.schedulers.HyperBandForBOHB(max_t=9, reduction_factor=3)
    else:
        search = OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=0))
    name = f"{method}{trials}"
    sizes = HeadSizes(tmp_path / name / "experiment.db")
    tune.Tuner(
        sim,
        param_space={"x": tune.uniform(0, 1), "units": tune.choice([16, 32, 64])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", num_samples=trials, search_alg=search, scheduler=scheduler
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), name=name, verbose=0, callbacks=[sizes]
        ),
    ).fit()
    with sqlite3.connect(tmp_path / name / "experiment.db") as db:
        (head,) = db.execute("SELECT value FROM state WHERE key = 'searcher'").fetchone()
        rows = dict(
            db.execute(
                "SELECT path, COUNT(*) FROM state_log WHERE key = 'searcher' GROUP BY path"
            ).fetchall()
        )
    text = head if isinstance(head, str) else bytes(head).decode()
    return sizes.sizes, json.loads(text), rows


def test_optuna_search_head_does_not_grow_with_the_trials(tmp_path: Path) -> None:
    small_sizes, _, small_rows = run(tmp_path, 300)
    big_sizes, big, big_rows = run(tmp_path, 1200)
    # each finished trial is one row of the searcher's log, written once
    finished = [path for path in big_rows if path.endswith("finished")]
    assert len(finished) == 1
    assert small_rows[finished[0]] == 300 and big_rows[finished[0]] == 1200
    # the head: no finished trial in it, and over the last 100 trials of each run the
    # same size at 1,200 trials as at 300 (the running trials, the table, the seed)
    assert "COMPLETE" not in json.dumps(big)
    assert len(small_sizes) == 300 and len(big_sizes) == 1200
    small_max, big_max = max(small_sizes[-100:]), max(big_sizes[-100:])
    assert 0 < big_max <= small_max + 64 and big_max < 4000, (small_max, big_max)


def test_bohb_head_does_not_grow_with_the_trials(tmp_path: Path) -> None:
    small_sizes, _, small_rows = run(tmp_path, 150, "bohb")
    big_sizes, big, big_rows = run(tmp_path, 600, "bohb")
    # each suggestion is one row; each result and each trial end one (every trial ends,
    # after at least one result), written once
    assert small_rows["suggested"] == 150 and big_rows["suggested"] == 600
    assert big_rows["events"] >= 2 * 600 and set(big_rows) == {"suggested", "events"}
    # the head: the seed and the counters, however many trials wait paused (HyperBand
    # pauses hundreds here): the same size at 600 trials as at 150, as the trials end
    assert set(big) == {"version", "seed", "count", "points_done", "suggested", "events"}
    assert len(small_sizes) == 150 and len(big_sizes) == 600
    assert 0 < max(big_sizes) <= max(small_sizes) + 8 < 300, (small_sizes, big_sizes)


def state_bytes_per_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trials: int) -> float:
    """ExperimentStore.state_bytes_written of a run of OptunaSearch, per trial, with a
    commit at every step."""
    from tunefleet.search import OptunaSearch

    stores: list[ExperimentStore] = []

    class Recorded(ExperimentStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            stores.append(self)

    monkeypatch.setattr(experiment, "ExperimentStore", Recorded)
    monkeypatch.setattr(commit, "_COMMIT_EVERY_S", 0.0)
    tune.Tuner(
        SimulatedTrainable(objective, cost=1.0, max_budget=3, workers=4),
        param_space={"x": tune.uniform(0, 1), "units": tune.choice([16, 32, 64])},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=trials,
            search_alg=OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=0)),
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name=f"bytes{trials}", verbose=0),
    ).fit()
    assert len(stores) == 1
    return stores[0].state_bytes_written / trials


def test_optuna_search_state_written_per_trial_does_not_grow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = state_bytes_per_trial(tmp_path, monkeypatch, 150)
    big = state_bytes_per_trial(tmp_path, monkeypatch, 600)
    assert big < 1.3 * small, (small, big)
    # a trial's rows (its ask, its data as it started, what changed as it ended: ~240 B),
    # not the running trials' data again at each step (a head rewritten: over 1,000)
    assert big < 600, (small, big)
