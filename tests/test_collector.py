"""Reading a big experiment back runs without cycle collection (issue 18: resume of
100,000 trials; the collector's passes were a quarter or more of it).

Each check counts the collector's passes (`gc.callbacks`) with its threshold at 1, so
that with the collector on nearly every allocation starts one: a block that reads back
with the collector on cannot pass. A control shows the count works.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet import _collector
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.results import ExperimentAnalysis, ResultGrid
from tunefleet.search import BasicVariantGenerator
from tunefleet.store import StoreReader


@contextmanager
def _passes(within: Callable[..., Any]) -> Iterator[list[int]]:
    """The collector's passes that start while `within` runs (a function, or the one a
    decorator wraps), with a threshold of 1 meanwhile."""
    code = getattr(within, "__wrapped__", within).__code__
    started: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        frame = sys._getframe(1)
        while frame is not None and phase == "start":
            if frame.f_code is code:
                started.append(info["generation"])
                return
            frame = frame.f_back  # type: ignore[assignment]

    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1)
    gc.callbacks.append(seen)
    try:
        yield started
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*thresholds)


def _loss(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


class _Watching(BasicVariantGenerator):
    """Random search that notes whether the collector is on as its state is restored."""

    restored_with_collector: list[bool] = []

    def set_state(self, state: dict[str, Any]) -> None:
        type(self).restored_with_collector.append(gc.isenabled())
        super().set_state(state)


def _trainable() -> SimulatedTrainable:
    return SimulatedTrainable(_loss, cost=1.0, max_budget=3, workers=2, overhead_scale=0)


def _config(searcher: Any = None) -> tune.TuneConfig:
    return tune.TuneConfig(metric="loss", mode="min", num_samples=12, search_alg=searcher)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    storage = tmp_path_factory.mktemp("collector")
    grid = tune.Tuner(
        _trainable(),
        param_space={"x": tune.uniform(0, 1)},
        tune_config=_config(_Watching()),
        run_config=tune.RunConfig(storage_path=str(storage), name="exp", verbose=0),
    ).fit()
    assert len(grid) == 12 and grid.num_errors == 0
    return Path(grid.experiment_path)


def _allocate() -> list[list[int]]:
    return [[i] for i in range(100)]


def test_the_count_sees_passes_when_the_collector_is_on() -> None:
    with _passes(_allocate) as started:
        junk = _allocate()
    assert junk and started


def test_paused_turns_the_collector_off_and_back_on() -> None:
    assert gc.isenabled()
    with _passes(_allocate) as started, _collector.paused():
        assert not gc.isenabled()
        with _collector.paused():  # nested: still off, and not turned on by the inner one
            assert not gc.isenabled()
        assert not gc.isenabled()
        junk = _allocate()
    assert junk and not started
    assert gc.isenabled()


def test_paused_turns_it_back_on_after_an_error() -> None:
    with pytest.raises(KeyError), _collector.paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_paused_leaves_a_collector_turned_off_before_off() -> None:
    gc.disable()
    try:
        with _collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_as_a_decorator() -> None:
    @_collector.paused()
    def state() -> bool:
        return gc.isenabled()

    assert state() is False and gc.isenabled()


@pytest.mark.parametrize(
    ("within", "read"),
    [
        (StoreReader.trials, lambda path: StoreReader(path).trials()),
        (StoreReader.state, lambda path: StoreReader(path).state("searcher")),
        (StoreReader.trials_reusing, lambda path: StoreReader(path).trials_reusing({})),
        (ExperimentAnalysis.__init__, lambda path: ExperimentAnalysis(str(path)).trials),
        (ResultGrid.__init__, lambda path: list(ResultGrid(str(path)))),
    ],
    ids=["store-trials", "store-state", "store-reusing", "analysis", "result-grid"],
)
def test_reading_an_experiment_back_runs_no_pass(
    experiment: Path, within: Callable[..., Any], read: Callable[[Path], Any]
) -> None:
    with _passes(within) as started:
        read_back = read(experiment)
    assert read_back, "read nothing"
    assert started == []
    assert gc.isenabled()


def test_a_resume_restores_the_searcher_with_the_collector_off(experiment: Path) -> None:
    _Watching.restored_with_collector = []
    grid = tune.Tuner.restore(str(experiment), _trainable(), tune_config=_config(_Watching())).fit()
    assert len(grid) == 12
    assert _Watching.restored_with_collector == [False]
    assert gc.isenabled()
