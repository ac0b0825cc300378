"""Resume after Ctrl-C, after SIGKILL of the driver at random moments, and what it refuses.

Drivers run as real subprocesses that the tests interrupt or SIGKILL; their
workers must die with them (a watchdog in each worker), which is checked by
looking for any process still holding the experiment's trainable file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tests.helpers.paths import REPO
from tests.helpers.results import metrics_of
from tests.helpers.resume_trainables import ITERATIONS, Stepper, counting
from tunefleet.store import StoreReader
from tunefleet.store._check import CorruptStoreError, DriverLock

DRIVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tunefleet as tune
    from tests.helpers.resume_trainables import counting

    if __name__ == "__main__":
        tune.run(
            counting,
            config={{"x": tune.uniform(0, 1), "pause": float(sys.argv[2])}},
            num_samples=4,
            max_concurrent_trials=2,
            metric="score",
            mode="max",
            storage_path=sys.argv[1],
            name="exp",
            resume="AUTO",
            keep_checkpoints_num=2,
            verbose=1,
        )
        print("DRIVER DONE", flush=True)
    """
)


def start_driver(storage: str, tmp_path: Path, pause: float = 0.03) -> subprocess.Popen[str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    return subprocess.Popen(
        [sys.executable, str(script), storage, str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def workers_of(experiment: Path) -> list[psutil.Process]:
    """Worker processes of this experiment, wherever they were re-parented."""
    marker = str(experiment)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_gone(experiment: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := workers_of(experiment)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in left:
        proc.kill()
    assert not left, f"workers outlived their driver: {[p.pid for p in left]}"


def assert_each_iteration_once(experiment: Path, trials: int) -> None:
    with StoreReader(experiment) as reader:
        found = reader.trials()
        assert len(found) == trials, "the searcher suggested more or fewer trials"
        assert {t.status for t in found} == {tune.TrialStatus.TERMINATED}
        configs = {t.config["x"] for t in found}
        assert len(configs) == trials, "a configuration was suggested twice"
        for trial in found:
            iterations = [r["training_iteration"] for r in reader.results(trial.trial_id)]
            assert iterations == list(range(1, ITERATIONS + 1)), (trial.trial_id, iterations)
            assert [r["i"] for r in reader.results(trial.trial_id)] == iterations


def results_recorded(experiment: Path) -> int:
    if not (experiment / "experiment.db").exists():
        return 0
    with StoreReader(experiment) as reader:
        return sum(t.num_results for t in reader.trials())


@pytest.mark.timeout(600)  # a guard against a hang; the loop below waits on progress only
def test_driver_sigkilled_at_random_moments_resumes_to_an_exact_end(
    storage: str, tmp_path: Path
) -> None:
    experiment = Path(storage, "exp")
    rng = random.Random(int(os.environ.get("TUNEFLEET_CHAOS_SEED", "0")) or None)
    kills, runs = 0, 0
    while True:
        runs += 1
        assert runs <= 4 * ITERATIONS, "a run of the driver recorded no new result"
        # The moment is random in progress, not in wall time, so a busy machine (a slow
        # start) cannot starve the run: a few more results, then a random instant.
        target = results_recorded(experiment) + rng.randint(1, 6)
        driver = start_driver(storage, tmp_path, pause=0.06)
        while driver.poll() is None and results_recorded(experiment) < target:
            time.sleep(0.02)
        if driver.poll() is None:
            time.sleep(rng.uniform(0.0, 0.3))  # mid-report, mid-checkpoint or mid-commit
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver, at a random moment
            driver.communicate()
            kills += 1
            wait_gone(experiment)
            continue
        out, _ = driver.communicate()
        assert driver.returncode == 0, out
        assert "DRIVER DONE" in out
        break
    assert kills >= 2, "the run ended before two kills; the test proved little"
    print(f"finished after {kills} SIGKILLs of the driver")
    wait_gone(experiment)
    assert_each_iteration_once(experiment, trials=4)
    with StoreReader(experiment) as reader:
        assert reader.meta()["status"] == "finished"


def test_ctrl_c_then_restore_continues_from_checkpoints(storage: str, tmp_path: Path) -> None:
    driver = start_driver(storage, tmp_path)
    experiment = Path(storage, "exp")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (experiment / "experiment.db").exists():
            with StoreReader(experiment) as reader:
                if sum(t.num_results for t in reader.trials()) >= 10:
                    break
        time.sleep(0.1)
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=60)
    assert driver.returncode == 0, out
    with StoreReader(experiment) as reader:
        paused = [t for t in reader.trials() if t.status is tune.TrialStatus.PAUSED]
    assert paused, "Ctrl-C should leave the running trials PAUSED"
    assert tune.Tuner.can_restore(str(experiment))
    grid = tune.Tuner.restore(str(experiment), counting).fit()
    assert grid.num_terminated == 4 and grid.num_errors == 0
    assert_each_iteration_once(experiment, trials=4)
    with StoreReader(experiment) as reader:
        kinds = [e["kind"] for t in paused for e in reader.events(t.trial_id)]
    assert "resume" in kinds


def short_run(storage: str, **config: Any) -> str:
    grid = tune.Tuner(
        counting,
        param_space={"x": tune.grid_search([1.0, 2.0]), "iterations": 3, "pause": 0, **config},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name="short", storage_path=storage, verbose=0),
    ).fit()
    return grid.experiment_path


def test_errored_trials_rerun_only_when_asked(storage: str, tmp_path: Path) -> None:
    flag = str(tmp_path / "failed-once")
    path = short_run(storage, fail_flag=flag, fail_at=1)
    with StoreReader(path) as reader:
        assert sorted(t.status.value for t in reader.trials()) == ["ERROR", "TERMINATED"]
    # plain resume: nothing to do, the failed trial stays failed
    assert tune.Tuner.restore(path, counting).fit().num_errors == 1
    # resume_errored: from its checkpoint after iteration 1
    grid = tune.Tuner.restore(path, counting, resume_errored=True).fit()
    assert grid.num_errors == 0
    with StoreReader(path) as reader:
        for trial in reader.trials():
            assert [r["training_iteration"] for r in reader.results(trial.trial_id)] == [1, 2, 3]
        assert reader.trials()[0].attempt + reader.trials()[1].attempt == 1


def test_restart_errored_starts_from_scratch(storage: str, tmp_path: Path) -> None:
    flag = str(tmp_path / "failed-once")
    path = short_run(storage, fail_flag=flag, fail_at=2)
    grid = tune.Tuner.restore(path, counting, restart_errored=True).fit()
    assert grid.num_errors == 0
    with StoreReader(path) as reader:
        for trial in reader.trials():
            assert [r["training_iteration"] for r in reader.results(trial.trial_id)] == [1, 2, 3]
            kinds = [e["kind"] for e in reader.events(trial.trial_id)]
            if "failed" in kinds:
                assert kinds.count("rewound") == 1


def test_a_changed_search_space_is_refused_unless_forced(storage: str) -> None:
    path = short_run(storage)
    changed = {"x": tune.grid_search([1.0, 3.0]), "iterations": 3, "pause": 0}
    with pytest.raises(ValueError, match=r"param_space differs(.|\n)*\+.*3\.0"):
        tune.Tuner.restore(path, counting, param_space=changed)
    tune.Tuner.restore(path, counting, param_space=changed, force=True)  # accepted
    with pytest.raises(ValueError, match=r"run_config.stop differs"):
        tune.Tuner.restore(
            path, counting, run_config=tune.RunConfig(stop={"training_iteration": 2})
        )


def test_what_the_store_cannot_hold_must_be_passed_again(storage: str) -> None:
    grid = tune.Tuner(
        counting,
        param_space={"x": tune.sample_from(lambda spec: 1.0), "iterations": 1, "pause": 0},
        run_config=tune.RunConfig(
            name="fn", storage_path=storage, verbose=0, stop=lambda trial_id, result: False
        ),
    ).fit()
    with pytest.raises(ValueError, match=r"param_space\['x'\] is a sample_from function"):
        tune.Tuner.restore(grid.experiment_path, counting)
    again = {"x": tune.sample_from(lambda spec: 1.0), "iterations": 1, "pause": 0}
    with pytest.raises(ValueError, match=r"stop function or Stopper"):
        tune.Tuner.restore(grid.experiment_path, counting, param_space=again)
    tune.Tuner.restore(
        grid.experiment_path,
        counting,
        param_space=again,
        run_config=tune.RunConfig(stop=lambda trial_id, result: False),
    )


def test_a_corrupt_store_is_reported_and_left_untouched(storage: str) -> None:
    path = short_run(storage)
    db = Path(path, "experiment.db")
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the header's tail and the first page
    db.write_bytes(bytes(data))
    before = db.read_bytes()
    with pytest.raises(CorruptStoreError, match=r"experiment.db is damaged.*byte offset"):
        tune.Tuner.restore(path, counting)
    assert db.read_bytes() == before
    Path(path, "experiment.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(CorruptStoreError, match=r"at byte offset 0"):
        tune.Tuner.restore(path, counting)


def test_a_second_driver_is_refused(storage: str) -> None:
    path = short_run(storage)
    with DriverLock(path), pytest.raises(RuntimeError, match=r"is being run by process \d+"):
        tune.Tuner.restore(path, counting, resume_errored=True).fit()


def test_cli_resume(storage: str, tmp_path: Path) -> None:
    flag = str(tmp_path / "failed-once")
    path = short_run(storage, fail_flag=flag, fail_at=1)
    script = tmp_path / "train.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from tests.helpers.resume_trainables import counting\n"
        "if __name__ == '__main__':\n    raise SystemExit('must not run')\n"
    )
    cli = [sys.executable, "-m", "tunefleet", "resume", path, "--script", str(script)]
    done = subprocess.run(
        [*cli, "--resume-errored"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with StoreReader(path) as reader:
        assert {t.status for t in reader.trials()} == {tune.TrialStatus.TERMINATED}
    bad = subprocess.run(
        [*cli, "--trainable", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "defines no 'nope'" in bad.stderr and "counting" in bad.stderr


def test_resumed_trials_get_their_redacted_secrets_back(storage: str, tmp_path: Path) -> None:
    from tests.helpers.resume_trainables import needs_secrets

    def space() -> dict[str, Any]:
        return {
            "api_key": "CANARY-AK-1",
            "db_url": "postgresql://u:CANARY-PW-2@localhost/db",
            "token": tune.Secret("CANARY-TOK-3"),
            "flag": str(tmp_path / "failed-once"),
        }

    grid = tune.Tuner(
        needs_secrets,
        param_space=space(),
        run_config=tune.RunConfig(name="sec", storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 1
    assert b"CANARY" not in Path(grid.experiment_path, "experiment.db").read_bytes()
    with pytest.raises(ValueError, match=r"redacted as a secret.*pass the search space again"):
        tune.Tuner.restore(grid.experiment_path, needs_secrets, resume_errored=True)
    again = tune.Tuner.restore(
        grid.experiment_path, needs_secrets, param_space=space(), resume_errored=True
    ).fit()
    assert again.num_errors == 0
    assert metrics_of(again[0])["score"] == 2.0


def test_a_budget_may_grow_on_resume(storage: str) -> None:
    path = short_run(storage)  # grid of 2, num_samples=1
    grid = tune.Tuner.restore(
        path, counting, tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=2)
    ).fit()
    assert len(grid) == 4 and grid.num_terminated == 4
    assert sorted(r.config["x"] for r in grid) == [1.0, 1.0, 2.0, 2.0]


def test_an_experiment_without_resume_data_is_never_reused_or_deleted(storage: str) -> None:
    from tunefleet.store import ExperimentStore

    old = Path(storage, "short")
    with ExperimentStore(old) as store:  # as an older tunefleet recorded it: no id_prefix
        store.write_meta({"name": "short", "metric": "score", "mode": "max"})
    before = (old / "experiment.db").read_bytes()
    path = short_run(storage)
    assert Path(path) != old.resolve() and (old / "experiment.db").read_bytes() == before
    with pytest.raises(ValueError, match=r"without resume support"):
        tune.Tuner.restore(str(old), counting)
    # a database left by a driver killed before it recorded anything is reused
    empty = Path(storage, "empty")
    ExperimentStore(empty).close()
    again = tune.Tuner(
        counting,
        param_space={"x": 1.0, "iterations": 1, "pause": 0},
        run_config=tune.RunConfig(name="empty", storage_path=storage, verbose=0),
    ).fit()
    assert Path(again.experiment_path) == empty.resolve()


def test_a_trial_whose_end_was_not_recorded_does_not_run_past_its_stop(storage: str) -> None:
    """The driver died after a trial's last result (stop={"training_iteration": 3}, a
    checkpoint at 3) but before the trial was marked TERMINATED: on resume it ends at
    once instead of stepping a 4th time."""
    grid = tune.Tuner(
        Stepper,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(
            name="unrecorded_end",
            storage_path=storage,
            verbose=0,
            stop={"training_iteration": 3},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
        ),
    ).fit()
    path = grid.experiment_path
    db = sqlite3.connect(os.path.join(path, "experiment.db"))
    with db:  # what a driver killed at that moment leaves behind
        row = db.execute("SELECT trial_id, data FROM trials ORDER BY idx LIMIT 1").fetchone()
        data = json.loads(row[1])
        data.update(status="RUNNING", ended_at=None, stop_reason=None)
        db.execute(
            "UPDATE trials SET status = 'RUNNING', data = ? WHERE trial_id = ?",
            (json.dumps(data), row[0]),
        )
        db.execute("UPDATE meta SET value = ? WHERE key = 'status'", (json.dumps("running"),))
    db.close()
    tune.Tuner.restore(path, Stepper).fit()
    with StoreReader(path) as reader:
        trial = reader.trial(row[0])
        steps = [r["steps"] for r in reader.results(row[0])]
    assert steps == [1, 2, 3]
    assert trial.status is tune.TrialStatus.TERMINATED and trial.stop_reason in (
        "done",
        "stop criteria",
    )
