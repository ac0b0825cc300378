"""PB2: arguments, the GP's choice, NaN safety, state, speed, and real and simulated runs."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import meet, meeting
from tests.helpers.results import metrics_of
from tests.schedulers.test_pbt_synch import PopulationSim, check_population
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import PB2, Candidates, Decision, Exploit, pbt_schedule
from tunefleet.schedulers._pb2 import MAX_DATA_POINTS, _kernel_class
from tunefleet.store import StoreReader
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus


def make_trial(i: int, config: dict[str, Any]) -> Trial:
    return Trial(trial_id=f"t{i}", index=i, name=f"t{i}", config=config, resources={}, path="")


def pb2(**kwargs: Any) -> PB2:
    args: dict[str, Any] = {
        "time_attr": "training_iteration",
        "metric": "score",
        "mode": "max",
        "perturbation_interval": 2,
        "hyperparam_bounds": {"x": [0.0, 1.0]},
        "seed": 0,
    }
    return PB2(**{**args, **kwargs})


def rate(x: float) -> float:
    """Score gained per iteration: best at x = 0.7."""
    return 1.0 - 4.0 * (x - 0.7) ** 2


class Population:
    """Trials whose score grows by rate(x) per iteration; exploits copy the progress."""

    def __init__(self, s: PB2, xs: list[float], extra: dict[str, Any] | None = None) -> None:
        self.s = s
        self.trials = [make_trial(i, {"x": x, **(extra or {})}) for i, x in enumerate(xs)]
        self.progress = {t.trial_id: (0, 0.0) for t in self.trials}
        self.decisions: list[Any] = []
        for t in self.trials:
            s.on_trial_add(t)

    def step(self, nan_for: str | None = None) -> None:
        for t in self.trials:
            it, score = self.progress[t.trial_id]
            it, score = it + 1, score + rate(t.config["x"])
            self.progress[t.trial_id] = (it, score)
            value = math.nan if t.trial_id == nan_for else score
            d = self.s.on_trial_result(t, {"training_iteration": it, "score": value})
            self.decisions.append(d)
            if isinstance(d, Exploit):
                self.progress[t.trial_id] = self.progress[d.source_trial_id]
                t.config = d.new_config


# -- arguments -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        (None, r"PB2 needs hyperparam_bounds"),
        ({}, r"PB2 needs hyperparam_bounds"),
        ({"lr": [1, 0]}, r"hyperparam_bounds\['lr'\]=\[1, 0\]: low must be < high"),
        ({"lr": [0.1, 0.1]}, r"hyperparam_bounds\['lr'\]=\[0.1, 0.1\]: low must be < high"),
        ({"lr": [0]}, r"hyperparam_bounds\['lr'\]=\[0\]: must be \[low, high\]"),
        ({"lr": 0.1}, r"hyperparam_bounds\['lr'\]=0.1: must be \[low, high\]"),
        ({"lr": ["a", 1]}, r"hyperparam_bounds\['lr'\]=\['a', 1\]: low and high must be numbers"),
        ({"lr": [0, math.inf]}, r"hyperparam_bounds\['lr'\]=\[0, inf\]: low and high must be"),
        ({"opt": {"lr": [2, 1]}}, r"hyperparam_bounds\['opt'\]\['lr'\]=\[2, 1\]: low must be <"),
        ({"opt": {}}, r"hyperparam_bounds\['opt'\]=\{\}: a nested dict needs"),
        ([0, 1], r"hyperparam_bounds=\[0, 1\] must be a dict"),
    ],
)
def test_bad_bounds_name_the_key_the_value_and_the_rule(bounds: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PB2(hyperparam_bounds=bounds)


def test_other_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"PB2: quantile_fraction=0.7 must be in \(0, 0.5\]"):
        pb2(quantile_fraction=0.7)
    with pytest.raises(ValueError, match=r"PB2: perturbation_interval=0 must be > 0"):
        pb2(perturbation_interval=0)
    with pytest.raises(ValueError, match=r"PB2 needs metric and mode"):
        PB2(hyperparam_bounds={"x": [0, 1]}).set_search_properties(None, None)
    with pytest.raises(ValueError, match=r"mode='best'"):
        pb2(mode="best")


def test_import_is_lazy_and_a_missing_sklearn_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = (
        "import sys, tunefleet, tunefleet.schedulers\n"
        "from tunefleet.schedulers import PB2\n"
        "assert 'sklearn' not in sys.modules and 'numpy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.gaussian_process", None)
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[pb2\]'"):
        pb2()


# -- what it chooses ---------------------------------------------------------------------------
def test_exploit_keeps_other_keys_types_and_nesting() -> None:
    s = pb2(
        hyperparam_bounds={"opt": {"lr": [0.0, 1.0]}, "layers": [1, 8]},
        custom_explore_fn=lambda c: {**c, "tag": "explored"},
    )
    config = {"opt": {"lr": 0.0, "mom": 0.9}, "layers": 2, "name": "a"}
    trials = [make_trial(i, config | {"opt": {"lr": i / 4, "mom": 0.9}}) for i in range(4)]
    for t in trials:
        s.on_trial_add(t)
    exploit = None
    for it in (1, 2):
        for i, t in enumerate(trials):
            d = s.on_trial_result(t, {"training_iteration": it, "score": float(i * it)})
            exploit = d if isinstance(d, Exploit) else exploit
    assert isinstance(exploit, Exploit) and exploit.source_trial_id == "t3"
    new = exploit.new_config
    assert 0.0 <= new["opt"]["lr"] <= 1.0 and new["opt"]["mom"] == 0.9
    assert isinstance(new["layers"], int) and 1 <= new["layers"] <= 8
    assert new["name"] == "a" and new["tag"] == "explored"
    assert trials[3].config["opt"]["lr"] == 0.75  # the source's config is not modified


def test_the_gp_finds_the_best_region() -> None:
    s = pb2(seed=3)
    pop = Population(s, [i / 11 for i in range(12)])
    for _ in range(30):
        pop.step()
    chosen = [d.new_config["x"] for d in pop.decisions[-120:] if isinstance(d, Exploit)]
    assert chosen and all(math.isfinite(x) for x in chosen)
    assert abs(sorted(chosen)[len(chosen) // 2] - 0.7) < 0.15  # the median choice
    assert sum(rate(t.config["x"]) for t in pop.trials) / 12 > 0.9  # was 0.39 at the start


def test_synchronous_rounds_exploit_the_bottom_half_with_the_gp() -> None:
    s = pb2(synch=True, quantile_fraction=0.5, seed=1)
    pop = Population(s, [i / 9 for i in range(10)])
    for it in range(1, 7):  # boundaries at 2, 4, 6: resume everyone at each
        for t in pop.trials:
            t.status = TrialStatus.RUNNING
        pop.step()
        if it % 2 == 0:
            for t in pop.trials:
                t.status, t.stop_reason = TrialStatus.PAUSED, PAUSED_BY_SCHEDULER
            pool = Candidates(pop.trials, starved=True)
            exploits = []
            while (chosen := s.choose_trial_to_run(pool)) is not None:
                pool.discard(chosen.trial_id)
                if (e := s.exploit_on_resume(chosen)) is not None:
                    exploits.append(e.new_config["x"])
                    pop.progress[chosen.trial_id] = pop.progress[e.source_trial_id]
                    chosen.config = e.new_config
            assert len(exploits) == 5  # the bottom half, all at once
            if it == 6:
                assert all(abs(x - 0.7) < 0.2 for x in exploits), exploits
    assert all(d in (Decision.CONTINUE, Decision.PAUSE) for d in pop.decisions)


def test_choices_of_one_round_lower_the_uncertainty_where_they_are() -> None:
    s = pb2()
    xs = [i * 0.05 for i in range(9)]  # data on [0, 0.4] only, rising
    s.set_state(
        s.get_state()
        | {"pb2": {"data": [[2 + 2 * (i % 2), 0.5, math.sin(3 * x), x] for i, x in enumerate(xs)]}}
    )
    at = [4.0, 0.5, [0.1]]
    first = s._select(at, random.Random(0))
    second = s._select(at, random.Random(0))  # the same candidates: only the batch differs
    assert 0.4 < first[0] <= 1.0  # beyond the data, where it is uncertain and rising
    assert second != first


def test_nan_results_are_not_learnt_from() -> None:
    s = pb2()
    pop = Population(s, [0.1, 0.4, 0.6, 0.9])
    for it in range(12):
        pop.step(nan_for="t2" if it % 3 == 0 else None)
    state = s.get_state()
    assert state["pb2"]["data"] and all(
        math.isfinite(v) for row in state["pb2"]["data"] for v in row
    )
    assert any(isinstance(d, Exploit) for d in pop.decisions)


def test_kernel_gradient_matches_finite_differences() -> None:
    import numpy as np

    kernel = _kernel_class()(length_scale=np.array([0.5, 2.0]), epsilon=0.2)
    x = np.random.default_rng(0).random((6, 3)) * [5.0, 1.0, 1.0]
    k, grad = kernel(x, eval_gradient=True)
    assert np.allclose(k, k.T) and np.allclose(np.diag(k), 1.0)
    for i, theta in enumerate(kernel.theta):
        shifted = kernel.theta.copy()
        shifted[i] = theta + 1e-6
        numeric = (kernel.clone_with_theta(shifted)(x) - k) / 1e-6
        assert np.allclose(numeric, grad[..., i], atol=1e-5)


def test_an_explore_is_fast_with_many_data_points() -> None:
    s = pb2(hyperparam_bounds={"x": [0.0, 1.0], "y": [0.0, 1.0], "z": [-1.0, 1.0]}, seed=5)
    pop = Population(s, [i / 15 for i in range(16)], extra={"y": 0.5, "z": 0.0})
    for _ in range(30):
        pop.step()
    assert len(s.get_state()["pb2"]["data"]) == MAX_DATA_POINTS  # more were recorded
    timings = []
    for i in range(5):
        s._fitted_on = -1  # a new fit each time, as after a new data point
        started = time.perf_counter()
        s._explore_for("t0", "t15", random.Random(i))
        timings.append(time.perf_counter() - started)
    assert sorted(timings)[2] < 0.2  # ~20-40 ms here; a loose bound for slow machines


# -- state -------------------------------------------------------------------------------------
class Twin:
    """Calls a scheduler and its restored copy alike; their answers must be equal."""

    def __init__(self, s: PB2, factory: Any) -> None:
        self.s = s
        self.copy = factory()
        self.copy.set_state(json.loads(json.dumps(s.get_state())))

    def on_trial_add(self, trial: Trial) -> None:
        self.s.on_trial_add(trial)
        self.copy.on_trial_add(trial)

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Any:
        out = self.s.on_trial_result(trial, result)
        assert out == self.copy.on_trial_result(trial, result)
        return out


def test_state_round_trip_gives_identical_decisions() -> None:
    def factory() -> PB2:
        return pb2(seed=99)  # the seed is in the state

    pop = Population(pb2(seed=11), [i / 7 for i in range(8)])
    for _ in range(8):
        pop.step()
    twin = Twin(pop.s, factory)
    pop.s = twin  # type: ignore[assignment]
    before = len(pop.decisions)
    for _ in range(8):
        pop.step()
    assert any(isinstance(d, Exploit) for d in pop.decisions[before:])
    assert json.dumps(twin.s.get_state()) == json.dumps(twin.copy.get_state())


def test_synchronous_state_round_trip_gives_identical_decisions() -> None:
    def factory() -> PB2:
        return pb2(synch=True, perturbation_interval=3, seed=11)

    sim = PopulationSim(factory, n=6, slots=3, seed=2, horizon=16)
    sim.run(restore_at=70)
    check_population(sim)
    assert sim.shadow is not None and len(sim.exploits) >= 4
    assert json.dumps(sim.sched.get_state()) == json.dumps(sim.shadow.get_state())


# -- end to end ---------------------------------------------------------------------------------
def growing(config: dict[str, Any]) -> None:
    """A trainable whose score grows by rate(x) per iteration, checkpointed each one.

    After its first report, a first attempt waits (an event, at most 120 s) until every
    trial of the population has reported once, so the whole population is known to the
    scheduler at the first perturbation, however busy the machine.
    """
    score, start = 0.0, 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            score, start = json.loads(Path(d, "s.json").read_text())
    for it in range(start + 1, 13):
        score += rate(config["x"])
        with tempfile.TemporaryDirectory() as d:
            Path(d, "s.json").write_text(json.dumps([score, it]))
            tune.report({"score": score}, checkpoint=tune.Checkpoint.from_directory(d))
        if it == 1 and start == 0:
            meet(config, config["x"])


def test_pb2_end_to_end_with_real_processes(storage: str, tmp_path: Path) -> None:
    grid = tune.Tuner(
        tune.with_resources(growing, {"cpu": 0.5}),  # all four at once
        param_space={"x": tune.grid_search([0.0, 0.1, 0.3, 0.5]), **meeting(tmp_path, 4)},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=pb2(perturbation_interval=3, metric=None, mode=None),
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    with StoreReader(grid.experiment_path) as reader:
        exploits = reader.events(kinds="exploit")
    assert exploits, "no trial exploited another"
    for e in exploits:
        assert 0.0 <= e["data"]["new_config"]["x"] <= 1.0
        assert e["data"]["source"] != e["trial_id"]
    best = grid.get_best_result()
    schedule = pbt_schedule(grid.experiment_path, metrics_of(best)["trial_id"], "x")
    assert schedule[0]["from_iteration"] == 0 and schedule[-1]["to_iteration"] == 12


@pytest.mark.parametrize("synch", [False, True])
def test_pb2_improves_the_population_on_the_simulated_backend(tmp_path: Path, synch: bool) -> None:
    def model(config: dict[str, Any], budget: int) -> dict[str, float]:
        return {"score": budget * rate(config["x"])}

    start = [0.02 * i for i in range(8)]  # all far from the best x = 0.7
    sim = SimulatedTrainable(model, cost=10.0, max_budget=40, workers=4, overhead_scale=0)
    grid = tune.Tuner(
        sim,
        param_space={"x": tune.grid_search(start)},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=pb2(perturbation_interval=4, synch=synch, seed=7, metric=None, mode=None),
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            verbose=0,
            # async: a checkpoint at each step to copy; synch: each pause writes one
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0 if synch else 4),
        ),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 8
    # the rate of the configs that produced the last results, against the start's
    final = [metrics_of(r)["score"] / metrics_of(r)["training_iteration"] for r in grid]
    before = sum(rate(x) for x in start) / len(start)
    assert sum(final) / len(final) > before + 0.5, (before, final)
    assert max(final) > 0.95 > max(rate(x) for x in start)
