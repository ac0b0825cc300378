"""What the summary and `tunefleet show` print stays readable and pastes into a shell:
a real experiment named ``my exp (v2)`` with a 200 kB config value (issue 17)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tunefleet.cli.main import main
from tunefleet.store._check import resume_hint

NAME = "my exp (v2)"
BIG = "y" * 200_000

SCRIPT = textwrap.dedent(
    """
    import sys
    import tunefleet as tune

    def train(config):
        for i in range(5):
            tune.report({"loss": config["x"] / (i + 1)})

    tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1.0, 2.0]), "blob": "y" * 200_000},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(
            name="my exp (v2)", storage_path=sys.argv[1], stop={"training_iteration": 3},
            verbose=1,
        ),
    ).fit()
    """
)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The experiment's directory and what the run printed."""
    tmp = tmp_path_factory.mktemp("readable")
    script = tmp / "run.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp / "results")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "results" / NAME, proc.stdout


def _shell_env() -> dict[str, str]:
    """The venv's `tunefleet` first on PATH, as after activating it."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_the_printed_commands_paste_into_a_shell(experiment: tuple[Path, str]) -> None:
    path, out = experiment
    assert path.is_dir(), out
    assert BIG[:1000] not in out and len(out) < 10_000  # the config value was cut
    commands = [line.strip() for line in out.splitlines() if line.startswith("  tunefleet ")]
    named = [c.split()[1] for c in commands]
    assert named[:2] == ["show", "best"] and {"dashboard", "report"} <= set(named), out
    show = commands[0]
    assert "'" in show  # quoted: the name has a space and parentheses
    proc = subprocess.run(
        ["bash", "-c", show], capture_output=True, text=True, env=_shell_env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert f"Experiment {NAME} at {path}" in proc.stdout
    best = subprocess.run(
        ["bash", "-c", commands[1]], capture_output=True, text=True, env=_shell_env(), timeout=120
    )
    assert best.returncode == 0 and "Best trial:" in best.stdout, best.stderr


def test_show_cuts_values_says_why_trials_ended_and_full_shows_them(
    experiment: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = experiment
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    header = next(line for line in shown.splitlines() if line.startswith("TRIAL"))
    assert "ENDED" in header and "CONFIG" in header
    rows = [line for line in shown.splitlines() if "TERMINATED" in line]
    assert len(rows) == 2
    for row in rows:
        assert "stop criteria" in row and row.endswith("…") and len(row) < 200, row
    assert main(["show", str(path), "--full"]) == 0
    full = capsys.readouterr().out
    assert full.count(f"blob={BIG}") == 2


def test_a_resume_hint_pastes_into_a_shell() -> None:
    hint = resume_hint(NAME, "/data/runs of mine")
    assert hint.startswith("tunefleet resume 'my exp (v2)' --script SCRIPT.py")
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {hint}"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    storage = ["--storage", "/data/runs of mine"]
    assert words == ["tunefleet", "resume", NAME, "--script", "SCRIPT.py", *storage]
