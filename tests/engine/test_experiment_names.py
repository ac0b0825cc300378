"""Experiment directories: two runs with one name get one each, atomically; a storage
path that cannot hold experiments is one line naming it (issue 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.store._check import DriverLock

ROOT = Path(__file__).resolve().parents[2]


def train(config: dict[str, Any]) -> None:
    tune.report({"loss": float(config["x"])})


def fit(storage: str, name: str | None = "same") -> Any:
    return tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0),
    ).fit()


DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from tests.engine.test_experiment_names import fit
    storage, me, other = sys.argv[1:4]
    Path(storage, "..", me).touch()
    while not Path(storage, "..", other).exists():  # both reach fit() together
        time.sleep(0.001)
    grid = fit(storage)
    print(json.dumps({"path": grid.experiment_path, "trials": sorted(r.metrics["trial_id"]
          for r in grid), "errors": grid.num_errors}))
    """
)


def test_two_drivers_started_together_with_one_name_get_one_experiment_each(
    storage: str,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER, storage, me, other],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, other in (("a.ready", "b.ready"), ("b.ready", "a.ready"))
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
        assert "being run by process" not in err
    runs = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert runs[0]["path"] != runs[1]["path"]
    assert sorted(Path(r["path"]).name for r in runs)[0] == "same"
    assert {Path(r["path"]).parent for r in runs} == {Path(storage).resolve()}
    for run in runs:
        assert run["errors"] == 0 and len(run["trials"]) == 2
        again = tune.Tuner.restore(run["path"], train).get_results()
        assert sorted(r.metrics["trial_id"] for r in again) == run["trials"]
    assert not set(runs[0]["trials"]) & set(runs[1]["trials"])


def test_a_name_held_by_a_driver_that_has_not_recorded_it_yet_is_not_shared(
    storage: str,
) -> None:
    """The other driver has claimed the directory (its lock) but written nothing yet."""
    with DriverLock(Path(storage, "same")):
        grid = fit(storage)
    assert Path(grid.experiment_path).name.startswith("same_")
    assert grid.num_errors == 0 and len(grid) == 2
    assert not Path(storage, "same", "experiment.db").exists()


def test_a_finished_experiment_of_that_name_is_kept(storage: str) -> None:
    first, second = fit(storage), fit(storage)
    assert Path(first.experiment_path).name == "same"
    assert Path(second.experiment_path).name.startswith("same_")
    assert len(tune.Tuner.restore(first.experiment_path, train).get_results()) == 2


# -- storage paths that cannot hold experiments ---------------------------------------
def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "tunefleet"), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_storage_path_that_is_a_file_is_one_line_naming_it(tmp_path: Path) -> None:
    a_file = tmp_path / "results"
    a_file.write_text("not a directory")
    with pytest.raises(ValueError, match=rf"storage_path='{a_file}' .*it is a file"):
        fit(str(a_file))
    with pytest.raises(ValueError, match=r"a part of it is a file"):
        fit(str(a_file / "below"))
    assert a_file.read_text() == "not a directory"
    one_line_error(cli(*tunefleet_run(tmp_path, a_file)), str(a_file), "is a file")
    one_line_error(cli("ls", str(a_file)), str(a_file), "is a file")
    one_line_error(cli("show", str(a_file / "exp")), str(a_file / "exp"))


def tunefleet_run(tmp_path: Path, storage: Path) -> tuple[str, ...]:
    """The arguments of `tunefleet run` for a one-line script, into `storage`."""
    script = tmp_path / "job.py"
    script.write_text('import json; print(json.dumps({"loss": 1.0}))\n')
    space = tmp_path / "space.yaml"
    space.write_text("x: 1\n")
    return ("run", "--space", str(space), "--metric", "loss", "--mode", "min",
            "--storage", str(storage), str(script))  # fmt: skip


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Any:
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    # root ignores permissions: a read-only file system instead
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {made.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def test_a_read_only_storage_path_is_one_line_naming_it(
    read_only_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=rf"storage_path='{read_only_dir}' cannot be used: it is"):
        fit(str(read_only_dir))
    with pytest.raises(ValueError, match=rf"storage_path='{read_only_dir / 'sub'}' cannot be used"):
        fit(str(read_only_dir / "sub"))
    one_line_error(cli(*tunefleet_run(tmp_path, read_only_dir)), str(read_only_dir), "read-only")
    listed = cli("ls", str(read_only_dir))
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
