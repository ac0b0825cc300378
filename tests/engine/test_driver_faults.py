"""User code that raises in the driver, fail_fast and SIGTERM leave the trials that did
not finish PAUSED, never TERMINATED, and `Tuner.restore` completes them with every
iteration recorded once (issue 16, defects 2, 3 and the first half of 5).

Real local-backend trials. Two long trials each touch ``reached/<x>`` before reporting
iteration `_AT`, then wait for the ``raised`` file, so both are surely running when
the driver fails; a short third trial ends once both have arrived (so a searcher's
`on_trial_complete` and a fourth `suggest` come while the long ones run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.paths import REPO
from tests.helpers.scripts import script_env
from tunefleet.results import ExperimentAnalysis, ResultGrid
from tunefleet.stoppers import Stopper

pytestmark = pytest.mark.timeout(300)  # a guard against a hang; every wait is on an event

_ITERATIONS = 5
_AT = 2  # the long trials wait after reporting this iteration until the driver failed
_WAIT_S = 120.0  # a safety net only: every wait ends on an event


def _wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + _WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def stepping(config: dict[str, Any]) -> None:
    """Checkpoints every iteration and resumes from it; see the module's docstring."""
    folder = Path(config["dir"])
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "i").read_text())
    short = config["x"] == 0
    if short:  # ends once both long trials are running, at their iteration _AT
        _wait_for(lambda: len(os.listdir(folder / "reached")) >= 2, "the long trials")
    for i in range(start + 1, (1 if short else _ITERATIONS) + 1):
        if i == _AT and not short:
            (folder / "reached" / str(config["x"])).touch()
        with tempfile.TemporaryDirectory() as d:
            Path(d, "i").write_text(str(i))
            tune.report({"loss": float(i), "i": i}, checkpoint=tune.Checkpoint.from_directory(d))
        if i == _AT and not short:
            _wait_for(lambda: (folder / "raised").exists(), "the driver to fail")


# three trials at once, also on a machine with two cores
SMALL = tune.with_resources(stepping, {"cpu": 0.5})


class Injected(RuntimeError):
    pass


def _fail_here(folder: Path, kind: str, hook: str) -> None:
    """Raise (once per experiment) from user code `hook`, if `kind` names it and the long
    trials are both waiting."""
    if kind != hook or (folder / "raised").exists():
        return
    if len(os.listdir(folder / "reached")) < 2:
        return
    (folder / "raised").touch()
    raise Injected(f"injected in {hook}")


class Script(tune.search.Searcher):
    """Proposes the short trial (x=0) and two long ones (x=1, 2), then no more."""

    def __init__(self, folder: Path, kind: str) -> None:
        super().__init__(metric="loss", mode="min")
        self.folder, self.kind, self.given = folder, kind, 0

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.given == 3:
            _fail_here(self.folder, self.kind, "suggest")
            return None if not (self.folder / "raised").exists() else tune.search.FINISHED
        self.given += 1
        return {"x": self.given % 3, "dir": str(self.folder)}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        _fail_here(self.folder, self.kind, "on_trial_result")

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        _fail_here(self.folder, self.kind, "on_trial_complete")

    def get_state(self) -> dict[str, Any]:
        return {"given": self.given}

    def set_state(self, state: dict[str, Any]) -> None:
        self.given = state["given"]


class Stopping(Stopper):
    def __init__(self, folder: Path, kind: str) -> None:
        self.folder, self.kind = folder, kind

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        _fail_here(self.folder, self.kind, "stopper_call")
        return False

    def stop_all(self) -> bool:
        _fail_here(self.folder, self.kind, "stop_all")
        return False


class Watching(tune.Callback):
    def __init__(self, folder: Path, kind: str) -> None:
        self.folder, self.kind = folder, kind

    def on_trial_result(
        self, iteration: int, trials: Any, trial: Any, result: Any, **info: Any
    ) -> None:
        _fail_here(self.folder, self.kind, "callback")


def _configs(folder: Path, kind: str, storage: str) -> tuple[tune.TuneConfig, tune.RunConfig]:
    tune_config = tune.TuneConfig(
        search_alg=Script(folder, kind), num_samples=4, max_concurrent_trials=3
    )
    run_config = tune.RunConfig(
        storage_path=storage,
        name="exp",
        verbose=0,
        stop=Stopping(folder, kind),
        callbacks=[Watching(folder, kind)],
    )
    return tune_config, run_config


def _assert_resumes_once_each(path: str, folder: Path, kind: str, storage: str) -> None:
    """Restore completes every trial; each iteration of each is recorded exactly once."""
    tune_config, run_config = _configs(folder, kind, storage)
    grid = tune.Tuner.restore(path, SMALL, tune_config=tune_config, run_config=run_config).fit()
    assert len(grid) == 3 and grid.num_errors == 0
    for result in grid:
        wanted = list(range(1, (1 if result.config["x"] == 0 else _ITERATIONS) + 1))
        assert list(result.metrics_dataframe["training_iteration"]) == wanted, result.config
        assert list(result.metrics_dataframe["i"]) == wanted, result.config


def _statuses(path: str) -> dict[int, str]:
    """Each trial's status as the store has it (read, not run)."""
    return {r.config["x"]: r.status for r in ResultGrid(ExperimentAnalysis(path))}


_KINDS = ["stopper_call", "stop_all", "suggest", "on_trial_result", "on_trial_complete", "callback"]


@pytest.mark.parametrize("kind", _KINDS)
def test_user_code_raising_in_the_driver_leaves_trials_resumable(
    kind: str, tmp_path: Path, storage: str
) -> None:
    folder = tmp_path / "run"
    (folder / "reached").mkdir(parents=True)
    tune_config, run_config = _configs(folder, kind, storage)
    with pytest.raises(Injected, match=f"injected in {kind}") as raised:
        tune.Tuner(SMALL, tune_config=tune_config, run_config=run_config).fit()
    frames = [f.name for f in traceback.extract_tb(raised.value.__traceback__)]
    assert "_fail_here" in frames  # the original exception, with the user's frame
    path = str(Path(storage, "exp"))
    statuses = _statuses(path)
    assert statuses[1] == statuses[2] == "PAUSED", statuses
    _assert_resumes_once_each(path, folder, kind, storage)


def failing(config: dict[str, Any]) -> None:
    """x=0 raises once the sibling (x=1) is surely running; the sibling waits (for the
    ``raised`` file the test writes after the first run) until it is stopped."""
    folder = Path(config["dir"])
    if config["x"] == 0:
        _wait_for(lambda: any((folder / "reached").iterdir()), "the sibling")
        raise ValueError("bad learning rate")
    stepping({**config, "x": 1})


@pytest.mark.parametrize("fail_fast", [True, "raise"])
def test_fail_fast_leaves_running_siblings_paused(
    fail_fast: bool | str, tmp_path: Path, storage: str
) -> None:
    folder = tmp_path / "run"
    (folder / "reached").mkdir(parents=True)
    space = {"x": tune.grid_search([0, 1]), "dir": str(folder)}
    failures = tune.FailureConfig(fail_fast=fail_fast)
    run_config = tune.RunConfig(
        storage_path=storage, name="exp", verbose=0, failure_config=failures
    )
    tuner = tune.Tuner(failing, param_space=space, run_config=run_config)
    if fail_fast == "raise":
        with pytest.raises(ValueError, match="bad learning rate"):
            tuner.fit()
    else:
        tuner.fit()
    (folder / "raised").touch()
    path = str(Path(storage, "exp"))
    assert _statuses(path) == {0: "ERROR", 1: "PAUSED"}
    grid = tune.Tuner.restore(path, failing).fit()
    by_x = {r.config["x"]: r for r in grid}
    assert by_x[0].status == "ERROR"
    assert by_x[1].status == "TERMINATED"
    history = list(by_x[1].metrics_dataframe["training_iteration"])
    assert history == list(range(1, _ITERATIONS + 1))


DRIVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tunefleet as tune
    from tests.engine.test_driver_faults import stepping

    storage, folder = sys.argv[1], sys.argv[2]
    try:
        tune.Tuner(
            stepping,
            param_space={{"x": tune.grid_search([1, 2]), "dir": folder}},
            run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=1),
        ).fit()
    finally:
        open(folder + "/finally-ran", "w").close()
    """
)


@pytest.mark.parametrize(
    "again", [None, signal.SIGTERM, signal.SIGINT], ids=["once", "term", "int"]
)
def test_sigterm_winds_down_like_ctrl_c_and_exits_143(
    again: signal.Signals | None, tmp_path: Path, storage: str
) -> None:
    """The first SIGTERM winds down (trials PAUSED, store closed, `finally` blocks run),
    then the driver exits with 143; a second SIGTERM or SIGINT during the wind-down (the
    trials wait, so it lasts until they are killed) kills them at once."""
    folder = tmp_path / "run"
    (folder / "reached").mkdir(parents=True)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    driver = subprocess.Popen(
        [sys.executable, str(script), storage, str(folder)],
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(
            lambda: driver.poll() is not None or len(os.listdir(folder / "reached")) >= 2,
            "both trials to report",
        )
        assert driver.poll() is None, driver.communicate()[0]
        driver.send_signal(signal.SIGTERM)
        lines = []
        if again is not None:
            assert driver.stdout is not None
            for line in driver.stdout:  # the wind-down has begun: signal again
                lines.append(line)
                if "Interrupted: stopping the running trials" in line:
                    driver.send_signal(again)
                    break
        output = "".join(lines) + driver.communicate(timeout=_WAIT_S)[0]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 143, output
    assert ("Interrupted again: killing the trials now" in output) == (again is not None)
    assert (folder / "finally-ran").exists()
    (folder / "raised").touch()
    path = str(Path(storage, "exp"))
    assert set(_statuses(path).values()) == {"PAUSED"}
    grid = tune.Tuner.restore(path, stepping).fit()
    for result in grid:
        assert result.status == "TERMINATED"
        history = list(result.metrics_dataframe["training_iteration"])
        assert history == list(range(1, _ITERATIONS + 1))
