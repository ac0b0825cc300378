"""NevergradSearch, HEBOSearch, ZOOptSearch, AxSearch: the searcher conformance suite,
their spaces (tunefleet's and the library's own), points, refusals, and a real
driver SIGKILLed mid-run that resumes to the same trials as a run never killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.paths import REPO
from tests.search.searcher_conformance import check_conformance
from tunefleet.search import Searcher
from tunefleet.store import StoreReader

NAMES = ["nevergrad", "hebo", "zoopt", "ax"]
MODULES = {"nevergrad": "nevergrad", "hebo": "hebo", "zoopt": "zoopt", "ax": "ax"}
SMALL: dict[str, Any] = {
    "x": tune.uniform(-2.0, 2.0),
    "k": tune.randint(0, 5),
    "c": tune.choice(["a", "b"]),
}


def sobol_only() -> Any:
    """An Ax generation strategy of Sobol' points only (BoTorch's GP is slow on 2 cores)."""
    from ax.adapter.registry import Generators
    from ax.generation_strategy.generation_node import GenerationStep
    from ax.generation_strategy.generation_strategy import GenerationStrategy

    return GenerationStrategy(nodes=[GenerationStep(generator=Generators.SOBOL, num_trials=-1)])


def make_searcher(name: str, seed: int = 0, **kwargs: Any) -> Searcher:
    """One of the four, seeded, kept fast (HEBO in its Sobol' phase, Ax on Sobol')."""
    from tunefleet.search import AxSearch, HEBOSearch, NevergradSearch, ZOOptSearch

    budget = kwargs.pop("budget", 100)
    if name == "nevergrad":
        return NevergradSearch(seed=seed, **kwargs)
    if name == "hebo":
        return HEBOSearch(random_state_seed=seed, rand_sample=40, **kwargs)
    if name == "zoopt":
        return ZOOptSearch(budget=budget, parallel_num=8, seed=seed, **kwargs)
    return AxSearch(random_seed=seed, generation_strategy=sobol_only(), **kwargs)


def needs(name: str) -> None:
    pytest.importorskip(MODULES[name])


def start(search: Searcher, space: dict[str, Any]) -> Searcher:
    assert search.set_search_properties("loss", "min", space, num_samples=-1)
    return search


def loss(config: dict[str, Any]) -> float:
    return float((config["x"] - 0.5) ** 2 + 0.1 * config["k"] + (config["c"] == "b"))


@pytest.mark.parametrize("name", NAMES)
def test_conformance(name: str) -> None:
    needs(name)
    own = None
    if name != "zoopt":  # ZOOpt's own space is ZOOpt's dim_dict only, as in Ray

        def own(space: dict[str, Any]) -> Searcher:
            return make_searcher(name, space=space, metric="loss", mode="min")

    check_conformance(lambda: make_searcher(name), with_space=own)


@pytest.mark.parametrize("name", NAMES)
def test_points_to_evaluate_run_first_with_exact_values(name: str) -> None:
    needs(name)
    points = [{"x": 0.25, "k": 3, "c": "b"}, {"x": -1.5, "k": 0, "c": "a"}]
    search = start(make_searcher(name, points_to_evaluate=points), SMALL)
    first = [search.suggest(f"t{i}") for i in range(2)]
    assert first == points


@pytest.mark.parametrize("name", NAMES)
def test_unbounded_and_grid_domains_are_refused_by_key_path(name: str) -> None:
    needs(name)
    with pytest.raises(ValueError, match=r'param_space\["opt"\]\["w"\] is randn'):
        start(make_searcher(name), {"opt": {"w": tune.randn(0, 1)}, "x": tune.uniform(0, 1)})
    with pytest.raises(ValueError, match=r'param_space\["g"\] is a grid_search'):
        start(make_searcher(name), {"g": tune.grid_search([1, 2]), "x": tune.uniform(0, 1)})
    with pytest.raises(ValueError, match="needs a metric and a mode"):
        make_searcher(name).set_search_properties(None, None, SMALL)


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [
        ("NevergradSearch", "nevergrad", "nevergrad"),
        ("HEBOSearch", "hebo", "hebo"),
        ("ZOOptSearch", "zoopt", "zoopt"),
        ("AxSearch", "ax.service.ax_client", "ax"),
    ],
)
def test_a_missing_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, name: str, module: str, extra: str
) -> None:
    import tunefleet.search

    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=rf"pip install 'tunefleet\[{extra}\]'"):
        getattr(tunefleet.search, name)()


def test_native_spaces_as_in_rays_docs() -> None:
    pytest.importorskip("nevergrad")
    pytest.importorskip("zoopt")
    import nevergrad as ng
    from zoopt import ValueType

    from tunefleet.search import NevergradSearch, ZOOptSearch

    space = ng.p.Dict(width=ng.p.Scalar(lower=0, upper=20), act=ng.p.Choice(["relu", "tanh"]))
    search = NevergradSearch(ng.optimizers.OnePlusOne, space=space, metric="m", mode="max")
    assert not search.set_search_properties(None, None, {"steps": 3})  # its own space: False
    config = search.suggest("t0")
    assert isinstance(config, dict) and config["steps"] == 3 and config["act"] in ("relu", "tanh")
    assert 0 <= config["width"] <= 20
    dims = {"h": (ValueType.CONTINUOUS, [-10, 10], 1e-2), "w": (ValueType.DISCRETE, [0, 10], True)}
    zoo = ZOOptSearch(budget=10, dim_dict=dims, metric="m", mode="min", seed=1)
    assert not zoo.set_search_properties(None, None, {"steps": 3})
    config = zoo.suggest("t0")
    assert isinstance(config, dict) and -10 <= config["h"] <= 10 and config["w"] in range(11)


def test_ax_takes_its_own_parameter_dicts_and_constraints() -> None:
    pytest.importorskip("ax")
    from tunefleet.search import AxSearch

    params = [
        {"name": "x1", "type": "range", "bounds": [0.0, 1.0]},
        {"name": "x2", "type": "range", "bounds": [0.0, 1.0]},
    ]
    search = AxSearch(
        space=params,
        metric="score",
        mode="max",
        parameter_constraints=["x1 + x2 <= 1.0"],
        generation_strategy=sobol_only(),
    )
    for i in range(4):
        config = search.suggest(f"t{i}")
        assert isinstance(config, dict) and config["x1"] + config["x2"] <= 1.0 + 1e-9
        search.on_trial_complete(f"t{i}", {"score": config["x1"]})


def _two_alike(name: str) -> tuple[Searcher, Searcher]:
    """Two searchers of `name` fed the same three trials, one to save, one never saved."""
    straight = start(make_searcher(name), SMALL)
    first = start(make_searcher(name), SMALL)
    for i in range(3):
        for search in (straight, first):
            config = search.suggest(f"t{i}")
            assert isinstance(config, dict)
            search.on_trial_complete(f"t{i}", {"loss": loss(config)})
    return straight, first


@pytest.mark.parametrize("name", NAMES)
def test_a_state_kept_by_the_store_restores_the_same_next_trials(name: str) -> None:
    """The store's secret rules (keys such as Ax's ``generator_key``) leave the state
    whole: it restores to the same suggestions as the searcher never saved."""
    needs(name)
    from tunefleet.store._schema import decode, encode

    straight, first = _two_alike(name)
    state = first.get_state()
    assert decode(encode(state)) == state
    restored = start(make_searcher(name), SMALL)
    restored.set_state(decode(encode(state)))
    for i in range(3, 5):
        expected = straight.suggest(f"t{i}")
        assert restored.suggest(f"t{i}") == expected
        assert isinstance(expected, dict)
        for search in (straight, restored):
            search.on_trial_complete(f"t{i}", {"loss": loss(expected)})


@pytest.mark.parametrize("name", ["nevergrad", "hebo"])
def test_the_ask_and_tell_log_is_saved_by_what_it_gained(name: str) -> None:
    """The log of asks and tells is a StateLog (the store writes its new events only),
    the same list at each save; restored from the store's rows, it goes on growing at
    its end, to the suggestions of the searcher that was never saved."""
    needs(name)
    from tunefleet._state_log import StateLog, join, split

    straight, first = _two_alike(name)
    state = first.get_state()
    log = state["log"]
    assert isinstance(log, StateLog) and len(log) == 6 and first.get_state()["log"] is log
    head, logs = split(state)
    back = join(json.loads(json.dumps(head)), lambda p: json.loads(json.dumps(logs[p])))
    restored = start(make_searcher(name), SMALL)
    restored.set_state(back)
    config = straight.suggest("t3")
    assert restored.suggest("t3") == config
    assert restored.get_state()["log"] is back["log"] and len(back["log"]) == 7


def test_zoopt_needs_a_budget_and_hebo_waits_at_max_concurrent() -> None:
    pytest.importorskip("zoopt")
    pytest.importorskip("hebo")
    from tunefleet.search import HEBOSearch, ZOOptSearch

    with pytest.raises(ValueError, match="needs a budget"):
        start(ZOOptSearch(), SMALL)
    with pytest.raises(ValueError, match="budget=2 must be >= 3"):
        ZOOptSearch(budget=2)
    hebo = start(HEBOSearch(random_state_seed=0, max_concurrent=2), SMALL)
    assert isinstance(hebo.suggest("a"), dict) and isinstance(hebo.suggest("b"), dict)
    assert hebo.suggest("c") is None  # two running: it waits
    hebo.on_trial_complete("a", {"loss": 1.0})
    assert isinstance(hebo.suggest("c"), dict)


# ---------------------------------------------------------------------- a killed driver


def scored(config: dict[str, Any]) -> None:
    for _ in range(3):
        time.sleep(0.05)
        tune.report({"loss": loss(config)})


DRIVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tunefleet as tune
    from tests.search.test_library_searchers import SMALL, make_searcher, scored

    if __name__ == "__main__":
        tune.run(
            scored,
            config=SMALL,
            num_samples=6,
            max_concurrent_trials=1,
            metric="loss",
            mode="min",
            search_alg=make_searcher(sys.argv[2], budget=6),
            storage_path=sys.argv[1],
            name="exp",
            resume="AUTO",
            verbose=0,
        )
        print("DRIVER DONE", flush=True)
    """
)


def configs(experiment: Path) -> list[dict[str, Any]]:
    with StoreReader(experiment) as reader:
        trials = sorted(reader.trials(), key=lambda t: t.trial_id)
        assert {t.status for t in trials} == {tune.TrialStatus.TERMINATED}
        return [{k: t.config[k] for k in SMALL} for t in trials]


def results(experiment: Path) -> int:
    if not (experiment / "experiment.db").exists():
        return 0
    with StoreReader(experiment) as reader:
        return sum(t.num_results for t in reader.trials())


def run_driver(script: Path, storage: str, name: str, until: Callable[[], bool]) -> str | None:
    """Run the driver until it ends (its output) or `until()` holds (SIGKILLed: None)."""
    driver = subprocess.Popen(
        [sys.executable, str(script), storage, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    while driver.poll() is None and not until():
        time.sleep(0.05)
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate()
        return None
    out, _ = driver.communicate()
    assert driver.returncode == 0, out
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", NAMES)
def test_a_sigkilled_driver_resumes_to_the_same_trials(
    name: str, storage: str, tmp_path: Path
) -> None:
    needs(name)
    from tests.engine.test_resume_e2e import wait_gone

    straight = tune.run(
        scored,
        config=SMALL,
        num_samples=6,
        max_concurrent_trials=1,
        metric="loss",
        mode="min",
        search_alg=make_searcher(name, budget=6),
        storage_path=str(tmp_path / "straight"),
        name="exp",
        verbose=0,
    )
    expected = configs(Path(straight.experiment_path))
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    experiment = Path(storage, "exp")
    killed = run_driver(script, storage, name, lambda: results(experiment) >= 8)
    assert killed is None, "the driver ended before it was killed"
    wait_gone(experiment)
    out = run_driver(script, storage, name, lambda: False)
    assert out is not None and "DRIVER DONE" in out
    resumed = configs(experiment)
    assert resumed == expected


def test_ax_takes_its_snapshot_again_only_after_an_ask_or_a_tell() -> None:
    # Ax's to_json_snapshot costs about 10 ms per trial it holds; the state is asked
    # for before every commit, most of which follow no ask or tell
    needs("ax")
    search = start(make_searcher("ax"), SMALL)
    client = search._client  # type: ignore[attr-defined]
    taken: list[int] = []
    snapshot = client.to_json_snapshot

    def counted() -> Any:
        taken.append(1)
        return snapshot()

    client.to_json_snapshot = counted
    config = search.suggest("t1")
    assert isinstance(config, dict)
    first = search.get_state()
    assert search.get_state()["ax"] == first["ax"] and len(taken) == 1  # nothing changed
    search.on_trial_complete("t1", {"loss": loss(config)})
    after_tell = search.get_state()
    assert len(taken) == 2 and after_tell["ax"] != first["ax"]
    again = start(make_searcher("ax"), SMALL)  # the kept snapshot restores as a fresh one
    again.set_state(json.loads(json.dumps(after_tell)))
    assert again.suggest("t2") == search.suggest("t2")
