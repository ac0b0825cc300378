"""ConcurrencyLimiter and Repeater: Ray's semantics, state, and real Tuner runs."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import overlap
from tunefleet.search import (
    FINISHED,
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    Searcher,
)

SPACE = {"x": tune.uniform(0, 1)}


class Recorder(BasicVariantGenerator):
    """Random search that records what it is told."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.results: list[tuple[str, dict[str, Any]]] = []
        self.completed: list[tuple[str, dict[str, Any] | None, bool]] = []
        self.properties: tuple[Any, ...] = ()

    def set_search_properties(self, metric: Any, mode: Any, config: Any, **spec: Any) -> bool:
        self.properties = (metric, mode, spec)
        return super().set_search_properties(metric, mode, config, **spec)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.results.append((trial_id, result))

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.completed.append((trial_id, result, error))
        super().on_trial_complete(trial_id, result, error)


def prepared(searcher: Searcher, num_samples: int = -1, metric: Any = "loss") -> Searcher:
    assert searcher.set_search_properties(metric, "min", SPACE, num_samples=num_samples)
    return searcher


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(state)))


# ---------------------------------------------------------------- ConcurrencyLimiter


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2", None])
def test_limiter_refuses_a_bad_max_concurrent_and_names_it(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=rf"max_concurrent={bad!r} must be"):
        ConcurrencyLimiter(BasicVariantGenerator(), max_concurrent=bad)


def test_limiter_refuses_what_is_not_a_searcher() -> None:
    with pytest.raises(TypeError, match="is not a tunefleet Searcher"):
        ConcurrencyLimiter(object(), 2)  # type: ignore[arg-type]


def test_limiter_waits_for_a_free_slot_and_forwards_everything() -> None:
    inner = Recorder(seed=0)
    limiter = prepared(ConcurrencyLimiter(inner, max_concurrent=2))
    assert inner.properties[:2] == ("loss", "min") and limiter.metric == "loss"
    assert inner.properties[2] == {"num_samples": -1}
    assert isinstance(limiter.suggest("a"), dict) and isinstance(limiter.suggest("b"), dict)
    assert limiter.suggest("c") is None
    limiter.on_trial_result("a", {"loss": 1.0})
    assert inner.results == [("a", {"loss": 1.0})]
    limiter.on_trial_complete("a", {"loss": 1.0})
    assert inner.completed == [("a", {"loss": 1.0}, False)]
    assert isinstance(limiter.suggest("c"), dict)
    assert limiter.suggest("d") is None
    limiter.on_trial_complete("b", None, error=True)
    assert inner.completed[-1] == ("b", None, True)


def test_limiter_passes_finished_through() -> None:
    limiter = ConcurrencyLimiter(BasicVariantGenerator(seed=0), max_concurrent=5)
    assert limiter.self_limiting
    prepared(limiter, num_samples=2)
    assert isinstance(limiter.suggest("a"), dict) and isinstance(limiter.suggest("b"), dict)
    assert limiter.suggest("c") == FINISHED


def test_limiter_batch_waits_for_the_whole_batch_then_tells_it() -> None:
    inner = Recorder(seed=0)
    limiter = prepared(ConcurrencyLimiter(inner, max_concurrent=2, batch=True))
    limiter.suggest("a"), limiter.suggest("b")
    limiter.on_trial_complete("b", {"loss": 2.0})
    assert limiter.suggest("c") is None and inner.completed == []  # held back
    limiter.on_trial_complete("a", None, error=True)
    assert inner.completed == [("b", {"loss": 2.0}, False), ("a", None, True)]
    assert isinstance(limiter.suggest("c"), dict) and isinstance(limiter.suggest("d"), dict)
    assert limiter.suggest("e") is None


def test_limiter_state_round_trip_keeps_live_trials_and_the_inner_state() -> None:
    limiter = prepared(ConcurrencyLimiter(BasicVariantGenerator(seed=3), 2, batch=True))
    limiter.suggest("a"), limiter.suggest("b")
    limiter.on_trial_complete("a", {"loss": 1.0})
    copy = prepared(ConcurrencyLimiter(BasicVariantGenerator(seed=99), 2, batch=True))
    copy.set_state(roundtrip(limiter.get_state()))
    for searcher in (limiter, copy):
        assert searcher.suggest("c") is None
        searcher.on_trial_complete("b", {"loss": 0.5})
    assert limiter.suggest("c") == copy.suggest("c")


def test_limiter_with_bad_state_version_says_so() -> None:
    with pytest.raises(ValueError, match="state version"):
        ConcurrencyLimiter(BasicVariantGenerator(), 1).set_state({"version": 0})


def timed(config: dict[str, Any]) -> None:
    start = time.time()
    time.sleep(config["sleep"])
    tune.report({"loss": config["x"], "start": start, "end": time.time()})


def run_limited(storage: str, limiter: ConcurrencyLimiter, sleep: Any, n: int) -> Any:
    return tune.Tuner(
        tune.with_resources(timed, {"cpu": 0.25}),  # room for 8 at once: the limiter binds
        param_space={"x": tune.uniform(0, 1), "sleep": sleep},
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=limiter, num_samples=n),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()


def test_limiter_limits_a_real_run(storage: str) -> None:
    grid = run_limited(storage, ConcurrencyLimiter(BasicVariantGenerator(seed=0), 2), 0.3, 6)
    assert len(grid) == 6 and grid.num_errors == 0
    assert overlap([(r.metrics["start"], r.metrics["end"]) for r in grid]) == 2


def test_limiter_batch_in_a_real_run_starts_a_batch_after_the_last_one_ended(
    storage: str,
) -> None:
    sleep = tune.sample_from(lambda spec: 0.1 + 0.4 * spec.rng.random())  # uneven trials
    limiter = ConcurrencyLimiter(BasicVariantGenerator(seed=0), max_concurrent=2, batch=True)
    grid = run_limited(storage, limiter, sleep, 6)
    assert len(grid) == 6 and grid.num_errors == 0
    trials = sorted(grid, key=lambda r: r.metrics["trial_id"])
    for first in (0, 2):
        ended = max(r.metrics["end"] for r in trials[first : first + 2])
        assert all(r.metrics["start"] >= ended for r in trials[first + 2 : first + 4])


# ---------------------------------------------------------------- Repeater


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_repeater_refuses_a_bad_repeat(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"repeat={bad!r} must be a positive int"):
        Repeater(BasicVariantGenerator(), repeat=bad)


def test_repeater_repeats_each_config_with_its_index() -> None:
    inner = Recorder(seed=0)
    rep = prepared(Repeater(inner, repeat=3))
    configs = [rep.suggest(f"t{i}") for i in range(6)]
    assert all(isinstance(c, dict) for c in configs)
    assert [c["__trial_index__"] for c in configs] == [0, 1, 2, 0, 1, 2]  # type: ignore[index]
    xs = [c["x"] for c in configs]  # type: ignore[index]
    assert xs[0] == xs[1] == xs[2] != xs[3] == xs[4] == xs[5]
    no_index = prepared(Repeater(BasicVariantGenerator(seed=0), repeat=2, set_index=False))
    assert "__trial_index__" not in no_index.suggest("a")  # type: ignore[operator]


def test_repeater_tells_the_mean_once_the_group_ended_failures_left_out() -> None:
    inner = Recorder(seed=0)
    rep = prepared(Repeater(inner, repeat=3))
    for i in range(6):
        rep.suggest(f"t{i}")
    rep.on_trial_result("t0", {"loss": 5.0})
    assert inner.results == []  # intermediate results belong to several trials
    rep.on_trial_complete("t0", {"loss": 1.0})
    rep.on_trial_complete("t2", {"loss": 4.0})
    assert inner.completed == []
    rep.on_trial_complete("t1", {"loss": 9.0}, error=True)  # a failed one: left out
    assert inner.completed == [("t0", {"loss": 2.5}, False)]
    rep.on_trial_complete("t3", None, error=True)
    rep.on_trial_complete("t4", {"other": 1.0})  # no metric: as failed
    rep.on_trial_complete("t5", None)
    assert inner.completed[-1] == ("t3", None, True)  # all failed: told as failed
    rep.on_trial_complete("unknown", {"loss": 0.0})  # not its trial: ignored
    assert len(inner.completed) == 2


def test_repeater_averages_every_objective_and_constraint() -> None:
    inner = Recorder(seed=0)
    rep = Repeater(inner, repeat=2)
    rep.set_search_properties(["a", "b"], ["min", "max"], SPACE, constraints=["c"])
    rep.suggest("t0"), rep.suggest("t1")
    rep.on_trial_complete("t0", {"a": 1.0, "b": 2.0, "c": -1.0})
    rep.on_trial_complete("t1", {"a": 3.0, "b": 4.0, "c": 0.0})
    assert inner.completed == [("t0", {"a": 2.0, "b": 3.0, "c": -0.5}, False)]


def test_repeater_passes_finished_through() -> None:
    rep = Repeater(BasicVariantGenerator(seed=0), repeat=2)
    assert not rep.self_limiting  # num_samples counts trials, repetitions included
    prepared(rep, num_samples=2)
    assert [isinstance(rep.suggest(f"t{i}"), dict) for i in range(4)] == [True] * 4
    assert rep.suggest("t4") == FINISHED


def test_repeater_state_round_trip_mid_group() -> None:
    def make() -> tuple[Recorder, Searcher]:
        inner = Recorder(seed=5)
        return inner, prepared(Repeater(inner, repeat=3))

    inner, rep = make()
    for i in range(4):
        rep.suggest(f"t{i}")
    rep.on_trial_complete("t1", {"loss": 1.0})
    rep.on_trial_complete("t3", {"loss": 7.0})
    copy_inner, copy = make()
    copy.set_state(roundtrip(rep.get_state()))
    for searcher, told in ((rep, inner), (copy, copy_inner)):
        assert all(isinstance(searcher.suggest(f"t{i}"), dict) for i in (4, 5, 6))
        searcher.on_trial_complete("t0", {"loss": 2.0})
        searcher.on_trial_complete("t2", None, error=True)
        assert told.completed == [("t0", {"loss": 1.5}, False)]
    assert rep.get_state() == copy.get_state()


def noisy(config: dict[str, Any]) -> None:
    """A deterministic noise per repetition; the third repetition always fails."""
    index = config["__trial_index__"]
    if index == 2:
        raise RuntimeError("the third repetition fails")
    tune.report({"loss": config["x"] + (0.3, -0.1)[index]})


def test_repeater_in_a_real_run_tells_the_mean_of_the_successful_repetitions(
    storage: str,
) -> None:
    inner = Recorder(seed=1)
    grid = tune.Tuner(
        noisy,
        param_space=SPACE,
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", search_alg=Repeater(inner, repeat=3), num_samples=9
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == 9 and grid.num_errors == 3
    assert len({r.config["x"] for r in grid}) == 3
    assert len(inner.completed) == 3
    for trial_id, result, error in inner.completed:
        config = next(r.config for r in grid if (r.metrics or {}).get("trial_id") == trial_id)
        assert not error and result is not None
        assert result["loss"] == pytest.approx(config["x"] + 0.1)
