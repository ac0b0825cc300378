"""The examples of the guide (docs/examples.md) run for real and print what they claim.

Examples without torch run in this process through their ``main(argv)`` (their return
value is checked); those with torch, and the one whose driver is killed, run as real
subprocesses and their output is checked.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tests.helpers.paths import EXAMPLES, REPO
from tests.helpers.scripts import run_script, script_env
from tunefleet.store import StoreReader

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed (tunefleet[torch])"
)


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(args: list[str], timeout: float) -> str:
    return run_script(args, REPO, timeout).stdout


def line_with(prefix: str, out: str) -> str:
    found = [line for line in out.splitlines() if line.startswith(prefix)]
    assert found, f"no line starting with {prefix!r} in:\n{out[-4000:]}"
    return found[-1]


# -- 2. resources ------------------------------------------------------------------------
def test_resources_packs_two_trials_per_gpu_and_stops_the_one_over_its_memory(
    storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    outcome = load_example("resources").main(
        ["--smoke", "--simulate-gpus", "1", "--storage-path", storage]
    )
    out = capsys.readouterr().out
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before, "main() leaked its simulated GPUs"
    assert out.count("gpu 0.5 on device 0") == 4
    # Two halves share the one device at a time; never three (CPUs would allow four).
    assert outcome["sharing"] == {"0": 2}
    memory = outcome["memory"]
    assert memory["small-a"] == "finished" and memory["small-b"] == "finished"
    assert memory["grows"].startswith("OOM"), memory["grows"]
    assert "ran out of memory" in memory["grows"] and "limit 256 MiB" in memory["grows"]
    assert "   grows: OOM" in out


# -- 3. LSTM search ------------------------------------------------------------------------
def check_reloaded(out: str) -> None:
    stored = line_with("Stored val_rmse at epoch ", out).rsplit(" ", 1)[1]
    reloaded = line_with("Reloaded from ", out).rsplit(" ", 1)[1]
    assert float(stored) > 0 and reloaded == stored, (stored, reloaded)


@needs_torch
@pytest.mark.timeout(120)
def test_lstm_search_tpe_asha_stops_early_and_reloads_the_best(storage: str) -> None:
    out = run_example(
        [str(EXAMPLES / "lstm_search.py"), "--smoke", "--storage-path", storage], timeout=110
    )
    assert "Search: tpe, scheduler: asha, 4 trials" in out
    early = re.search(r"Stopped early: (\d+) of 4 trials", out)
    assert early and int(early.group(1)) >= 1, "ASHA stopped no trial"
    check_reloaded(out)
    assert "4 TERMINATED" in out


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_lstm_search_bayesopt_without_scheduler(storage: str) -> None:
    out = run_example(
        [
            str(EXAMPLES / "lstm_search.py"),
            *("--smoke", "--search", "bo", "--scheduler", "none", "--storage-path", storage),
        ],
        timeout=110,
    )
    assert "Search: bo, scheduler: none, 4 trials" in out
    assert "Stopped early: 0 of 4 trials" in out  # FIFO and 4 epochs < the plateau's grace
    check_reloaded(out)


# -- 4. a class Trainable resumed after SIGKILL of its driver ---------------------------------
def workers_of(experiment: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(experiment) in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def snapshot(experiment: Path) -> dict[str, tuple[tune.TrialStatus, list[dict[str, Any]]]]:
    with StoreReader(experiment) as reader:
        return {t.trial_id: (t.status, reader.results(t.trial_id)) for t in reader.trials()}


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_trainable_digits_resumes_after_the_driver_is_killed(storage: str) -> None:
    experiment = Path(storage, "trainable_digits")
    script = str(EXAMPLES / "trainable_digits.py")
    driver = subprocess.Popen(
        [sys.executable, script, "--smoke", "--storage-path", storage],
        cwd=REPO,
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Kill it once a trial has finished and another has results: whenever that is,
        # even between a trial's last result and its end, the resumed run must be exact.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and driver.poll() is None:
            if (experiment / "experiment.db").exists():
                seen = snapshot(experiment)
                done = [t for t, (s, _) in seen.items() if s is tune.TrialStatus.TERMINATED]
                running = [len(rs) for s, rs in seen.values() if s is tune.TrialStatus.RUNNING]
                if done and running and max(running) >= 2:
                    break
            time.sleep(0.05)
        assert driver.poll() is None, "the run ended (or failed) before it could be killed"
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 15  # the workers notice their driver is gone
    while workers_of(experiment) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers_of(experiment), "workers outlived their killed driver"

    before = snapshot(experiment)
    finished = {t: rs for t, (s, rs) in before.items() if s is tune.TrialStatus.TERMINATED}
    interrupted = {t: rs for t, (s, rs) in before.items() if s is not tune.TrialStatus.TERMINATED}
    assert finished and any(len(rs) >= 2 for rs in interrupted.values())
    assert tune.Tuner.can_restore(experiment)

    out = run_example([script, "--smoke", "--resume", "--storage-path", storage], timeout=110)
    assert f"Resuming {experiment}" in out and "Trials: 4, errors: 0" in out
    after = snapshot(experiment)
    assert {s for s, _ in after.values()} == {tune.TrialStatus.TERMINATED}
    for trial_id, (_, results) in after.items():
        iterations = [r["training_iteration"] for r in results]
        assert iterations == list(range(1, 11)), (trial_id, iterations)
        # The trainable's own epoch counter comes from its checkpoint: it never restarted.
        assert [r["epoch"] for r in results] == iterations, trial_id
    for trial_id, results in finished.items():
        assert after[trial_id][1] == results, f"finished trial {trial_id} was run again"
    for trial_id, results in interrupted.items():
        # It had a checkpoint before its latest result and steps left (with all 10 in,
        # it only lacked its end, and is ended without running again).
        if 2 <= len(results) < 10:
            resumed = {r["resumed_from"] for r in after[trial_id][1]} - {0}
            assert resumed and min(resumed) >= 1, f"{trial_id} did not continue from a checkpoint"


# -- 5. ASHA vs random; PBT learning a schedule ------------------------------------------------
def test_asha_vs_random_same_trials_fewer_epochs(
    storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = load_example("asha_vs_random").main(["--smoke", "--storage-path", storage])
    out = capsys.readouterr().out
    fifo, asha = runs["fifo"], runs["asha"]
    assert fifo["trials"] == asha["trials"] == 12
    assert fifo["stopped_early"] == 0 and fifo["total_epochs"] == 12 * 30
    assert asha["stopped_early"] >= 1 and asha["total_epochs"] < fifo["total_epochs"]
    for r in (fifo, asha):
        assert r["seconds_to_target"] is not None and r["best_loss"] <= 0.1, r
        assert 1 <= r["epochs_to_target"] <= r["total_epochs"]
    assert re.search(r"^ASHA .* \d+/12$", out, re.MULTILINE), out
    assert "time to target" in out


def test_pbt_learns_a_schedule_that_replays_to_its_loss(
    storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    found = load_example("pbt_schedule").main(["--smoke", "--storage-path", storage])
    out = capsys.readouterr().out
    assert found["errors"] == 0
    schedule = found["schedule"]
    assert schedule[0]["from_iteration"] == 0 and schedule[-1]["to_iteration"] == 40
    for a, b in itertools.pairwise(schedule):
        assert a["to_iteration"] == b["from_iteration"], schedule  # contiguous
    assert len({seg["value"] for seg in schedule}) >= 2, "the learning rate never changed"
    # The schedule read from the store is the one the best model was really trained with.
    assert found["replayed_loss"] == pytest.approx(found["best_loss"], rel=1e-9)
    assert out.count("  iterations ") == len(schedule)
