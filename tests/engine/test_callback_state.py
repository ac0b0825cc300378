"""Callbacks' `get_state`/`set_state` are kept with the experiment (as JSON, never a
pickle) and given back by `Tuner.restore`, also in a new driver process (Ray Tune
keeps them in its experiment checkpoint)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.paths import REPO

DRIVER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {repo!r})
    import tunefleet as tune

    class Counting(tune.Callback):
        def __init__(self, fail_at=None):
            self.seen, self.fail_at, self.given, self.this_run = 0, fail_at, None, 0

        def on_trial_result(self, iteration, trials, trial, result):
            self.seen += 1
            self.this_run += 1
            if self.seen == self.fail_at:
                raise RuntimeError("injected driver failure")

        def get_state(self):
            return {{"seen": self.seen}}

        def set_state(self, state):
            self.given = dict(state)
            self.seen = state["seen"]

    def train(config):
        for i in range(3):
            tune.report({{"score": i}})

    if __name__ == "__main__":
        storage, mode = sys.argv[1], sys.argv[2]
        if mode == "first":
            tune.Tuner(
                train,
                param_space={{"x": tune.grid_search([1, 2])}},
                tune_config=tune.TuneConfig(max_concurrent_trials=1),
                run_config=tune.RunConfig(
                    storage_path=storage, name="cb", verbose=0, callbacks=[Counting(fail_at=4)]
                ),
            ).fit()
        else:
            counting = Counting()
            tune.Tuner.restore(
                storage + "/cb", train, run_config=tune.RunConfig(callbacks=[counting], verbose=0)
            ).fit()
            print("STATE", json.dumps([counting.given, counting.seen, counting.this_run]))
    """
)


def _drive(tmp_path: Path, storage: str, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    return subprocess.run(
        [sys.executable, str(script), storage, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_callbacks_state_is_restored_in_a_new_driver(tmp_path: Path) -> None:
    storage = str(tmp_path / "storage")
    first = _drive(tmp_path, storage, "first")
    assert first.returncode != 0 and "injected driver failure" in first.stderr
    second = _drive(tmp_path, storage, "restore")
    assert second.returncode == 0, second.stdout + second.stderr
    line = next(x for x in second.stdout.splitlines() if x.startswith("STATE "))
    given, seen, this_run = json.loads(line.removeprefix("STATE "))
    assert given == {"seen": 4}  # what the first driver's callback had seen when it stopped
    assert this_run > 0 and seen == 4 + this_run


class Holds(tune.Callback):
    def __init__(self, state: Any) -> None:
        self.state = state

    def get_state(self) -> dict[str, Any] | None:
        return self.state  # type: ignore[no-any-return]


class Other(tune.Callback):
    pass


def reports(config: dict[str, Any]) -> None:
    tune.report({"score": 1})


def test_a_state_that_is_not_json_is_refused_naming_the_callback(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"callback Holds \(RunConfig.callbacks\[1\]\)"):
        tune.Tuner(
            reports,
            run_config=tune.RunConfig(
                storage_path=str(tmp_path),
                verbose=0,
                callbacks=[Other(), Holds({"seen": {1, 2}})],  # a set is not JSON
            ),
        ).fit()


def test_a_state_whose_callback_is_gone_is_left_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tune.RunConfig(
        storage_path=str(tmp_path), name="gone", verbose=0, callbacks=[Holds({"n": 1})]
    )
    tune.Tuner(reports, run_config=run).fit()
    with caplog.at_level(logging.WARNING, logger="tunefleet"):
        tune.Tuner.restore(
            str(tmp_path / "gone"),
            reports,
            run_config=tune.RunConfig(callbacks=[Other()], verbose=0),
        ).fit()
    assert "saved the state of callback Holds (RunConfig.callbacks[0])" in caplog.text
    assert "has Other there" in caplog.text
