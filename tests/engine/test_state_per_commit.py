"""The algorithms' states are saved by commit, not by step (issue 18).

A step can take a millisecond and the store commits at most every 20 ms
(`commit._COMMIT_EVERY_S`): the controller asks the searcher, the scheduler and the
stopper for their `get_state()` just before each commit, so a step that does not commit
costs no `get_state()` and no encoding, and each commit still holds the state as of
that moment (what a resume continues from). Counted on a real run of many short
trials on the simulated backend: one `get_state()` per commit, every commit holding
one, and the last state committed is the searcher's state at the end of the run.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.engine import commit, experiment
from tunefleet.search import BasicVariantGenerator
from tunefleet.storage.checkpoint import CheckpointKeeper
from tunefleet.store import ExperimentStore


def objective(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


class CountedSearch(BasicVariantGenerator):
    """Random search that counts its `get_state()` calls and the trials it has seen end."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.get_state_calls = 0
        self.ended = 0

    def on_trial_complete(self, trial_id: str, result: Any = None, error: bool = False) -> None:
        super().on_trial_complete(trial_id, result, error)
        self.ended += 1

    def get_state(self) -> dict[str, Any]:
        self.get_state_calls += 1
        return {**super().get_state(), "ended": self.ended}


class Steps(tune.Callback):
    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self.steps += 1


def _run(
    search: CountedSearch, trials: int, workers: int, path: Path, mp: pytest.MonkeyPatch
) -> tuple[list[int], Steps]:
    """Run `trials` short simulated trials; return the searcher's get_state() count at
    each commit, and the steps counted."""
    commits: list[int] = []

    class Counted(ExperimentStore):
        def flush(self) -> None:
            commits.append(search.get_state_calls)
            super().flush()

    mp.setattr(experiment, "ExperimentStore", Counted)
    steps = Steps()
    tune.Tuner(
        SimulatedTrainable(objective, cost=1.0, max_budget=3, workers=workers),
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", num_samples=trials, search_alg=search
        ),
        run_config=tune.RunConfig(
            storage_path=str(path.parent), name=path.name, verbose=0, callbacks=[steps]
        ),
    ).fit()
    return commits, steps


def test_states_are_asked_for_once_per_commit_not_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    search = CountedSearch(random_state=0)
    trials = 400
    commits, steps = _run(search, trials, 4, tmp_path / "per_commit", monkeypatch)

    # the first commit (the experiment's meta) comes before the controller: no state
    assert commits[0] == 0
    # the store's close() flushes once more after the controller's last commit: empty
    assert commits[-1] == commits[-2]
    # each commit between asked for the state once, just before it: never a step without
    after = commits[1:-1]
    assert after == list(range(1, len(after) + 1)), after[:20]
    assert search.get_state_calls == len(after)
    # the structural property, whatever the speed of the machine: never more asks than
    # steps (a loaded machine commits at every step; an idle one at few of them)
    assert search.get_state_calls <= steps.steps + 1
    # and the last commit holds the state at the end of the run
    with sqlite3.connect(tmp_path / "per_commit" / "experiment.db") as db:
        (value,) = db.execute("SELECT value FROM state WHERE key = 'searcher'").fetchone()
    assert json.loads(value)["ended"] == trials


class SlowSearch(CountedSearch):
    """Random search whose `suggest` takes longer than the commit interval, as TPE's does
    once its history is long (40 ms at 10,000 trials)."""

    def suggest(self, trial_id: str) -> Any:
        time.sleep(0.05)
        return super().suggest(trial_id)


def test_a_slow_searcher_does_not_make_every_step_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The searcher's time is not counted towards the commit interval: with a `suggest`
    slower than the interval, commits stay as far apart (in the driver's own time) as with
    a fast one, so the bookkeeping per trial does not grow with the model's time."""
    search = SlowSearch(random_state=0)
    trials = 60
    _, steps = _run(search, trials, 1, tmp_path / "slow", monkeypatch)

    # each trial's step took 50 ms of the searcher's time: counted, each would be a
    # commit (62 here); not counted, a commit needs 20 ms of the driver's own time,
    # several trials' worth (5 here, on an idle machine)
    assert steps.steps >= trials
    assert search.get_state_calls <= trials // 2, (search.get_state_calls, steps.steps)
    with sqlite3.connect(tmp_path / "slow" / "experiment.db") as db:
        (value,) = db.execute("SELECT value FROM state WHERE key = 'searcher'").fetchone()
    assert json.loads(value)["ended"] == trials  # the last commit still holds the end


class SlowStateSearch(CountedSearch):
    """Random search whose `get_state` takes longer than the commit interval, as Ax's
    snapshot does once it holds many trials (11-15 ms per trial it holds)."""

    def get_state(self) -> dict[str, Any]:
        time.sleep(0.03)
        return super().get_state()


def test_a_slow_state_spaces_the_commits_by_its_own_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit whose `get_state()` takes 30 ms spaces the next ones by 19 times that:
    committing stays a small share of the driver's time however slow the state gets,
    instead of a commit at every step (each one longer than the 20 ms interval). The
    first slow commit is named in the log, once (here "slow" is lowered to 25 ms)."""
    monkeypatch.setattr(commit, "_SLOW_STATES_S", 0.025)
    caplog.set_level(logging.WARNING, logger="tunefleet")
    search = SlowStateSearch(random_state=0)
    trials = 200
    commits, steps = _run(search, trials, 2, tmp_path / "slow_state", monkeypatch)

    # without the spacing every step commits (each commit outlasts the interval): one
    # get_state() per step, 200 or more; with it a commit waits ~0.6 s of the driver's
    # time, a few in all (more on a busy machine, whose steps and commits are slower)
    assert steps.steps >= trials // 2
    assert search.get_state_calls <= trials // 5, (search.get_state_calls, steps.steps)
    # still one get_state() per commit, and the last commit (forced) holds the end
    after = commits[1:-1]
    assert after == list(range(1, len(after) + 1)), after[:20]
    with sqlite3.connect(tmp_path / "slow_state" / "experiment.db") as db:
        (value,) = db.execute("SELECT value FROM state WHERE key = 'searcher'").fetchone()
    assert json.loads(value)["ended"] == trials
    told = [r.getMessage() for r in caplog.records if "next commits are spaced" in r.getMessage()]
    assert len(told) == 1, told
    assert "get_state()" in told[0] and "5% of the driver's time" in told[0]


class Clock:
    """`commit`'s `time`, moved by hand: the spacing rule tested without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_only_the_states_time_spaces_the_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow states space the commits by 19 times their time; a slow write of the results
    does not (it would space commits by what they buffer, which makes the next write
    slower still: a driver holding 100 MB of results, found on report throughput)."""
    clock = Clock()
    monkeypatch.setattr(commit, "time", clock)
    states_s = 0.0
    written: list[float] = []

    def save_states() -> None:
        clock.now += states_s

    class SlowWrites(ExperimentStore):
        def flush(self) -> None:
            written.append(clock.now)
            clock.now += 2.0  # a big batch of results, a slow disk
            super().flush()

    with SlowWrites(tmp_path / "exp") as store:
        commits = commit.Commits(store, CheckpointKeeper(), before_commit=save_states)
        commits.flush()  # the first commit
        clock.now += 0.021
        commits.flush(now=False)  # the interval has passed: commits, however slow the write
        assert len(written) == 2

        states_s = 1.0  # now the states take a second to save
        commits.flush()  # (forced) measured here
        clock.now += 5.0
        commits.flush(now=False)
        assert len(written) == 3  # not before 19 s of the driver's time
        clock.now += 14.5
        commits.flush(now=False)
        assert len(written) == 4
