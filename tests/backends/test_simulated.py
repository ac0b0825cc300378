"""The simulated backend: blackbox trials on a virtual clock, through `Tuner.fit()`."""

from __future__ import annotations

import os
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.backends.simulated import SimulatedBackend, SimulatedTrainable
from tunefleet.schedulers import Candidates, TrialScheduler
from tunefleet.search import BasicVariantGenerator, Searcher
from tunefleet.store._reader import StoreReader
from tunefleet.trial import Trial, TrialStatus


def curve(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


def fit(tmp_path: Any, sim: SimulatedTrainable, **kwargs: Any) -> tune.ResultGrid:
    param_space = kwargs.pop("param_space", {"x": tune.uniform(0, 1)})
    stop = kwargs.pop("stop", None)
    tune_config = tune.TuneConfig(metric="loss", mode="min", **kwargs)
    run_config = tune.RunConfig(storage_path=str(tmp_path), stop=stop, verbose=0)
    return tune.Tuner(
        sim, param_space=param_space, tune_config=tune_config, run_config=run_config
    ).fit()


def histories(results: tune.ResultGrid) -> dict[str, list[dict[Hashable, Any]]]:
    return {r.trial_id: r.metrics_dataframe.to_dict("records") for r in results}


def test_two_weeks_of_tuning_in_seconds(tmp_path: Any) -> None:
    # overhead_scale=0: the virtual clock is exact whatever the machine's load (how fast
    # it runs in real time is a benchmark's figure: benchmarks/scale.py)
    sim = SimulatedTrainable(curve, cost=60.0, max_budget=100, workers=4, overhead_scale=0)
    results = fit(tmp_path, sim, num_samples=200)
    assert len(results) == 200 and not results.errors
    df = results.get_dataframe()
    assert (df["training_iteration"] == 100).all()
    assert df["time_total_s"].min() == pytest.approx(6000.0)
    # 200 x 100 x 60 s on 4 workers
    assert df["timestamp"].max() == pytest.approx(300_000.0, abs=1.0)
    best = results.get_best_result()
    assert abs(best.config["x"] - 0.3) < 0.05
    assert all(r.status == "TERMINATED" for r in results)


def test_stop_dict_and_metric_stop(tmp_path: Any) -> None:
    sim = SimulatedTrainable(curve, cost=5.0, max_budget=100, workers=2)
    results = fit(tmp_path / "a", sim, num_samples=4, stop={"training_iteration": 7})
    for history in histories(results).values():
        assert [h["training_iteration"] for h in history] == list(range(1, 8))
    # acc >= 0.75 from budget 4: a metric stop, checked by the trial itself
    sim = SimulatedTrainable(lambda c, b: {"loss": 1.0 / b, "acc": 1 - 1.0 / b}, workers=2)
    results = fit(tmp_path / "b", sim, num_samples=3, stop={"acc": 0.75})
    assert [len(h) for h in histories(results).values()] == [4, 4, 4]


def test_time_budget_is_virtual(tmp_path: Any) -> None:
    sim = SimulatedTrainable(curve, cost=60.0, max_budget=1000, workers=2, overhead_scale=0)
    results = fit(tmp_path, sim, num_samples=10, time_budget_s=3600.0)  # a virtual hour
    df = results.get_dataframe()
    assert df["timestamp"].max() <= 3600.0 + 1.0
    ran = [r for r in results if r.metrics]  # {} when the trial reported nothing
    assert len(ran) == 2  # two workers, nobody reached 1000 steps
    for r in ran:
        assert r.status == "TERMINATED"
        assert 58 <= metrics_of(r)["training_iteration"] <= 60
        assert metrics_of(r)["time_total_s"] <= 3600.0 + 1.0


def test_stragglers_finish_later(tmp_path: Any) -> None:
    def cost(config: dict[str, Any], budget: int) -> float:
        return 10.0 if config["slow"] else 1.0

    sim = SimulatedTrainable(
        lambda c, b: {"loss": float(b)}, cost=cost, max_budget=20, workers=4, overhead_scale=0
    )
    results = fit(tmp_path, sim, param_space={"slow": tune.grid_search([True, False])})
    end = {r.config["slow"]: metrics_of(r) for r in results}
    assert end[False]["time_total_s"] == pytest.approx(20.0)
    assert end[True]["time_total_s"] == pytest.approx(200.0)
    assert end[True]["timestamp"] > end[False]["timestamp"]


class PauseOnceAt3(TrialScheduler):
    """Pauses every trial once at budget 3, then resumes it (paused trials first)."""

    needs_sync_decisions = True

    def __init__(self) -> None:
        super().__init__()
        self.paused: set[str] = set()

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Any:
        if result["training_iteration"] == 3 and trial.trial_id not in self.paused:
            self.paused.add(trial.trial_id)
            return self.PAUSE
        return self.CONTINUE

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        paused = [t for t in candidates if t.status is TrialStatus.PAUSED]
        return paused[0] if paused else super().choose_trial_to_run(candidates)


def test_scheduler_pause_and_resume_with_sync_decisions(tmp_path: Any) -> None:
    scheduler = PauseOnceAt3()
    sim = SimulatedTrainable(curve, cost=2.0, max_budget=6, workers=2, overhead_scale=0)
    results = fit(tmp_path, sim, num_samples=4, scheduler=scheduler)
    assert len(scheduler.paused) == 4 and not results.errors
    for r in results:
        assert r.status == "TERMINATED"
        history = r.metrics_dataframe.to_dict("records")
        assert [h["training_iteration"] for h in history] == [1, 2, 3, 4, 5, 6]
        assert [h["iterations_since_restore"] for h in history] == [1, 2, 3, 1, 2, 3]
        # resumed from its pause checkpoint: time_total_s continues, timestamps jump
        assert history[3]["time_total_s"] == pytest.approx(history[2]["time_total_s"] + 2.0)
        assert history[-1]["time_total_s"] == pytest.approx(12.0)
    with StoreReader(results.experiment_path) as reader:
        assert len(reader.events(kinds="paused")) == 4
        assert not reader.events(kinds="checkpoint_invalid")
        assert not reader.events(kinds="rewound")


class SlowSearcher(Searcher):
    """Suggests x = 0.1, 0.2, ... and takes 0.05 s (real time) for each."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def set_search_properties(
        self,
        metric: str | list[str] | None,
        mode: str | list[str] | None,
        config: dict[str, Any],
        **spec: Any,
    ) -> bool:
        # It takes the space (its own suggestions cover it): as in Ray, a searcher that
        # answers False while param_space has domains is refused.
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        time.sleep(0.05)
        self.count += 1
        return {"x": self.count / 10}


@pytest.mark.parametrize("scale", [0.0, 1.0, 10.0])
def test_decision_time_is_added_to_the_clock(tmp_path: Any, scale: float) -> None:
    sim = SimulatedTrainable(curve, cost=1.0, max_budget=2, workers=1, overhead_scale=scale)
    results = fit(tmp_path, sim, num_samples=4, search_alg=SlowSearcher())
    end = results.get_dataframe()["timestamp"].max()
    # one worker: each start waits for its suggest
    assert end >= 8.0 + 4 * 0.05 * scale
    if scale == 0.0:
        assert end == pytest.approx(8.0)


class CutAt3(TrialScheduler):
    """Stops a trial at budget 3 unless it beats the median seen there so far (order matters)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[float] = []

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Any:
        if result["training_iteration"] != 3:
            return self.CONTINUE
        loss = result["loss"]
        self.seen.append(loss)
        median = sorted(self.seen)[len(self.seen) // 2]
        return self.CONTINUE if loss <= median else self.STOP


def test_same_seed_same_results(tmp_path: Any) -> None:
    def noisy_cost(config: dict[str, Any], budget: int) -> float:
        x: float = config["x"]
        return 1.0 + 3.0 * x

    def run(where: str) -> dict[str, list[dict[Hashable, Any]]]:
        sim = SimulatedTrainable(curve, cost=noisy_cost, max_budget=27, workers=3, overhead_scale=0)
        results = fit(
            tmp_path / where,
            sim,
            num_samples=30,
            search_alg=BasicVariantGenerator(seed=7),
            scheduler=CutAt3(),
        )
        by_config: dict[str, list[dict[Hashable, Any]]] = {}
        for r in results:
            by_config[repr(r.config)] = [
                {k: v for k, v in h.items() if k not in ("trial_id", "date")}
                for h in r.metrics_dataframe.to_dict("records")
            ]
        return by_config

    first, second = run("a"), run("b")
    assert first == second
    lengths = sorted(len(h) for h in first.values())
    assert lengths[0] == 3 and lengths[-1] == 27  # some stopped early


def test_blackbox_error_fails_the_trial(tmp_path: Any) -> None:
    def broken(config: dict[str, Any], budget: int) -> dict[str, float]:
        if budget == 3:
            raise RuntimeError("diverged")
        return {"loss": 1.0}

    sim = SimulatedTrainable(broken, cost=1.0, max_budget=5)
    results = fit(tmp_path, sim, num_samples=1)
    assert len(results.errors) == 1
    (r,) = list(results)
    assert r.status == "ERROR" and "diverged" in str(r.error)


def test_a_trial_needs_an_end(tmp_path: Any) -> None:
    sim = SimulatedTrainable(curve)  # no max_budget, stop or time budget
    with pytest.raises(ValueError, match="needs an end"):
        fit(tmp_path, sim, num_samples=1)


def test_argument_errors_are_loud() -> None:
    with pytest.raises(ValueError, match="cost=-1"):
        SimulatedTrainable(curve, cost=-1)
    with pytest.raises(ValueError, match="workers=0"):
        SimulatedTrainable(curve, workers=0)
    with pytest.raises(ValueError, match="max_budget=0"):
        SimulatedTrainable(curve, max_budget=0)
    backend = SimulatedBackend(
        SimulatedTrainable(curve, workers=3, max_budget=5), resources={"cpu": 2.0}
    )
    assert backend.capacity() == {"cpu": 6.0}
    assert backend.poll(0.5) == [] and backend.clock() >= 0.5  # idle: time passes


def test_checkpoints_are_tiny_real_folders_with_retention(tmp_path: Any) -> None:
    sim = SimulatedTrainable(curve, cost=1.0, max_budget=9, workers=2, overhead_scale=0)
    results = tune.Tuner(
        sim,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", num_samples=2, scheduler=PauseOnceAt3()
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1, checkpoint_frequency=2),
        ),
    ).fit()
    assert not results.errors
    for r in results:
        assert [h["training_iteration"] for h in r.metrics_dataframe.to_dict("records")] == list(
            range(1, 10)
        )
        assert r.checkpoint is not None and r.checkpoint.path.endswith("checkpoint_000008")
        folders = os.listdir(os.path.join(r.path, "checkpoints"))
        assert folders == ["checkpoint_000008"]  # retention deleted the older ones


def test_a_trial_stopped_by_the_budget_before_reporting_is_not_an_error(tmp_path: Path) -> None:
    sim = SimulatedTrainable(
        lambda c, b: {"loss": float(b)}, cost=4.0, max_budget=2, workers=1, overhead_scale=0
    )
    grid = tune.Tuner(
        sim,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=-1, time_budget_s=10.0),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    assert len(grid) >= 2 and grid.num_terminated == len(grid)


def lr_curve(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": abs(config["lr"] - 0.01 * 0.9**budget) + 1.0 / budget}


@pytest.mark.parametrize("seed", [8, 9])  # seeds that lost a checkpoint before the fix
def test_pbt_exploits_with_tight_retention_never_lose_a_checkpoint(
    tmp_path: Path, seed: int
) -> None:
    # Exploits copy checkpoints under names retention drops and reuses; no trial may
    # run past max_budget after being exploited at its last step (one ran to 61 of 60
    # with these seeds, before results at max_budget were marked done).
    from tunefleet.schedulers import PopulationBasedTraining

    sim = SimulatedTrainable(lr_curve, cost=1.0, max_budget=60, workers=16, overhead_scale=0)
    results = tune.Tuner(
        sim,
        param_space={"lr": tune.loguniform(1e-4, 1e-1)},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=16,
            search_alg=BasicVariantGenerator(seed=seed),
            scheduler=PopulationBasedTraining(
                time_attr="training_iteration",
                perturbation_interval=4,
                hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1)},
                seed=seed,
            ),
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2, checkpoint_frequency=4),
        ),
    ).fit()
    assert not results.errors, results.errors[0]
    events = StoreReader(results.experiment_path).events()
    assert sum(e["kind"] == "exploit" for e in events) >= 5
    for r in results:
        # (a trial that cloned a finished source at 60 has nothing left to run: it ends
        # with its own last result, before 60)
        assert max(h["training_iteration"] for h in r.metrics_dataframe.to_dict("records")) <= 60
        assert r.status == "TERMINATED"
        for checkpoint, _ in r.best_checkpoints:
            assert os.path.isdir(checkpoint.path), checkpoint.path
