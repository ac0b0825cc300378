"""Running the example scripts (and benchmarks) as a user does: in a real subprocess,
with this checkout's ``src`` first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import SRC


def script_env() -> dict[str, str]:
    """The environment with this checkout's ``src`` first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


def run_script(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python *args`` in `cwd`; fails the test, with the output's tails, unless it exits 0."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{args[0]} exited with {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    return proc


def best_config_line(stdout: str) -> str:
    """The last ``Best config: {...}`` line an example printed."""
    lines = [line for line in stdout.splitlines() if line.startswith("Best config: {")]
    assert lines, f"no 'Best config: {{...}}' line in the output:\n{stdout[-4000:]}"
    return lines[-1]
