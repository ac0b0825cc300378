"""Ctrl-C pressed again and again: once the wind-down has begun no press prints a raw
KeyboardInterrupt traceback, and `fit()` (or `tune.run()`) returns the results it has.

The presses are real SIGINTs, sent by the driver process to itself at the moment under
test (from a callback, or just before the results are read back), so each test hits
its moment every time instead of racing the driver.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.scripts import script_env
from tunefleet.store import StoreReader

_WAIT_S = 50

DRIVER = textwrap.dedent(
    """
    import os, signal, sys, time
    import tunefleet as tune
    import tunefleet.results

    storage, where, presses, api = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    def press(n):
        for _ in range(n):
            os.kill(os.getpid(), signal.SIGINT)

    def deaf(config):
        tune.report({"loss": 1.0})
        time.sleep(600)  # never hears the polite stop: the second press kills it

    class Presses(tune.Callback):
        def __init__(self):
            self.reported = set()

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.reported.add(trial.trial_id)
            if len(self.reported) == 2 and where != "never":
                self.reported.add("pressed")
                press(2)  # the first winds down, the second kills the trials

        def on_experiment_end(self, trials, **info):
            if where == "experiment_end":
                press(presses)

    if where == "results":  # a press while fit() reads the results back
        init = tunefleet.results.ExperimentAnalysis.__init__

        def pressed_init(self, *args, **kwargs):
            press(presses)
            init(self, *args, **kwargs)

        tunefleet.results.ExperimentAnalysis.__init__ = pressed_init

    if api == "tuner":
        results = tune.Tuner(
            deaf,
            param_space={"x": tune.grid_search([1, 2])},
            tune_config=tune.TuneConfig(metric="loss", mode="min"),
            run_config=tune.RunConfig(
                name="presses", storage_path=storage, callbacks=[Presses()], verbose=1
            ),
        ).fit()
    else:
        results = tune.run(
            deaf,
            config={"x": tune.grid_search([1, 2])},
            name="presses",
            storage_path=storage,
            callbacks=[Presses()],
            verbose=1,
        )
    print("FIT RETURNED", len(results.trials if api == "run" else results), flush=True)
    """
)


def _drive(tmp_path: Path, storage: str, where: str, presses: int, api: str) -> tuple[int, str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.run(
        [sys.executable, str(script), storage, where, str(presses), api],
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=_WAIT_S,
        check=False,
    )
    return proc.returncode, proc.stdout


def _statuses(storage: str) -> list[str]:
    with StoreReader(Path(storage, "presses")) as reader:
        return sorted(t.status.value for t in reader.trials())


@pytest.mark.parametrize(
    ("where", "presses", "api"),
    [
        ("experiment_end", 2, "tuner"),  # presses 3 and 4, while the run saves its state
        ("results", 2, "tuner"),  # presses 3 and 4, while fit() reads the results back
        ("results", 1, "run"),  # the same with tune.run()
    ],
)
def test_presses_after_the_wind_down_began_never_raise(
    where: str, presses: int, api: str, tmp_path: Path, storage: str
) -> None:
    code, output = _drive(tmp_path, storage, where, presses, api)
    assert code == 0, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "Interrupted again: killing the trials now" in output
    assert "FIT RETURNED 2" in output
    assert _statuses(storage) == ["PAUSED", "PAUSED"]


def test_the_fifth_press_exits_at_once_keeping_what_was_saved(tmp_path: Path, storage: str) -> None:
    code, output = _drive(tmp_path, storage, "experiment_end", 3, "tuner")
    assert code == 130, output
    assert "Interrupted 5 times: exiting now" in output
    assert "Traceback" not in output and "FIT RETURNED" not in output, output
    assert _statuses(storage) == ["PAUSED", "PAUSED"]


def test_a_run_without_presses_ends_normally_with_the_handlers_restored(
    tmp_path: Path, storage: str
) -> None:
    """The counting scope ends with fit(): the script's own Ctrl-C behaves as before."""
    script = tmp_path / "after.py"
    script.write_text(
        textwrap.dedent(
            """
            import signal, sys
            import tunefleet as tune

            # Python's own handler, even where SIGINT came ignored (a background job)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            before = signal.getsignal(signal.SIGINT)
            tune.Tuner(
                lambda config: {"loss": 1.0},
                tune_config=tune.TuneConfig(metric="loss", mode="min"),
                run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
            ).fit()
            assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                print("RAISED AS USUAL")
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script), storage],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=_WAIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RAISED AS USUAL" in proc.stdout
