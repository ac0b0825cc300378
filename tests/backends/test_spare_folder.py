"""A local worker makes its next trial's folder while it waits (`backends/_spare.py`).

The spare folder, its log files open, is renamed into the trial's place at its start;
where it cannot stand for that folder (made already, other log names, a name in a
subfolder) the trial makes its own, as before. Real folders, real renames, and real
workers: each trial's output lands in its own files, and nothing is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import tunefleet as tune
from tunefleet.backends._spare import SpareFolder, sweep

NAMES = ("stdout.log", "stderr.log")


def test_a_spare_becomes_the_trial_folder_and_takes_its_output(tmp_path: Path) -> None:
    # in a child process: the spare points fds 1 and 2 at its files, then gives them back
    code = textwrap.dedent(
        f"""
        import os
        from tunefleet.backends._spare import SpareFolder
        spare = SpareFolder({str(tmp_path / "home")!r})
        spare.prepare(("stdout.log", "stderr.log"))
        assert spare.ready
        made = os.stat(os.path.join({str(tmp_path / "home")!r}, f"spare-{{os.getpid()}}"))
        restore = spare.take({str(tmp_path / "trials" / "t1")!r}, ("stdout.log", "stderr.log"))
        assert restore is not None and not spare.ready
        print("to the trial's stdout", flush=True)
        os.write(2, b"to its stderr\\n")
        restore()
        assert os.stat({str(tmp_path / "trials" / "t1")!r}).st_ino == made.st_ino  # renamed
        print("back to the worker's")
        """
    )
    (tmp_path / "home").mkdir()
    (tmp_path / "trials").mkdir()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "back to the worker's\n"
    trial = tmp_path / "trials" / "t1"
    assert (trial / "stdout.log").read_text() == "to the trial's stdout\n"
    assert (trial / "stderr.log").read_text() == "to its stderr\n"
    assert os.listdir(tmp_path / "home") == []  # the spare was moved, not copied
    assert (trial / "stdout.log").stat().st_mode & 0o111 == 0  # a log, not a program


def test_a_folder_that_exists_is_not_replaced(tmp_path: Path) -> None:
    trial = tmp_path / "t1"
    trial.mkdir()
    (trial / "stdout.log").write_text("the first attempt's output\n")
    spare = SpareFolder(str(tmp_path))
    spare.prepare(NAMES)
    assert spare.take(str(trial), NAMES) is None  # a restart: the trial appends itself
    assert (trial / "stdout.log").read_text() == "the first attempt's output\n"
    assert sorted(os.listdir(tmp_path)) == ["t1"]  # the unused spare is removed


def test_other_log_names_or_a_subfolder_get_no_spare(tmp_path: Path) -> None:
    spare = SpareFolder(str(tmp_path))
    spare.prepare(("logs/out.txt", "logs/err.txt"))  # made inside the trial's folder
    assert not spare.ready and os.listdir(tmp_path) == []
    spare.prepare(NAMES)
    assert spare.take(str(tmp_path / "t1"), ("out.txt", "err.txt")) is None
    assert os.listdir(tmp_path) == []


def test_one_file_for_both_streams(tmp_path: Path) -> None:
    spare = SpareFolder(str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    spare.prepare(("std_combined.log", "std_combined.log"))
    assert spare.ready
    assert os.listdir(tmp_path / "home" / f"spare-{os.getpid()}") == ["std_combined.log"]
    spare.discard()
    assert os.listdir(tmp_path / "home") == []


def test_misses_in_a_row_pause_the_spares_until_one_is_used(tmp_path: Path) -> None:
    """Where the driver makes every folder (a callback's on_trial_start), a spare would be
    made and thrown away at every trial: after two misses in a row the worker lets 8
    trials start without one, then tries again (16 after the next miss, up to 64); a
    spare used ends the pause at once."""
    spare = SpareFolder(str(tmp_path))

    def miss(name: str) -> None:
        (tmp_path / name).mkdir()
        assert spare.take(str(tmp_path / name), NAMES) is None

    for i in range(2):
        spare.prepare(NAMES)
        assert spare.ready
        miss(f"t{i}")
    for _ in range(8):  # paused
        spare.prepare(NAMES)
        assert not spare.ready
    spare.prepare(NAMES)  # tried again
    assert spare.ready
    miss("t2")
    for _ in range(16):  # a longer pause
        spare.prepare(NAMES)
        assert not spare.ready
    spare.prepare(NAMES)
    restore = spare.take(str(tmp_path / "t3"), NAMES)  # used: fds 1 and 2 point there
    assert restore is not None
    restore()  # at once: this test's own output goes back where it went
    assert sorted(os.listdir(tmp_path / "t3")) == sorted(NAMES)
    spare.prepare(NAMES)
    assert spare.ready  # a spare used: no pause
    spare.discard()


def test_sweep_removes_the_spares_of_killed_workers(tmp_path: Path) -> None:
    (tmp_path / "spare-123" / "stdout.log").parent.mkdir()
    (tmp_path / "spare-123" / "stdout.log").write_text("")
    (tmp_path / "trainable.pkl").write_text("kept")
    sweep(str(tmp_path))
    assert os.listdir(tmp_path) == ["trainable.pkl"]


def talk(config: dict[str, Any]) -> None:
    print(f"trial {config['i']} out")
    print(f"trial {config['i']} err", file=sys.stderr)
    if config["i"] == 0:  # a spare of a worker that was killed, for the end to sweep
        experiment = Path(tune.get_context().get_trial_dir()).parents[1]
        (experiment / ".tunefleet" / "spare-1").mkdir(exist_ok=True)
    tune.report({"pid": os.getpid(), "made": os.stat(".").st_ino})


def _run(tmp_path: Path, name: str, **run: Any) -> tune.ResultGrid:
    return tune.Tuner(
        talk,
        param_space={"i": tune.grid_search(list(range(8)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0, **run),
    ).fit()


def test_each_trial_of_reused_workers_writes_its_own_files(tmp_path: Path) -> None:
    grid = _run(tmp_path, "spares")
    assert len(grid) == 8 and not grid.errors
    assert len({r.metrics["pid"] for r in grid}) <= 2  # workers ran several trials each
    for r in grid:
        i = r.config["i"]
        assert Path(r.path, "stdout.log").read_text() == f"trial {i} out\n"
        assert Path(r.path, "stderr.log").read_text() == f"trial {i} err\n"
    left = os.listdir(tmp_path / "spares" / ".tunefleet")
    assert not [n for n in left if n.startswith("spare-")], left


def test_with_a_callback_the_driver_s_folders_are_used(tmp_path: Path) -> None:
    seen: list[bool] = []

    class SeesFolder(tune.Callback):
        def on_trial_start(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            seen.append(os.path.isdir(trial.path))

    grid = _run(tmp_path, "callback", callbacks=[SeesFolder()])
    assert seen == [True] * 8
    for r in grid:
        assert Path(r.path, "stdout.log").read_text() == f"trial {r.config['i']} out\n"
    left = os.listdir(tmp_path / "callback" / ".tunefleet")
    assert not [n for n in left if n.startswith("spare-")], left


def wait_for_the_other_workers_spare(config: dict[str, Any]) -> None:
    """Trial 0 ends at once; its worker, with no trial left to run, waits with its spare
    made. Trial 1 (the other worker) waits for that spare to appear and reports it."""
    if config["i"] == 1:
        home = Path(tune.get_context().get_trial_dir()).parents[1] / ".tunefleet"
        mine = f"spare-{os.getpid()}"
        found: list[str] = []
        deadline = time.monotonic() + 60
        while not found and time.monotonic() < deadline:  # an event: the folder appears
            found = [n for n in os.listdir(home) if n.startswith("spare-") and n != mine]
            time.sleep(0.01)
        files = sorted(os.listdir(home / found[0])) if found else []
        tune.report({"found": len(found), "files": ",".join(files)})
    else:
        tune.report({"found": -1, "files": ""})


def test_a_worker_makes_the_next_folder_while_it_waits(tmp_path: Path) -> None:
    grid = tune.Tuner(
        wait_for_the_other_workers_spare,
        param_space={"i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="waits", verbose=0),
    ).fit()
    waiter = next(r for r in grid if r.config["i"] == 1)
    assert waiter.metrics["found"] == 1
    assert waiter.metrics["files"] == "stderr.log,stdout.log"
    left = os.listdir(tmp_path / "waits" / ".tunefleet")
    assert not [n for n in left if n.startswith("spare-")], left  # removed at its exit
