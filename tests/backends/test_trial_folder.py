"""Each trial runs in its own folder and writes its output where `log_to_file` says.

A worker runs trial after trial: the working directory it started in is back after
every trial, whether the trial returned, raised or was stopped.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.config import LOG_FILES, chdir_to_trial_dir, trial_log_files
from tunefleet.trial import Trial


def where(config: dict[str, Any]) -> None:
    Path("mine.txt").write_text(str(config["i"]))
    tune.report(
        {
            "cwd": os.getcwd(),
            "orig": os.environ.get("TUNE_ORIG_WORKING_DIR", ""),
            "pid": os.getpid(),
        }
    )
    if config["i"] == 1:
        raise RuntimeError("after its report")
    print("bye", file=sys.stderr)


def run(storage: str, name: str, **run: Any) -> tune.ResultGrid:
    return tune.Tuner(
        where,
        param_space={"i": tune.grid_search([0, 1, 2, 3])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=True),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, **run),
    ).fit()


def test_trials_of_one_worker_each_run_in_their_folder_and_the_cwd_comes_back(
    tmp_path: Path,
) -> None:
    grid = run(str(tmp_path), "chdir")
    results = sorted(grid, key=lambda r: r.config["i"])
    assert len({r.metrics["pid"] for r in results}) == 1  # one reused worker
    for r in results:
        assert r.metrics["cwd"] == r.path
        assert r.metrics["orig"] == os.getcwd()  # each trial, after a failed one too
        assert Path(r.path, "mine.txt").read_text() == str(r.config["i"])
    assert results[1].error is not None
    assert not Path("mine.txt").exists()


def test_the_opt_out_keeps_the_worker_s_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_CHDIR_TO_TRIAL_DIR", "0")
    monkeypatch.chdir(tmp_path)
    grid = run(str(tmp_path / "results"), "stay")
    assert {r.metrics["cwd"] for r in grid} == {str(tmp_path)}
    assert {r.metrics["orig"] for r in grid} == {""}  # set only when it changes


def test_a_failure_shows_the_tail_of_the_named_stderr_file(tmp_path: Path) -> None:
    grid = run(str(tmp_path), "logs", log_to_file=("out.txt", "logs/err.txt"))
    failed = next(r for r in grid if r.error is not None)
    assert sorted(os.listdir(failed.path)) == ["logs", "mine.txt", "out.txt"]
    ok = next(r for r in grid if r.config["i"] == 0)
    assert Path(ok.path, "logs", "err.txt").read_text() == "bye\n"


def test_log_to_file_values() -> None:
    assert trial_log_files(True) == trial_log_files(False) == LOG_FILES
    assert trial_log_files("both.log") == ("both.log", "both.log")
    assert trial_log_files(["o", Path("e")]) == ("o", "e")
    for bad in (None, 1, ("a",), ("a", "b", "c"), ("a", ""), {"a": 1}):
        with pytest.raises(ValueError, match=r"RunConfig.log_to_file=.* pair of file names"):
            trial_log_files(bad, "RunConfig.log_to_file")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, True),
        ({"RAY_CHDIR_TO_TRIAL_DIR": "0"}, False),
        ({"TUNEFLEET_CHDIR_TO_TRIAL_DIR": "0"}, False),
        ({"RAY_CHDIR_TO_TRIAL_DIR": "1"}, True),
    ],
)
def test_chdir_switches(
    env: dict[str, str], expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RAY_CHDIR_TO_TRIAL_DIR", "TUNEFLEET_CHDIR_TO_TRIAL_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert chdir_to_trial_dir() is expected


def test_tune_run_refuses_a_chdir_value_that_is_not_a_bool() -> None:
    with pytest.raises(ValueError, match=r"chdir_to_trial_dir='x'.*RAY_CHDIR_TO_TRIAL_DIR=0"):
        tune.run(where, config={"i": 0}, verbose=0, chdir_to_trial_dir="x")  # type: ignore[arg-type]


def test_trials_hash_by_id_and_keep_their_equality() -> None:
    a = Trial(trial_id="t1", index=0, name="n", config={}, resources={}, path="/p")
    b = dataclasses.replace(a)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    b.num_results = 3
    assert a != b and len({a, b}) == 2  # equal hashes, different trials


# -- who makes the folder: the driver when a callback may use it, else the worker --------------
class _SeesFolders(tune.Callback):
    def __init__(self) -> None:
        self.existed: list[bool] = []

    def on_trial_start(self, iteration: int, trials: Any, trial: Trial, **info: Any) -> None:
        self.existed.append(os.path.isdir(trial.path))


def test_a_trials_folder_exists_when_on_trial_start_runs(tmp_path: Path) -> None:
    seen = _SeesFolders()
    grid = tune.Tuner(
        where,
        param_space={"i": tune.grid_search([0, 2])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[seen]),
    ).fit()
    assert grid.num_errors == 0
    assert seen.existed == [True, True]


def test_without_callbacks_the_worker_makes_it_and_the_trial_runs_there(tmp_path: Path) -> None:
    # no callback: the driver leaves the mkdir (0.1-0.3 ms of its CPU) to the worker
    grid = run(str(tmp_path), "by-worker")
    for result in grid:
        assert os.path.isdir(result.path) and result.metrics["cwd"] == result.path


def test_a_trial_that_never_reached_a_worker_has_its_folder(tmp_path: Path) -> None:
    import threading

    grid = tune.Tuner(
        where,
        param_space={"i": 0, "lock": tune.sample_from(lambda spec: threading.Lock())},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 1 and "cannot be sent" in str(grid[0].error)
    assert os.path.isdir(grid[0].path)


def test_a_backend_without_workers_gets_the_folders_from_the_driver(tmp_path: Path) -> None:
    from tunefleet.backends.simulated import SimulatedTrainable

    sim = SimulatedTrainable(lambda config, budget: {"loss": 1.0 / budget}, max_budget=3)
    grid = tune.Tuner(
        sim,
        param_space={"x": tune.grid_search([1, 2])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    assert all(os.path.isdir(r.path) for r in grid)
