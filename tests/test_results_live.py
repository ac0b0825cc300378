"""The results `Tuner.fit()` / `tune.run()` return hold the trials' own configs and last
results (objects, as Ray Tune's); read from disk they are the store's JSON. What the
store hides stays hidden in both."""

from __future__ import annotations

import fractions
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import tunefleet as tune
from tunefleet._analysis import shown
from tunefleet._redact import Secret
from tunefleet.results import ResultGrid
from tunefleet.store import StoreReader


class Pair(NamedTuple):
    a: int
    b: int


def train_fn(config: dict[str, Any]) -> None:
    tune.report(
        {
            "loss": float(config["lr"]),
            "ratio": fractions.Fraction(1, 3),  # an object: pickled to the driver as it is
            "shape": (2, 3),
            "token_seen": config["hf_token"] == "hf_secret_value",
        }
    )


SPACE: dict[str, Any] = {
    "lr": tune.grid_search([0.1, 0.2]),
    "pair": (1, 2),
    "hf_token": Secret("hf_secret_value"),
    "api_key": "sk-plain-secret",
    "db": "mysql://bob:hunter22@db/x",
}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[tune.Tuner, ResultGrid]:
    storage = tmp_path_factory.mktemp("live")
    tuner = tune.Tuner(
        train_fn,
        param_space=SPACE,
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name="live", storage_path=str(storage), verbose=0),
    )
    return tuner, tuner.fit()


def test_fit_results_hold_the_trials_objects(fitted: tuple[tune.Tuner, ResultGrid]) -> None:
    _, grid = fitted
    best = grid.get_best_result()
    assert best.metrics["token_seen"] is True  # the trial got the plain secret
    assert best.metrics["ratio"] == fractions.Fraction(1, 3)
    assert best.metrics["shape"] == (2, 3)
    assert best.config["pair"] == (1, 2) and best.config["lr"] == 0.1
    assert isinstance(best.config["hf_token"], Secret)  # kept: it prints as ***
    assert best.config["hf_token"].get_secret_value() == "hf_secret_value"
    assert best.config["api_key"] == "***"  # hidden as in the store (docs/security.md)
    assert best.config["db"] == "mysql://bob:***@db/x"
    assert "hf_secret_value" not in repr(grid) and "hunter22" not in repr(grid)
    assert best.metrics["config"] is best.config


def test_get_results_after_fit_is_the_same_view(fitted: tuple[tune.Tuner, ResultGrid]) -> None:
    tuner, grid = fitted
    again = tuner.get_results()
    assert [r.config["pair"] for r in again] == [(1, 2), (1, 2)]
    assert again[0].metrics["ratio"] == grid[0].metrics["ratio"]


def test_read_from_disk_the_results_are_json(fitted: tuple[tune.Tuner, ResultGrid]) -> None:
    _, grid = fitted
    disk = ResultGrid(grid.experiment_path)
    result = disk.get_best_result()
    assert result.config["pair"] == [1, 2] and result.config["hf_token"] == "***"
    assert result.metrics["ratio"] == "1/3" and result.metrics["shape"] == [2, 3]
    assert result.config["api_key"] == "***"
    with StoreReader(grid.experiment_path) as reader:  # the config is not in stored rows
        rows = [row for rows in reader.all_results().values() for row in rows]
    assert rows and all("config" not in row for row in rows)


def test_tune_run_analysis_holds_the_trials_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunefleet import _analysis

    reads: list[str] = []  # the experiment's trials are read from the store once, not twice
    real_init = _analysis.ExperimentAnalysis.__init__

    def counted(self: _analysis.ExperimentAnalysis, path: Any, *args: Any, **kwargs: Any) -> None:
        reads.append(str(path))
        real_init(self, path, *args, **kwargs)

    monkeypatch.setattr(_analysis.ExperimentAnalysis, "__init__", counted)
    analysis = tune.run(
        train_fn,
        config={**SPACE, "lr": 0.3},
        metric="loss",
        mode="min",
        storage_path=str(tmp_path),
        verbose=0,
    )
    trial = analysis.trials[0]
    assert trial.config["pair"] == (1, 2) and isinstance(trial.config["hf_token"], Secret)
    assert trial.last_result["ratio"] == fractions.Fraction(1, 3)
    assert trial.last_result["config"] is trial.config
    assert analysis.best_result == trial.last_result
    assert analysis.results[trial.trial_id]["shape"] == (2, 3)
    assert analysis.best_config is not None and analysis.best_config["api_key"] == "***"
    assert len(reads) == 1, reads


def test_shown_copies_nothing_without_secrets_and_keeps_types() -> None:
    config = {"a": (1, [2, 3]), "b": Pair(1, 2), "c": {"d": "text"}, "e": fractions.Fraction(1)}
    assert shown(config) is config
    secret = Secret("s3cr3t-value")
    mixed: dict[str, Any] = {
        "keep": secret,
        "pair": Pair(1, 2),
        "urls": ("http://u:pw12345@h/", "plain"),
    }
    out = shown(mixed)
    assert out is not mixed and mixed["urls"][0] == "http://u:pw12345@h/"  # not changed
    assert out["keep"] is secret and out["pair"] is mixed["pair"]
    assert out["urls"] == ("http://u:***@h/", "plain")
    assert shown({"password": ["a-long-one", 3]}) == {"password": ["***", 3]}
    assert shown([Pair(1, 2)])[0] == Pair(1, 2)


class Records(tune.Callback):
    """Keeps the run's own trial records, as the controller hands them to callbacks."""

    def __init__(self) -> None:
        self.trials: dict[str, Any] = {}

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.trials[trial.trial_id] = trial


def test_fit_results_are_the_run_records_unless_something_is_hidden(tmp_path: Path) -> None:
    # issue 18: no second copy of each trial at the end of fit() (100,000 trials: ~80 MB)
    def plain(config: dict[str, Any]) -> None:
        tune.report({"loss": config["lr"]})

    records = Records()
    grid = tune.Tuner(
        plain,
        param_space={"lr": tune.grid_search([0.1, 0.2]), "pair": (1, 2)},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[records]),
    ).fit()
    trials = grid._analysis.trials
    assert [t.trial_id for t in trials] == sorted(records.trials)
    assert all(t is records.trials[t.trial_id] for t in trials)  # the records themselves
    assert grid[0].config["pair"] == (1, 2)  # as the trial had it, not JSON's list
    # a config with something the store hides: a copy with it hidden; the record is intact
    records = Records()
    grid = tune.Tuner(
        plain,
        param_space={"lr": 0.1, "api_key": "sk-plain-secret"},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[records]),
    ).fit()
    (trial,) = grid._analysis.trials
    assert trial is not records.trials[trial.trial_id]
    assert trial.config["api_key"] == "***"
    assert records.trials[trial.trial_id].config["api_key"] == "sk-plain-secret"
