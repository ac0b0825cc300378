"""Workers forked from the zygote (`backends/local/_zygote.py`): where they come from,
what they are given, their exit codes, and what happens when the zygote is gone.

Real processes throughout: the zygote, its forks, a driver killed by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tests.helpers.scripts import script_env
from tunefleet.backends.local._zygote import START_ENV, wanted

pytestmark = pytest.mark.skipif(not wanted(), reason="workers are forked on Linux only")


def _parent(config: dict[str, Any]) -> dict[str, Any]:
    """Who made this worker, what it was given, and which modules it had at birth."""
    parent = psutil.Process(os.getppid())
    return {
        "pid": os.getpid(),
        "parent_cmdline": " ".join(parent.cmdline()),
        "parent_pid": parent.pid,
        "env": os.environ.get("TUNEFLEET_ZYGOTE_TEST"),
        "driver_pid": config["driver_pid"],
        "ancestors": [p.pid for p in psutil.Process().parents()],
        "session_leader": os.getsid(0) == os.getpid(),
    }


class _Fresh(tune.Trainable):
    """A class trainable: a worker per trial by default (reuse_actors off, as in Ray)."""

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.facts = _parent(config)
        if config.get("kill_parent"):  # the zygote, if this worker was forked
            zygote = os.getppid()
            os.kill(zygote, signal.SIGKILL)
            while os.getppid() == zygote:  # until this orphan is re-parented: an event
                time.sleep(0.01)

    def step(self) -> dict[str, Any]:
        return {"score": 1.0, "done": True, **self.facts}


def _fit(storage: str, trials: int, **space: Any) -> tune.ResultGrid:
    return tune.Tuner(
        _Fresh,
        param_space={"driver_pid": os.getpid(), **space},
        tune_config=tune.TuneConfig(num_samples=trials, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()


def test_each_trial_gets_a_worker_forked_from_the_zygote(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_ZYGOTE_TEST", "seen")
    grid = _fit(storage, 3)
    assert not grid.errors, grid.errors
    facts = [r.metrics for r in grid]
    assert len({f["pid"] for f in facts}) == 3, "a fresh worker for each trial"
    for f in facts:
        assert "--zygote" in f["parent_cmdline"], f  # the old code: the driver is the parent
        assert ".tunefleet/trainable.pkl" in f["parent_cmdline"], f
        assert f["ancestors"][1] == os.getpid(), "the zygote is the driver's child"
        assert f["env"] == "seen" and f["session_leader"], f
    assert len({f["parent_pid"] for f in facts}) == 1, "one zygote for the experiment"


def test_spawn_starts_each_worker_as_a_fresh_interpreter(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(START_ENV, "spawn")
    grid = _fit(storage, 2)
    assert not grid.errors, grid.errors
    for result in grid:
        assert result.metrics["parent_pid"] == os.getpid(), result.metrics
        assert "--zygote" not in result.metrics["parent_cmdline"]


def test_a_bad_start_method_is_named(storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(START_ENV, "forkserver")
    with pytest.raises(ValueError, match=r"TUNEFLEET_WORKER_START='forkserver' is not valid"):
        _fit(storage, 1)


def _exit_with(config: dict[str, Any]) -> None:
    tune.report({"score": 1.0})
    if config["how"] == "code":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize(
    ("how", "said"),
    [("code", "exited with code 3"), ("signal", "killed by SIGKILL")],
)
def test_a_forked_workers_exit_code_reaches_the_failure(storage: str, how: str, said: str) -> None:
    grid = tune.Tuner(
        _exit_with,
        param_space={"how": how},
        tune_config=tune.TuneConfig(reuse_actors=False),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    (result,) = list(grid)
    assert result.error is not None
    assert said in str(result.error), result.error


def test_trials_go_on_when_the_zygote_dies(storage: str) -> None:
    """The second trial kills the zygote: later workers are started as interpreters, and
    every trial, the one whose parent died included, ends well."""
    grid = tune.Tuner(
        _Fresh,
        param_space={
            "driver_pid": os.getpid(),
            "kill_parent": tune.grid_search([False, True, False, False]),
        },
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert not grid.errors, grid.errors
    facts = [r.metrics for r in grid]
    forked = [f for f in facts if "--zygote" in f["parent_cmdline"]]
    started = [f for f in facts if f["parent_pid"] == os.getpid()]
    assert len(forked) == 2 and len(started) == 2, [f["parent_cmdline"] for f in facts]


_DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import tunefleet as tune

    def wait(config):
        open(config["ready"], "w").close()
        while True:
            time.sleep(60)

    tune.Tuner(
        wait,
        param_space={"ready": sys.argv[2]},
        run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
    ).fit()
    """
)


def test_the_zygote_and_its_workers_die_with_the_driver(tmp_path: Path) -> None:
    script, ready = tmp_path / "driver.py", tmp_path / "ready"
    script.write_text(_DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "results"), str(ready)],
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while not ready.exists():  # the trial's first line: an event, not a delay
            assert driver.poll() is None, driver.communicate()[1].decode()[-3000:]
            psutil.wait_procs([psutil.Process(driver.pid)], timeout=0.05)
        family = psutil.Process(driver.pid).children(recursive=True)
        zygotes = [p for p in psutil.Process(driver.pid).children() if "--zygote" in p.cmdline()]
        assert len(zygotes) == 1 and zygotes[0].children(), [p.cmdline() for p in family]
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        _, alive = psutil.wait_procs(family, timeout=60)
        assert not alive, [p.pid for p in alive]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if driver.stderr is not None:
            driver.stderr.close()


def _environment(config: dict[str, Any]) -> None:
    tune.report(
        {
            "gone": os.environ.get("TUNEFLEET_ZYGOTE_GONE"),
            "late": os.environ.get("TUNEFLEET_ZYGOTE_LATE"),
            "parent": " ".join(psutil.Process(os.getppid()).cmdline()),
        }
    )


class _ChangeTheEnvironment(tune.Callback):
    """After the first trial started, the driver's environment changes."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        os.environ.pop("TUNEFLEET_ZYGOTE_GONE", None)
        os.environ["TUNEFLEET_ZYGOTE_LATE"] = "set"


def test_a_forked_worker_has_the_drivers_environment_of_its_start(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_ZYGOTE_GONE", "here")
    monkeypatch.delenv("TUNEFLEET_ZYGOTE_LATE", raising=False)
    grid = tune.Tuner(
        _environment,
        param_space={"i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=False),
        run_config=tune.RunConfig(
            storage_path=storage, verbose=0, callbacks=[_ChangeTheEnvironment()]
        ),
    ).fit()
    assert not grid.errors, grid.errors
    seen = {r.config["i"]: r.metrics for r in grid}
    assert (seen[0]["gone"], seen[0]["late"]) == ("here", None), seen[0]
    assert (seen[1]["gone"], seen[1]["late"]) == (None, "set"), seen[1]  # not the zygote's
    assert all("--zygote" in m["parent"] for m in seen.values()), seen
