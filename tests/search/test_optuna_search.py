"""OptunaSearch: samplers, space translation, points, constraints, state, end to end."""

from __future__ import annotations

import json
import logging
import statistics
import sys
import warnings
from typing import Any

import optuna
import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tests.search.searcher_conformance import MIXED_SPACE, check_conformance, drive, make
from tunefleet._state_log import StateLog, join, split
from tunefleet.search import OptunaSearch
from tunefleet.space._domains import _float_times

SMALL_SPACE: dict[str, Any] = {
    "lr": tune.loguniform(1e-4, 1e-1),
    "dropout": tune.uniform(0.0, 0.5),
    "layers": tune.randint(1, 5),
    "units": tune.qrandint(16, 256, 16),
    "act": tune.choice(["relu", "tanh"]),
}


def restored(searcher: OptunaSearch, factory: Any, space: dict[str, Any]) -> OptunaSearch:
    copy = make(factory, space)
    copy.set_state(json.loads(json.dumps(searcher.get_state())))
    assert isinstance(copy, OptunaSearch)
    return copy


def all_trials(searcher: OptunaSearch) -> list[dict[str, Any]]:
    """Every trial of the saved state, in number order: an unfinished one as last
    logged in "opened", a finished one as what changed since, in "finished"."""
    state = searcher.get_state()
    latest = {int(t["number"]): t for t in state["opened"]}
    for t in state["finished"]:
        if t.get("of_opened"):
            base = {k: v for k, v in latest[t["number"]].items() if k not in t.get("dropped", [])}
            t = {**base, **{k: v for k, v in t.items() if k not in ("of_opened", "dropped")}}
        latest[int(t["number"])] = t
    return [latest[number] for number in sorted(latest)]


def states(searcher: OptunaSearch) -> list[str]:
    return [t["state"] for t in all_trials(searcher)]


# ---------------------------------------------------------------- conformance


@pytest.mark.parametrize("sampler", [None, "tpe", "qmc", "random", "cmaes"])
def test_conformance(sampler: str | None) -> None:
    # CMA-ES models the numeric parameters; Optuna samples the choice at random for it
    check_conformance(lambda: OptunaSearch(sampler=sampler, seed=0))


@pytest.mark.parametrize("sampler", ["nsga2", None])
def test_conformance_with_two_objectives(sampler: str | None) -> None:
    # drive() reports "loss" and "training_iteration": two objectives, one degenerate
    check_conformance(
        lambda: OptunaSearch(
            metric=["loss", "training_iteration"], mode=["min", "max"], sampler=sampler, seed=0
        )
    )


@pytest.mark.slow
def test_conformance_gp() -> None:
    # GP suggestions take seconds each: a smaller space, and 4 of them after the restore
    check_conformance(lambda: OptunaSearch(sampler="gp", seed=0), space=SMALL_SPACE, warmup=9)


def test_cmaes_optimizer_is_saved_as_data_and_restored_exactly() -> None:
    factory = lambda: OptunaSearch(sampler="cmaes", seed=1)  # noqa: E731
    searcher = make(factory, SMALL_SPACE)
    assert isinstance(searcher, OptunaSearch)
    drive(searcher, 30)
    state = searcher.get_state()
    optimizers = [t["optimizer"] for t in all_trials(searcher) if "optimizer" in t]
    assert optimizers and {o["class"] for o in optimizers} == {"CMA"}
    assert "optimizer:" not in json.dumps(state)  # no pickle in the state
    copy = restored(searcher, factory, SMALL_SPACE)
    assert drive(searcher, 12, start=100) == drive(copy, 12, start=100)


# ---------------------------------------------------------------- spaces


def test_exact_types_log_quantization_and_categories_by_index() -> None:
    sub = {"k": 1}
    space: dict[str, Any] = {
        "qlog": tune.qloguniform(1e-3, 1.0, 1e-3),
        "qlogint": tune.qlograndint(8, 512, 8),
        "cats": tune.choice([None, "a", 3, 3.0, True, sub]),
    }
    searcher = make(lambda: OptunaSearch(seed=3), space)
    configs = drive_loss(searcher, 60, lambda c: c["qlog"] + c["qlogint"] / 512)
    for config in configs:
        qlog, qlogint = config["qlog"], config["qlogint"]
        assert type(qlog) is float and 1e-3 <= qlog <= 1.0
        assert qlog == _float_times(round(qlog / 1e-3), 1e-3)  # exactly a multiple
        assert type(qlogint) is int and qlogint % 8 == 0 and 8 <= qlogint <= 512
        # exact categories: 3, 3.0 and True stay apart
        cats = space["cats"].categories
        assert any(type(config["cats"]) is type(c) and config["cats"] == c for c in cats)
    assert len({(type(c["cats"]), repr(c["cats"])) for c in configs}) == 6


def test_conditional_space_gives_each_branch_its_own_parameters() -> None:
    space = {
        "opt": tune.choice(
            [
                {"name": "sgd", "lr": tune.uniform(0.01, 0.1), "momentum": tune.uniform(0.5, 0.9)},
                {"name": "adam", "lr": tune.loguniform(1e-4, 1e-2), "beta": tune.uniform(0.9, 1)},
            ]
        ),
        "scaled": tune.sample_from(lambda spec: spec.config.opt.lr * 10),
        "tag": tune.sample_from(lambda spec: spec.config["opt"]["name"]),
    }
    searcher = make(lambda: OptunaSearch(seed=0), space)
    configs = drive_loss(searcher, 30, lambda c: c["scaled"])
    names = {c["opt"]["name"] for c in configs}
    assert names == {"sgd", "adam"}
    for c in configs:
        opt = c["opt"]
        if opt["name"] == "sgd":
            assert set(opt) == {"name", "lr", "momentum"} and 0.01 <= opt["lr"] <= 0.1
        else:
            assert set(opt) == {"name", "lr", "beta"} and 1e-4 <= opt["lr"] <= 1e-2
        assert c["scaled"] == opt["lr"] * 10 and c["tag"] == opt["name"]
    params = {p for t in all_trials(searcher) for p in t["params"]}
    assert {"opt", "opt/[0]/lr", "opt/[0]/momentum", "opt/[1]/lr", "opt/[1]/beta"} == params
    # a point names its branch by its constants, or leaves it open and sets values inside
    adam = {"opt": {"name": "adam", "lr": 0.001, "beta": 0.95}}
    searcher = make(
        lambda: OptunaSearch(seed=0, points_to_evaluate=[adam], evaluated_rewards=[0.3]), space
    )
    assert all_trials(searcher)[0]["params"] == {
        "opt": 1,
        "opt/[1]/lr": 0.001,
        "opt/[1]/beta": 0.95,
    }
    searcher = make(lambda: OptunaSearch(seed=0, points_to_evaluate=[{"opt/lr": 0.05}]), space)
    config = searcher.suggest("p")  # 0.05 fits SGD's lr only
    assert isinstance(config, dict) and config["opt"]["lr"] == 0.05


def test_define_by_run_space_with_constants_and_param_space_extras() -> None:
    def space(trial: optuna.Trial) -> dict[str, Any]:
        x = trial.suggest_float("x", -1, 1)
        if trial.suggest_categorical("kind", ["deep", "wide"]) == "deep":
            trial.suggest_int("model/depth", 1, 4)
        return {"const": 7, "sign": x > 0}

    extras = {"fixed": "yes", "double": tune.sample_from(lambda spec: spec.config.x * 2)}
    searcher = make(lambda: OptunaSearch(space, seed=0), extras)
    for config in drive_loss(searcher, 15, lambda c: c["x"] ** 2):
        assert config["const"] == 7 and config["fixed"] == "yes"
        assert config["double"] == config["x"] * 2 and config["sign"] == (config["x"] > 0)
        assert ("model" in config) == (config["kind"] == "deep")
        if "model" in config:
            assert config["model"]["depth"] in range(1, 5)
    # a second space is declined, as in Ray (the Tuner then refuses it)
    assert OptunaSearch(space).set_search_properties("l", "min", {"y": tune.uniform(0, 1)}) is False


def test_space_of_optuna_distributions() -> None:
    space = {
        "x": optuna.distributions.FloatDistribution(0, 1),
        "net/n": optuna.distributions.IntDistribution(1, 3),
    }
    searcher = make(lambda: OptunaSearch(space, seed=0, points_to_evaluate=[{"x": 0.5}]), {})
    configs = drive_loss(searcher, 5, lambda c: c["x"])
    assert configs[0]["x"] == 0.5
    assert all(0 <= c["x"] <= 1 and c["net"]["n"] in (1, 2, 3) for c in configs)


def drive_loss(searcher: OptunaSearch, n: int, loss: Any, start: int = 0) -> list[dict[str, Any]]:
    configs = []
    for i in range(start, start + n):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict)
        searcher.on_trial_complete(f"t{i}", {"loss": loss(config)})
        configs.append(config)
    return configs


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"x": tune.grid_search([1, 2])}, r"param_space\[\"x\"\] is a grid_search"),
        ({"a": {"x": tune.randn()}}, r"param_space\[\"a\"\]\[\"x\"\] is randn.*without bounds"),
    ],
)
def test_unsupported_domains_are_refused_by_path(space: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(lambda: OptunaSearch(), space)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"sampler": "bayes"}, ValueError, "not one of"),
        ({"sampler": optuna.samplers.RandomSampler(), "seed": 1}, ValueError, "seed your"),
        ({"sampler": object()}, TypeError, "must be an Optuna sampler"),
        ({"points_to_evaluate": [{}], "evaluated_rewards": []}, ValueError, "one per point"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        OptunaSearch(**kwargs)


def test_a_missing_optuna_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[optuna\]'"):
        OptunaSearch()


def test_objectives_are_checked() -> None:
    with pytest.raises(ValueError, match="needs a metric and a mode"):
        OptunaSearch().set_search_properties(None, None, SMALL_SPACE)
    with pytest.raises(ValueError, match="differ in length"):
        OptunaSearch(metric=["a", "b"], mode=["min"]).set_search_properties(None, None, {})
    with pytest.raises(ValueError, match="'cmaes' optimises one metric"):
        OptunaSearch(sampler="cmaes").set_search_properties(["a", "b"], "min", SMALL_SPACE)


# ---------------------------------------------------------------- points and rewards


def test_points_to_evaluate_come_first_partial_points_are_completed() -> None:
    points: list[dict[str, Any]] = [
        {"lr": 0.01, "act": None, "nested": {"momentum": 0.6}},
        {"units": 64, "nested/momentum": 0.7},
    ]
    searcher = make(lambda: OptunaSearch(seed=0, points_to_evaluate=points), MIXED_SPACE)
    first, second, _ = drive(searcher, 3)
    assert first["lr"] == 0.01 and first["act"] is None and first["nested"]["momentum"] == 0.6
    assert second["units"] == 64 and second["nested"]["momentum"] == 0.7
    assert first["double_lr"] == 0.02
    # points not asked yet are part of the state
    searcher = make(lambda: OptunaSearch(seed=0, points_to_evaluate=points), MIXED_SPACE)
    copy = restored(searcher, lambda: OptunaSearch(seed=0), MIXED_SPACE)
    assert drive(copy, 2) == [first, second]


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ({"lrr": 0.1}, r"sets 'lrr', which is not a parameter"),
        ({"double_lr": 0.1}, r"sets 'double_lr', which is not a parameter"),  # sample_from
        ({"lr": 2.0}, r"\['lr'\]=2.0 is not a value of loguniform"),
        ({"units": 20}, r"\['units'\]=20 is not a value of qrandint"),
        ({"act": "gelu"}, r"\['act'\]='gelu' is not one of"),
    ],
)
def test_bad_points_are_refused(point: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(lambda: OptunaSearch(points_to_evaluate=[point]), MIXED_SPACE)


def test_evaluated_rewards_become_finished_trials() -> None:
    points = [
        {"lr": 0.01, "dropout": 0.1, "layers": 2, "units": 64, "act": "relu"},
        {"lr": 0.001, "dropout": 0.3, "layers": 4, "units": 128, "act": "tanh"},
    ]
    searcher = make(
        lambda: OptunaSearch(seed=0, points_to_evaluate=points, evaluated_rewards=[0.5, 0.2]),
        SMALL_SPACE,
    )
    trials = all_trials(searcher)
    assert [(t["state"], t["values"]) for t in trials] == [("COMPLETE", [0.5]), ("COMPLETE", [0.2])]
    config = searcher.suggest("a")  # a new trial, not a point
    assert isinstance(config, dict) and len(all_trials(searcher)) == 3
    # with constraints, the points count as feasible
    searcher = OptunaSearch(seed=0, points_to_evaluate=points, evaluated_rewards=[0.5, 0.2])
    searcher.set_search_properties("loss", "min", SMALL_SPACE, constraints=["c"])
    first = all_trials(searcher)[0]
    assert first["user_attrs"] == {"tunefleet:constraints": [0.0]} and first["system_attrs"]
    with pytest.raises(ValueError, match="does not set 'dropout'"):
        make(
            lambda: OptunaSearch(points_to_evaluate=[{"lr": 0.1}], evaluated_rewards=[1]),
            SMALL_SPACE,
        )


# ---------------------------------------------------------------- results, constraints


def test_failures_and_results_without_the_metric_are_told_as_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    searcher = make(lambda: OptunaSearch(seed=0), SMALL_SPACE)
    for i in range(4):
        searcher.suggest(f"t{i}")
    searcher.on_trial_complete("t0", {"loss": 1.0})
    searcher.on_trial_complete("t1", None, error=True)
    with caplog.at_level(logging.WARNING):
        searcher.on_trial_complete("t2", {"other": 1.0})
    searcher.on_trial_complete("t3", None)
    searcher.on_trial_complete("unknown", {"loss": 1.0})  # ignored
    assert states(searcher) == ["COMPLETE", "FAIL", "FAIL", "FAIL"]
    assert "without a finite objective ['loss'] fail" in caplog.text


def test_pending_trials_survive_a_restore() -> None:
    factory = lambda: OptunaSearch(seed=0)  # noqa: E731
    searcher = make(factory, SMALL_SPACE)
    drive(searcher, 3)
    searcher.suggest("a")
    searcher.suggest("b")
    copy = restored(searcher, factory, SMALL_SPACE)
    assert states(copy) == ["COMPLETE"] * 3 + ["RUNNING"] * 2
    copy.on_trial_complete("b", {"loss": 0.5})
    assert states(copy)[-2:] == ["RUNNING", "COMPLETE"]
    assert copy.suggest("c") == searcher.suggest("c")  # the pending ones are lies alike


def count_infeasible(constraints: list[str] | None) -> tuple[int, OptunaSearch]:
    """Trials 15-39 with x < 0.4: the deeper basin (x = 0.2) is infeasible (c = 0.4 - x > 0)."""
    searcher = OptunaSearch(seed=0)
    space = {"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)}
    searcher.set_search_properties("loss", "min", space, constraints=constraints)
    infeasible = 0
    for i in range(40):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict)
        x, y = config["x"], config["y"]
        loss = min((x - 0.2) ** 2 - 0.1, (x - 0.8) ** 2) + (y - 0.5) ** 2
        searcher.on_trial_complete(f"t{i}", {"loss": loss, "c": 0.4 - x})
        infeasible += i >= 15 and x < 0.4
    return infeasible, searcher


def test_constraints_steer_away_from_the_infeasible_region() -> None:
    infeasible, searcher = count_infeasible(["c"])
    assert infeasible < 6  # random search: 10 of 25 on average
    assert count_infeasible(None)[0] > 12  # the same search without the constraint
    trial = all_trials(searcher)[0]
    assert trial["user_attrs"]["tunefleet:constraints"] == [0.4 - trial["params"]["x"]]
    # a result without the constraint value: a failed trial
    searcher.suggest("z")
    searcher.on_trial_complete("z", {"loss": 1.0})
    assert states(searcher)[-1] == "FAIL"


def through_store(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as the experiment store gives it back: the head as JSON, each StateLog
    read back from its rows as a new StateLog."""
    head, logs = split(state)
    return dict(join(json.loads(json.dumps(head)), lambda p: json.loads(json.dumps(logs[p]))))


def test_a_resumed_search_suggests_what_the_uninterrupted_one_does() -> None:
    factory = lambda: OptunaSearch(sampler="tpe", seed=7)  # noqa: E731
    searcher = make(factory, SMALL_SPACE)
    drive(searcher, 12)  # past TPE's random start-up trials
    searcher.suggest("live-a")
    searcher.suggest("live-b")
    state = searcher.get_state()
    assert isinstance(state["finished"], StateLog) and len(state["finished"]) == 12
    assert [t["number"] for t in state["opened"]][-2:] == [12, 13]  # logged as they ran
    assert state["asked"][-2:] == [["live-a", 12], ["live-b", 13]]
    copy = make(factory, SMALL_SPACE)
    copy.set_state(through_store(state))
    for search in (searcher, copy):
        search.on_trial_complete("live-a", {"loss": 0.25})
    for i in range(15):
        configs = [search.suggest(f"n{i}") for search in (searcher, copy)]
        assert configs[0] == configs[1], i
        assert isinstance(configs[0], dict)
        for search in (searcher, copy):
            search.on_trial_complete(f"n{i}", {"loss": float(configs[0]["dropout"])})
    mine, theirs = searcher.get_state(), copy.get_state()
    assert json.dumps(mine) == json.dumps(theirs)
    assert len(theirs["finished"]) == 28  # the restored log goes on growing at its end


def test_restored_trials_are_the_saved_ones_each_added_once_without_a_copy() -> None:
    from optuna.trial import FrozenTrial

    factory = lambda: OptunaSearch(sampler="tpe", seed=7)  # noqa: E731
    searcher = make(factory, SMALL_SPACE)
    drive(searcher, 6)
    searcher.suggest("live")
    copy = make(factory, SMALL_SPACE)
    copy.set_state(through_store(searcher.get_state()))
    assert isinstance(copy, OptunaSearch) and copy._study and searcher._study
    theirs = copy._study.get_trials(deepcopy=False)
    assert {type(t) for t in theirs} == {FrozenTrial}  # the storage holds plain trials
    mine = searcher._study.get_trials(deepcopy=False)

    def strip(trial: FrozenTrial) -> dict[str, Any]:  # all but the times
        return {**vars(trial), "_datetime_start": None, "datetime_complete": None}

    assert [strip(t) for t in theirs] == [strip(t) for t in mine]
    finished = [t for t in theirs if t.state.is_finished()]
    assert len(finished) == 6
    shared = {id(t.distributions["dropout"]) for t in finished}
    assert len(shared) == 1  # not deep-copied: one distribution object for every trial
    again = copy._study.get_trials()  # Optuna's own deep copies still work
    assert [strip(t) for t in again] == [strip(t) for t in theirs]
    assert all(a is not b for a, b in zip(again, theirs, strict=True))


def test_the_head_stays_the_same_as_trials_come_and_go() -> None:
    searcher = make(lambda: OptunaSearch(sampler="tpe", seed=3), SMALL_SPACE)
    drive(searcher, 4)
    head = json.dumps(split(searcher.get_state())[0])
    searcher.suggest("a")
    assert json.dumps(split(searcher.get_state())[0]) == head  # an ask: rows only
    searcher.on_trial_complete("a", {"loss": 0.5})
    assert json.dumps(split(searcher.get_state())[0]) == head  # an end: rows only
    assert "RUNNING" not in head and "COMPLETE" not in head


def previous(state: dict[str, Any], version: int) -> dict[str, Any]:
    """`state` in an older format: 2, the unfinished trials, the asks and the live
    trials in the head; 1, every trial in "trials" by number."""
    state = json.loads(json.dumps(state))
    done = {t["number"] for t in state["finished"]}
    latest = {t["number"]: t for t in state.pop("opened") if t["number"] not in done}
    asked = state.pop("asked")
    old = {
        **{k: v for k, v in state.items() if k != "asks_before"},
        "version": 2,
        "asks": state["asks_before"] + len(asked),
        "trials": [latest[n] for n in sorted(latest)],
        "live": {tid: n for tid, n in asked if n in latest},
    }
    if version == 1:
        every = sorted([*old.pop("finished"), *old["trials"]], key=lambda t: t["number"])
        old["trials"] = [{k: v for k, v in t.items() if k != "number"} for t in every]
        old["version"] = 1
    return old


@pytest.mark.parametrize("version", [1, 2])
def test_a_state_of_a_previous_format_still_loads(version: int) -> None:
    factory = lambda: OptunaSearch(sampler="tpe", seed=0)  # noqa: E731
    searcher = make(factory, SMALL_SPACE)
    drive(searcher, 12)
    searcher.suggest("a")
    searcher.suggest("b")
    copy = make(factory, SMALL_SPACE)
    copy.set_state(previous(searcher.get_state(), version))
    assert states(copy) == states(searcher) and states(copy)[-2:] == ["RUNNING"] * 2
    for search in (searcher, copy):
        search.on_trial_complete("b", {"loss": 0.5})
    for i in range(4):
        configs = [search.suggest(f"n{i}") for search in (searcher, copy)]
        assert configs[0] == configs[1], i
        for search in (searcher, copy):
            search.on_trial_complete(f"n{i}", {"loss": 0.1 * i})
    copy.on_trial_complete("a", {"loss": 0.5})  # still live after the restore
    assert states(copy)[12] == "COMPLETE"
    # saved again, in the new format, then restored: the same trials
    again = make(factory, SMALL_SPACE)
    again.set_state(through_store(copy.get_state()))
    assert all_trials(again) == all_trials(copy)


def test_a_state_with_a_missing_trial_is_refused() -> None:
    searcher = make(lambda: OptunaSearch(seed=0), SMALL_SPACE)
    drive(searcher, 3)
    state = through_store(searcher.get_state())
    del state["finished"][1]
    copy = make(lambda: OptunaSearch(seed=0), SMALL_SPACE)
    with pytest.raises(ValueError, match=r"trial numbers \[0, 2\] of finished and trials"):
        copy.set_state(state)


def test_a_finished_trial_logged_as_changes_needs_its_opened_entry() -> None:
    searcher = make(lambda: OptunaSearch(seed=0), SMALL_SPACE)
    drive(searcher, 2)  # no state saved while they ran: logged whole when finished
    searcher.suggest("a")
    assert [t["number"] for t in searcher.get_state()["opened"]] == [2]
    searcher.on_trial_complete("a", {"loss": 0.5})
    state = through_store(searcher.get_state())
    assert "params" in state["finished"][1] and "of_opened" not in state["finished"][1]
    assert state["finished"][2]["of_opened"] and "params" not in state["finished"][2]
    copy = make(lambda: OptunaSearch(seed=0), SMALL_SPACE)
    copy.set_state(through_store(state))
    assert all_trials(copy) == all_trials(searcher)
    state["opened"] = StateLog()
    with pytest.raises(ValueError, match=r"the finished trial 2 was never opened"):
        make(lambda: OptunaSearch(seed=0), SMALL_SPACE).set_state(state)


def test_a_sampler_instance_continues_from_the_same_observations() -> None:
    def factory() -> OptunaSearch:
        return OptunaSearch(sampler=optuna.samplers.RandomSampler(seed=5))

    searcher = make(factory, SMALL_SPACE)
    drive(searcher, 5)
    copy = restored(searcher, factory, SMALL_SPACE)
    assert states(copy) == states(searcher)
    assert isinstance(copy.suggest("next"), dict)


def test_optuna_stays_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            searcher = OptunaSearch(seed=0)  # TPE with constraints_func, group=True: no notes
            space = {"opt": tune.choice([{"x": tune.uniform(0, 1)}, {"y": tune.randint(0, 3)}])}
            searcher.set_search_properties("loss", "min", space, constraints=["c"])
            for i in range(12):
                config = searcher.suggest(f"t{i}")
                searcher.on_trial_complete(f"t{i}", {"loss": float(i), "c": -1.0})
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(before)
    assert isinstance(config, dict) and not [str(w.message) for w in caught]
    err = capfd.readouterr().err
    assert "finished with value" not in err and "A new study created" not in err


def test_quiet_optuna_changes_neither_the_verbosity_nor_the_filters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # entered at every tell: Optuna's INFO lines and experimental notes are dropped inside,
    # without setting Optuna's verbosity (it clears every logger's cache) each time
    from tunefleet.search._shared import quiet_optuna

    experimental = optuna.exceptions.ExperimentalWarning
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    study_log = optuna.logging.get_logger("optuna.study.study")
    caplog.set_level(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            users = list(warnings.filters)
            with quiet_optuna():
                pass
            late = logging.getLogger("optuna.made_after_the_first_use")
            with quiet_optuna():
                with quiet_optuna():  # nested: the outer one's filters hold
                    study_log.info("info inside")
                    late.info("late info inside")
                    warnings.warn("note inside", experimental, stacklevel=1)
                    assert optuna.logging.get_verbosity() == optuna.logging.INFO
                study_log.warning("warning inside")
                warnings.warn("note in the outer one", experimental, stacklevel=1)
            assert warnings.filters == users
            study_log.info("info after")
            late.info("late info after")
            warnings.warn("note after", experimental, stacklevel=1)
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(before)
    assert [str(w.message) for w in caught] == ["note after"]
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("optuna")]
    assert logged == ["warning inside", "info after", "late info after"]


# ---------------------------------------------------------------- end to end


def bowl(config: dict[str, Any]) -> None:
    tune.report(loss=(config["x"] - 0.7) ** 2 + (config["y"] + 0.2) ** 2)


def test_tuner_search_improves_over_its_first_trials(storage: str) -> None:
    grid = tune.Tuner(
        bowl,
        param_space={"x": tune.uniform(-2, 2), "y": tune.uniform(-2, 2)},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", search_alg=OptunaSearch(seed=0), num_samples=30
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 30
    losses = [metrics_of(r)["loss"] for r in sorted(grid, key=lambda r: metrics_of(r)["trial_id"])]
    first, last = losses[:10], losses[-10:]  # the first ten are TPE's random start
    assert statistics.median(last) < statistics.median(first), (first, last)


def two_objectives(config: dict[str, Any]) -> None:
    x = config["x"]
    tune.report(loss=(x - 1.0) ** 2, latency=x)


def test_tuner_with_two_objectives_finds_a_pareto_front(storage: str) -> None:
    grid = tune.Tuner(
        two_objectives,
        param_space={"x": tune.uniform(0, 3)},
        tune_config=tune.TuneConfig(
            metric=["loss", "latency"],
            mode=["min", "min"],
            search_alg=OptunaSearch(seed=0),
            num_samples=12,
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    front = grid.get_pareto_front()
    assert grid.num_errors == 0 and front
    best_loss = min(grid, key=lambda r: metrics_of(r)["loss"])
    assert best_loss.config in [r.config for r in front]


def test_tuner_restore_continues_the_same_search(storage: str) -> None:
    space = {"x": tune.uniform(-2, 2), "y": tune.uniform(-2, 2)}

    def tune_config(n: int, searcher: OptunaSearch) -> tune.TuneConfig:
        return tune.TuneConfig(metric="loss", mode="min", search_alg=searcher, num_samples=n)

    grid = tune.Tuner(
        bowl,
        param_space=space,
        tune_config=tune_config(6, OptunaSearch(seed=1)),
        run_config=tune.RunConfig(name="resume", storage_path=storage, verbose=0),
    ).fit()
    first = {(r.config["x"], r.config["y"]) for r in grid}
    searcher = OptunaSearch(seed=1)
    again = tune.Tuner.restore(grid.experiment_path, bowl, tune_config=tune_config(12, searcher))
    grid = again.fit()
    assert len(grid) == 12 and grid.num_errors == 0
    trials = all_trials(searcher)
    assert len(trials) == 12 and all(t["state"] == "COMPLETE" for t in trials)
    # the restored study holds the first run's observations, then six new trials
    assert {(t["params"]["x"], t["params"]["y"]) for t in trials[:6]} == first
    assert not first & {(t["params"]["x"], t["params"]["y"]) for t in trials[6:]}


def test_nsga2_parent_caches_are_logged_once_not_kept_in_the_head() -> None:
    def factory() -> OptunaSearch:
        return OptunaSearch(sampler=optuna.samplers.NSGAIISampler(population_size=4, seed=0))

    searcher = make(factory, SMALL_SPACE)
    drive(searcher, 20)
    state = searcher.get_state()
    keys = [key for key, _ in state["study_attr_log"]]
    assert keys and all(":parent:" in key for key in keys)  # one per generation, once
    assert not [key for key in state["study_attrs"] if ":parent:" in key]
    copy = make(factory, SMALL_SPACE)
    copy.set_state(through_store(state))
    assert json.dumps(copy.get_state()) == json.dumps(state)
