"""Stoppers: Ray Tune's rules, loud argument checks, NaN safety, JSON state."""

from __future__ import annotations

import datetime
import json
import logging
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet._state_log import split
from tunefleet.stoppers import (
    CombinedStopper,
    DictStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    NoopStopper,
    Stopper,
    TimeoutStopper,
    TrialPlateauStopper,
    make_stopper,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def feed(stopper: Stopper, trial_id: str, values: list[Any], metric: str = "m") -> list[bool]:
    return [stopper(trial_id, {metric: v}) for v in values]


def round_trip(stopper: Stopper, fresh: Stopper) -> Stopper:
    """Restore `stopper`'s state, through strict JSON, into `fresh`."""
    fresh.set_state(json.loads(json.dumps(stopper.get_state(), allow_nan=False)))
    return fresh


# -- Stopper base ----------------------------------------------------------------------------


def test_base_is_abstract_and_has_harmless_defaults() -> None:
    with pytest.raises(TypeError):
        Stopper()  # type: ignore[abstract]

    class Always(Stopper):
        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return True

    s = Always()
    assert s("t", {}) is True
    assert s.stop_all() is False
    assert s.get_state() == {}
    s.set_state({})
    assert NoopStopper()("t", {"x": 1}) is False
    assert NoopStopper().stop_all() is False


# -- MaximumIterationStopper -----------------------------------------------------------------


def test_max_iter_stops_each_trial_at_its_own_count() -> None:
    s = MaximumIterationStopper(3)
    assert feed(s, "a", [1, 2]) == [False, False]
    assert feed(s, "b", [1]) == [False]
    assert s("a", {}) is True
    assert feed(s, "b", [1, 2]) == [False, True]
    assert s.stop_all() is False


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None])
def test_max_iter_rejects_non_positive_integers(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"MaximumIterationStopper: max_iter=.* positive integer"):
        MaximumIterationStopper(bad)


def test_max_iter_error_message_is_exact() -> None:
    with pytest.raises(ValueError) as info:
        MaximumIterationStopper(0)
    assert str(info.value) == "MaximumIterationStopper: max_iter=0 must be a positive integer"


def test_max_iter_state_round_trip() -> None:
    s = MaximumIterationStopper(3)
    feed(s, "a", [1, 2])
    restored = round_trip(s, MaximumIterationStopper(3))
    assert restored("a", {}) is True
    assert restored("b", {}) is False


def test_set_state_rejects_garbage() -> None:
    with pytest.raises(ValueError, match=r"MaximumIterationStopper: state .* 'calls'"):
        MaximumIterationStopper(3).set_state({"nope": 1})
    with pytest.raises(ValueError, match=r"TrialPlateauStopper: state entry 'x' is not"):
        TrialPlateauStopper("m").set_state({"results": ["x"]})


def test_per_trial_state_is_a_log_saved_by_what_it_gained() -> None:
    """The saved head does not grow with the trials; the log holds each result (issue 18);
    a stopper restored from it (or from a state saved before the logs) decides the same."""

    def make() -> CombinedStopper:
        return CombinedStopper(
            MaximumIterationStopper(5), TrialPlateauStopper("m", num_results=2, grace_period=2)
        )

    s = make()
    heads = []
    for i in range(300):
        decisions = feed(s, f"t{i:04d}", [1.0, 0.5, float("nan"), 0.5, 0.5])
        assert decisions == [False, False, False, True, True]
        head, logs = split(s.get_state())
        heads.append(json.dumps(head))
    assert heads[0] == heads[-1]  # the same head after 1 trial and after 300
    assert {path: len(log) for path, log in logs.items()} == {
        "stoppers/0/calls": 1500,
        "stoppers/1/results": 1500,
    }
    fresh = round_trip(s, make())
    for stopper in (s, fresh):
        assert feed(stopper, "t0001", [0.5]) == [True]
        assert feed(stopper, "new", [1.0, 2.0, 2.0, 2.0]) == [False, False, True, True]
    old = {"stoppers": [{"iter": {"a": 4}}, {"iter": {"a": 4}, "window": {"a": [0.5]}}]}
    before = make()
    before.set_state(old)
    assert before.get_state()["stoppers"]["1"]["results"][-2:] == [["a", None], ["a", 0.5]]
    assert feed(before, "a", [0.5]) == [True]


# -- TrialPlateauStopper ---------------------------------------------------------------------


def test_trial_plateau_stops_when_the_window_is_flat() -> None:
    s = TrialPlateauStopper("m", std=0.01, num_results=3, grace_period=3)
    assert feed(s, "t", [5.0, 1.0, 1.0, 1.0]) == [False, False, False, True]
    assert s.stop_all() is False


def test_trial_plateau_keeps_going_while_the_metric_moves() -> None:
    s = TrialPlateauStopper("m", std=0.01, num_results=3, grace_period=0)
    assert not any(feed(s, "t", [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]))


def test_trial_plateau_uses_population_std_and_strict_comparison() -> None:
    # pstdev([0, 2]) == 1.0 exactly: std=1.0 must not stop, std slightly above must.
    assert feed(TrialPlateauStopper("m", std=1.0, num_results=2, grace_period=0), "t", [0, 2]) == [
        False,
        False,
    ]
    s = TrialPlateauStopper("m", std=1.0001, num_results=2, grace_period=0)
    assert feed(s, "t", [0, 2]) == [False, True]


def test_trial_plateau_waits_for_the_grace_period() -> None:
    s = TrialPlateauStopper("m", num_results=2, grace_period=5)
    assert feed(s, "t", [1.0] * 5) == [False] * 4 + [True]


def test_trial_plateau_trials_are_independent() -> None:
    s = TrialPlateauStopper("m", num_results=2, grace_period=2)
    assert feed(s, "a", [1.0]) == [False]
    assert feed(s, "b", [1.0]) == [False]
    assert feed(s, "a", [1.0]) == [True]


@pytest.mark.parametrize(
    ("mode", "threshold", "values", "expected_last"),
    [
        ("min", 0.5, [1.0, 1.0, 1.0], False),
        ("min", 1.0, [1.0, 1.0, 1.0], True),
        ("max", 2.0, [1.0, 1.0, 1.0], False),
        ("max", 0.0, [1.0, 1.0, 1.0], True),
    ],
)
def test_trial_plateau_threshold(
    mode: str, threshold: float, values: list[float], expected_last: bool
) -> None:
    s = TrialPlateauStopper(
        "m", num_results=3, grace_period=3, metric_threshold=threshold, mode=mode
    )
    assert feed(s, "t", values)[-1] is expected_last


def test_trial_plateau_threshold_zero_is_honoured() -> None:
    # Ray tests `if metric_threshold:` and so ignores a threshold of 0.
    s = TrialPlateauStopper("m", num_results=2, grace_period=0, metric_threshold=0.0, mode="min")
    assert feed(s, "t", [1.0, 1.0]) == [False, False]


def test_trial_plateau_ignores_non_finite_values() -> None:
    s = TrialPlateauStopper("m", num_results=3, grace_period=0)
    nan, inf = math.nan, math.inf
    assert feed(s, "t", [1.0, nan, 1.0, inf, -inf, "x", None]) == [False] * 7
    assert s("t", {"m": 1.0}) is True


def test_trial_plateau_missing_metric_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    s = TrialPlateauStopper("m", num_results=2, grace_period=0)
    with caplog.at_level(logging.WARNING, logger="tunefleet.stoppers"):
        assert s("t", {"other": 1}) is False
        assert s("t", {"other": 1}) is False
    warnings = [r for r in caplog.records if "'m'" in r.getMessage()]
    assert len(warnings) == 1
    assert "other" in warnings[0].getMessage()


def test_trial_plateau_nested_metric() -> None:
    s = TrialPlateauStopper("info/loss", num_results=2, grace_period=0)
    assert [s("t", {"info": {"loss": 2.0}}) for _ in range(2)] == [False, True]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"std": -0.1}, "std=-0.1 must be a positive number"),
        ({"std": 0}, "std=0 must be a positive number"),
        ({"std": math.nan}, "std=nan"),
        ({"num_results": 0}, "num_results=0 must be a positive integer"),
        ({"grace_period": -1}, "grace_period=-1 must be an integer >= 0"),
        ({"mode": "avg"}, "mode='avg' must be 'min', 'max' or None"),
        ({"metric_threshold": 1.0}, "metric_threshold=1.0 needs mode"),
        ({"metric_threshold": math.inf, "mode": "min"}, "metric_threshold=inf"),
    ],
)
def test_trial_plateau_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="TrialPlateauStopper: " + _escape(message)):
        TrialPlateauStopper("m", **kwargs)


def test_trial_plateau_rejects_empty_metric() -> None:
    with pytest.raises(ValueError, match="metric='' must be a non-empty string"):
        TrialPlateauStopper("")


def test_trial_plateau_state_round_trip() -> None:
    s = TrialPlateauStopper("m", num_results=3, grace_period=4)
    feed(s, "t", [1.0, 1.0, 1.0])
    restored = round_trip(s, TrialPlateauStopper("m", num_results=3, grace_period=4))
    assert restored("t", {"m": 1.0}) is True


metric_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, None, "x"]),
    st.integers(-(10**400), 10**400),
)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(metric_values, max_size=30),
    grace=st.integers(0, 10),
    num_results=st.integers(1, 6),
    std=st.floats(1e-9, 1e9),
)
def test_trial_plateau_never_crashes_nor_stops_in_grace(
    values: list[Any], grace: int, num_results: int, std: float
) -> None:
    s = TrialPlateauStopper("m", std=std, num_results=num_results, grace_period=grace)
    decisions = feed(s, "t", values)
    assert all(isinstance(d, bool) for d in decisions)
    assert not any(decisions[: max(grace - 1, 0)])
    json.dumps(s.get_state(), allow_nan=False)


@settings(max_examples=100, deadline=None)
@given(
    noise=st.lists(st.sampled_from([math.nan, math.inf, -math.inf, None]), max_size=10),
    grace=st.integers(0, 8),
    num_results=st.integers(1, 5),
)
def test_trial_plateau_constant_metric_stops_once_eligible(
    noise: list[Any], grace: int, num_results: int
) -> None:
    s = TrialPlateauStopper("m", num_results=num_results, grace_period=grace)
    assert not any(feed(s, "t", noise))
    decisions = feed(s, "t", [3.0] * (grace + num_results))
    first = decisions.index(True)
    assert len(noise) + first + 1 >= grace
    assert first + 1 == max(num_results, grace - len(noise))


# -- TimeoutStopper --------------------------------------------------------------------------


def test_timeout_stops_the_experiment_after_the_timeout() -> None:
    clock = FakeClock()
    s = TimeoutStopper(10, clock=clock)
    clock.now += 100  # before the first call: does not count
    assert s.stop_all() is False
    clock.now += 9.5
    assert s("t", {}) is False
    assert s.stop_all() is False
    clock.now += 0.5
    assert s.stop_all() is True


def test_timeout_accepts_timedelta() -> None:
    clock = FakeClock()
    s = TimeoutStopper(datetime.timedelta(minutes=1), clock=clock)
    s.stop_all()
    clock.now += 59
    assert s.stop_all() is False
    clock.now += 1
    assert s.stop_all() is True


@pytest.mark.parametrize(
    "bad", [0, -1, math.nan, math.inf, 10**400, "10", True, None, datetime.timedelta(0)]
)
def test_timeout_rejects_bad_timeouts(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"TimeoutStopper: timeout=.* must be a positive number"):
        TimeoutStopper(bad)


def test_timeout_state_carries_the_remaining_budget() -> None:
    clock = FakeClock()
    s = TimeoutStopper(10, clock=clock)
    s.stop_all()
    clock.now += 4
    saved = json.dumps(s.get_state())
    assert json.loads(saved) == {"budget_left": 6.0}
    clock.now += 1000  # the experiment was down; that time does not count
    restored = TimeoutStopper(10, clock=clock)
    restored.set_state(json.loads(saved))
    assert restored.stop_all() is False
    clock.now += 5
    assert restored.stop_all() is False
    clock.now += 1
    assert restored.stop_all() is True
    # Restoring into a stopper that already ran forgets its last check too.
    clock.now += 1000
    s.set_state(json.loads(saved))
    assert s.stop_all() is False


# -- CombinedStopper -------------------------------------------------------------------------


def test_combined_stops_when_any_does_and_shows_every_result_to_all() -> None:
    first = MaximumIterationStopper(1)
    second = MaximumIterationStopper(2)
    s = CombinedStopper(first, second)
    assert s("t", {}) is True  # first says stop; second must still count this result
    assert second("t", {}) is True


def test_combined_stop_all() -> None:
    clock = FakeClock()
    s = CombinedStopper(MaximumIterationStopper(5), TimeoutStopper(1, clock=clock))
    assert s.stop_all() is False
    clock.now += 1
    assert s.stop_all() is True
    assert CombinedStopper().stop_all() is False


def test_combined_names_the_bad_argument() -> None:
    with pytest.raises(TypeError, match=r"CombinedStopper: argument 1 is \{'x': 1\} \(dict\)"):
        CombinedStopper(NoopStopper(), {"x": 1})  # type: ignore[arg-type]


def test_combined_state_round_trip() -> None:
    def make() -> CombinedStopper:
        return CombinedStopper(MaximumIterationStopper(2), NoopStopper())

    s = make()
    s("t", {})
    assert round_trip(s, make())("t", {}) is True
    with pytest.raises(ValueError, match="holds 2 stoppers, this one combines 1"):
        CombinedStopper(NoopStopper()).set_state(s.get_state())


# -- ExperimentPlateauStopper ----------------------------------------------------------------


def test_experiment_plateau_stops_when_the_top_values_are_flat() -> None:
    s = ExperimentPlateauStopper("m", top=3, std=0.01)
    assert feed(s, "a", [5.0, 1.0, 1.0]) == [False, False, False]
    assert s.stop_all() is False  # top 3 (min) are 1, 1, 5
    assert s("b", {"m": 1.0}) is True
    assert s.stop_all() is True


def test_experiment_plateau_mode_max_keeps_the_largest() -> None:
    s = ExperimentPlateauStopper("m", top=2, mode="max", std=0.0)
    assert feed(s, "a", [1.0, 9.0, 9.0]) == [False, False, True]
    s = ExperimentPlateauStopper("m", top=2, mode="min", std=0.0)
    assert feed(s, "a", [1.0, 9.0, 9.0]) == [False, False, False]


def test_experiment_plateau_patience_counts_results_after_the_first() -> None:
    s = ExperimentPlateauStopper("m", top=2, patience=2)
    assert feed(s, "a", [1.0, 1.0, 1.0, 1.0]) == [False, False, False, True]
    s = ExperimentPlateauStopper("m", top=2, patience=1)
    assert feed(s, "a", [1.0, 1.0, 1.0]) == [False, False, True]


def test_experiment_plateau_ignores_non_finite_values() -> None:
    s = ExperimentPlateauStopper("m", top=2)
    assert feed(s, "a", [1.0, math.nan, -math.inf, math.inf, None]) == [False] * 5
    assert s("a", {"m": 1.0}) is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"std": -1.0}, "std=-1.0 must be a number >= 0"),
        ({"top": 1}, "top=1 must be an integer >= 2"),
        ({"patience": -1}, "patience=-1 must be an integer >= 0"),
        ({"mode": None}, "mode=None must be 'min' or 'max'"),
    ],
)
def test_experiment_plateau_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="ExperimentPlateauStopper: " + _escape(message)):
        ExperimentPlateauStopper("m", **kwargs)


def test_experiment_plateau_state_round_trip() -> None:
    s = ExperimentPlateauStopper("m", top=3, patience=1)
    feed(s, "a", [2.0, 2.0, 2.0])
    assert s.stop_all() is False
    restored = round_trip(s, ExperimentPlateauStopper("m", top=3, patience=1))
    assert restored("b", {"m": 2.0}) is True


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(metric_values, max_size=30),
    top=st.integers(2, 5),
    patience=st.integers(0, 3),
    mode=st.sampled_from(["min", "max"]),
)
def test_experiment_plateau_never_crashes(
    values: list[Any], top: int, patience: int, mode: str
) -> None:
    s = ExperimentPlateauStopper("m", top=top, patience=patience, mode=mode)
    decisions = feed(s, "t", values)
    finite = [v for v in values if _is_finite_number(v)]
    assert not any(decisions[: top + patience - 1])
    if len(finite) < top + patience:
        assert not any(decisions)
    json.dumps(s.get_state(), allow_nan=False)


# -- FunctionStopper -------------------------------------------------------------------------


def test_function_stopper_wraps_a_callable() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def fn(trial_id: str, result: dict[str, Any]) -> bool:
        seen.append((trial_id, result))
        return result["loss"] < 1  # type: ignore[no-any-return]

    s = FunctionStopper(fn)
    assert s("t", {"loss": 2}) is False
    assert s("t", {"loss": 0.5}) is True
    assert seen == [("t", {"loss": 2}), ("t", {"loss": 0.5})]
    assert s.stop_all() is False
    assert FunctionStopper(lambda t, r: 1)("t", {}) is True  # type: ignore[arg-type,return-value]


def test_function_stopper_rejects_non_callables() -> None:
    with pytest.raises(TypeError, match=r"FunctionStopper: 3 \(int\) is not callable"):
        FunctionStopper(3)  # type: ignore[arg-type]


# -- DictStopper -----------------------------------------------------------------------------


def test_dict_stopper_stops_at_or_above_the_value() -> None:
    s = DictStopper({"training_iteration": 3})
    assert [s("t", {"training_iteration": i}) for i in (1, 2, 3)] == [False, False, True]
    assert s("u", {"training_iteration": 4}) is True
    assert s("v", {"training_iteration": 2.999}) is False


def test_dict_stopper_any_criterion_stops() -> None:
    s = DictStopper({"training_iteration": 10, "acc": 0.9})
    assert s("t", {"training_iteration": 1, "acc": 0.5}) is False
    assert s("t", {"training_iteration": 2, "acc": 0.95}) is True


def test_dict_stopper_nested_and_flattened_keys() -> None:
    s = DictStopper({"info/loss": 5})
    assert s("t", {"info": {"loss": 4}}) is False
    assert s("t", {"info": {"loss": 5}}) is True
    assert s("u", {"info/loss": 6}) is True


def test_dict_stopper_missing_key_on_first_result_is_an_error() -> None:
    s = DictStopper({"mean_accuracy": 0.9})
    with pytest.raises(ValueError) as info:
        s("trial_7", {"loss": 1.0, "training_iteration": 1})
    message = str(info.value)
    assert "'mean_accuracy'" in message
    assert "'trial_7'" in message
    assert "['loss', 'training_iteration']" in message
    with pytest.raises(ValueError, match="'info/loss'"):
        DictStopper({"info/loss": 1})("t", {"info": {"acc": 1}})


def test_dict_stopper_missing_key_later_is_skipped() -> None:
    s = DictStopper({"acc": 0.9})
    assert s("t", {"acc": 0.1}) is False
    assert s("t", {"loss": 1.0}) is False
    assert s("t", {"acc": 0.95}) is True


def test_dict_stopper_tolerates_nan_none_and_numeric_objects() -> None:
    s = DictStopper({"acc": 0.9})
    assert s("t", {"acc": math.nan}) is False
    assert s("t", {"acc": None}) is False
    assert s("t", {"acc": math.inf}) is True

    class Scalar:
        def __float__(self) -> float:
            return 1.0

    assert s("u", {"acc": Scalar()}) is True


def test_dict_stopper_big_ints_compare_exactly() -> None:
    s = DictStopper({"n": 2**60 + 1})
    assert s("t", {"n": 2**60}) is False
    assert s("t", {"n": 2**60 + 1}) is True


def test_dict_stopper_bool_criterion() -> None:
    s = DictStopper({"finished": True})
    assert s("t", {"finished": False}) is False
    assert s("t", {"finished": True}) is True


def test_dict_stopper_rejects_text_results() -> None:
    with pytest.raises(ValueError, match=r"result\['acc'\] of trial 't' is 'high' \(str\)"):
        DictStopper({"acc": 0.9})("t", {"acc": "high"})


# -- make_stopper ----------------------------------------------------------------------------


def test_make_stopper_conversions() -> None:
    assert make_stopper(None) is None
    noop = NoopStopper()
    assert make_stopper(noop) is noop
    from_dict = make_stopper({"training_iteration": 2})
    assert isinstance(from_dict, DictStopper)
    assert from_dict("t", {"training_iteration": 2}) is True

    def fn(trial_id: str, result: dict[str, Any]) -> bool:
        return trial_id == "stop-me"

    from_fn = make_stopper(fn)
    assert isinstance(from_fn, FunctionStopper)
    assert from_fn("stop-me", {}) is True
    assert from_fn("other", {}) is False


@pytest.mark.parametrize(
    ("stop", "message"),
    [
        ({1: 2}, r"key 1 \(int\)"),
        ({"": 2}, r"key '' \(str\)"),
        ({"a": {"b": 1}}, r"value \{'b': 1\} of key 'a' must be a number"),
        ({"acc": "0.9"}, r"value '0.9' of key 'acc' must be a number"),
        ({"acc": None}, r"value None of key 'acc'"),
        ({"acc": math.nan}, r"value nan of key 'acc'"),
    ],
)
def test_make_stopper_validates_dicts(stop: dict[Any, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_stopper(stop)


@pytest.mark.parametrize("stop", [3, "training_iteration", [("a", 1)], 1.5])
def test_make_stopper_rejects_other_types(stop: Any) -> None:
    with pytest.raises(TypeError) as info:
        make_stopper(stop)
    message = str(info.value)
    assert type(stop).__name__ in message
    assert "dict" in message and "Stopper" in message and "function" in message


def test_make_stopper_rejects_stopper_lookalikes() -> None:
    class RayStyle:
        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return False

        def stop_all(self) -> bool:
            return True

    with pytest.raises(TypeError, match=r"RayStyle has stop_all.* subclass"):
        make_stopper(RayStyle())


def _escape(text: str) -> str:
    return re.escape(text)


def _is_finite_number(value: Any) -> bool:
    try:
        return isinstance(value, (int, float)) and math.isfinite(float(value))
    except OverflowError:
        return False
