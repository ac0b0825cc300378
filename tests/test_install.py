"""The install a user does today (tunefleet is not on PyPI): a wheel built from a clone,
installed with no extras into a fresh venv, runs an experiment and `tunefleet ls`; and the
base install (tunefleet and its own dependencies) stays under 60 MB."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BASE_INSTALL_LIMIT_MB = 60

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a guard: pip under load

EXPERIMENT = textwrap.dedent(
    """
    import tunefleet as tune

    def train(config):
        for step in range(3):
            tune.report({"loss": (config["x"] - 1) ** 2 + 1 / (step + 1)})

    tuner = tune.Tuner(
        train,
        param_space={"x": tune.grid_search([0.0, 3.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name="install_check"),
    )
    results = tuner.fit()
    assert len(results) == 2 and not results.errors, results.errors
    print("tunefleet from", tune.__file__)
    print("best", results.get_best_result().config)
    """
)


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _size_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _site_packages(venv: Path) -> Path:
    found = list(venv.glob("lib/python3*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def test_wheel_installs_runs_an_experiment_and_stays_small(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HOME"] = str(tmp_path / "home")  # the default storage: ~/tunefleet_results
    (tmp_path / "home").mkdir()

    # Build from a copy of the clone, so the build leaves nothing in the working tree.
    source = tmp_path / "source"
    source.mkdir()
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "."],
        source,
        env,
    )
    (wheel,) = wheels.glob("tunefleet-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    site = _site_packages(venv)
    bare = _size_bytes(site)
    _run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", str(wheel)], tmp_path, env)
    installed_mb = (_size_bytes(site) - bare) / 1e6
    print(f"base install (tunefleet and its dependencies, no extras): {installed_mb:.1f} MB")
    assert installed_mb < BASE_INSTALL_LIMIT_MB, (
        f"the base install takes {installed_mb:.1f} MB of site-packages; "
        f"the limit is {BASE_INSTALL_LIMIT_MB} MB"
    )

    script = tmp_path / "experiment.py"
    script.write_text(EXPERIMENT)
    out = _run([str(venv / "bin/python"), str(script)], tmp_path, env)
    assert f"tunefleet from {site}" in out, out
    assert "best {'x': 0.0}" in out, out

    listing = _run([str(venv / "bin/tunefleet"), "ls"], tmp_path, env)
    assert "install_check" in listing, listing
    assert (tmp_path / "home" / "tunefleet_results" / "install_check").is_dir()
