"""A worker sends its trials' batched results from one thread, started once.

Reports that come faster than every 2 ms are batched; the tail of a batch is sent a
linger (5 ms) later by a background thread. That thread used to be started for each
trial attempt, a cost every short trial paid; now one thread per worker process
serves each attempt in turn. Real worker processes; every result still arrives.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet import _linger

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


# -- the timer: armed by an ask, disarmed when the trial sends its tail first -----------------
class _Tail:
    """A session with a tail to send: records when the linger thread sends it."""

    def __init__(self) -> None:
        self.sent = threading.Event()

    def _linger_flush(self) -> None:
        self.sent.set()


def _lingering() -> _linger._Lingering:
    lingering = _linger._Lingering()
    timer = _linger._new_timer()
    if timer is None:
        pytest.skip("no timerfd here: the linger thread is woken at each ask instead")
    os.close(timer.fd)
    return lingering


def _armed(lingering: _linger._Lingering) -> bool:
    assert lingering._timer is not None
    return lingering._timer.armed()


def test_a_tail_sent_first_disarms_the_timer_so_the_thread_never_wakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a linger far longer than the test: a busy machine cannot make the timer expire
    monkeypatch.setattr(_linger, "LINGER_S", 3600.0)
    lingering = _lingering()
    first, second = _Tail(), _Tail()
    lingering.ask(first)
    lingering.ask(second)
    assert _armed(lingering)
    lingering.cancel(first)  # the first trial ended and sent its tail itself
    assert _armed(lingering)  # the second still waits
    lingering.cancel(second)
    assert not _armed(lingering)
    assert not first.sent.is_set() and not second.sent.is_set()


def test_a_tail_that_waits_is_sent_by_the_thread() -> None:
    lingering = _lingering()
    tails = [_Tail(), _Tail()]
    for tail in tails:
        lingering.ask(tail)
    for tail in tails:
        assert tail.sent.wait(60), "the linger thread never sent the tail"
    assert not _armed(lingering)
    again = _Tail()  # the thread waits for the next one
    lingering.ask(again)
    assert again.sent.wait(60)


def test_a_forked_child_lingers_with_its_own_timer_and_thread() -> None:
    lingering = _lingering()
    lingering.ask(_Tail())  # the parent's thread and timer exist
    pid = os.fork()
    if pid == 0:
        tail = _Tail()
        lingering.ask(tail)
        os._exit(0 if tail.sent.wait(60) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- end to end: a tail reaches the driver while the trial computes on ------------------------
class _SeesThird(tune.Callback):
    """Writes a file when the driver has the trial's third result."""

    def __init__(self, flag: Path) -> None:
        self.flag = flag

    def on_trial_result(
        self, iteration: int, trials: Any, trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        if result["training_iteration"] == 3:
            self.flag.touch()


def reports_then_computes(config: dict[str, Any]) -> None:
    for i in range(3):  # the 2nd and 3rd come within 2 ms of the 1st: batched
        tune.report({"loss": float(i)})
    flag = Path(config["flag"])
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:  # "computing", never reporting
        time.sleep(0.01)
    tune.report({"loss": 3.0, "driver_had_the_tail": flag.exists()})


def test_a_batched_tail_reaches_the_driver_while_the_trial_computes_on(tmp_path: Path) -> None:
    flag = tmp_path / "third-seen"
    grid = tune.Tuner(
        reports_then_computes,
        param_space={"flag": str(flag)},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "store"), verbose=0, callbacks=[_SeesThird(flag)]
        ),
    ).fit()
    assert grid.num_errors == 0
    assert grid[0].metrics["driver_had_the_tail"] is True
