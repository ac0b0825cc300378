"""The Ray Tune forms of the examples (examples/ray_tune/), ported by the real
``tunefleet port`` into a temporary folder, run and print what the originals print."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import EXAMPLES
from tests.helpers.scripts import best_config_line, run_script, script_env

RAY_FORMS = EXAMPLES / "ray_tune"
NAMES = sorted(p.stem for p in RAY_FORMS.glob("*.py"))
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed (tunefleet[torch])"
)


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/ray_tune/ copied next to a copy of examples/data/, and ported in place."""
    root = tmp_path_factory.mktemp("ray_tune_examples")
    shutil.copytree(RAY_FORMS, root / "ray_tune", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXAMPLES / "data", root / "data")
    proc = subprocess.run(
        [sys.executable, "-m", "tunefleet", "port", "--write", str(root / "ray_tune")],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"not everything was ported:\n{proc.stderr}"
    assert proc.stdout.count("ported ") == len(NAMES), proc.stdout
    return root / "ray_tune"


def run(ported: Path, args: list[str], timeout: float) -> str:
    return run_script([str(ported / args[0]), *args[1:]], ported.parent, timeout).stdout


def test_every_example_has_a_ray_tune_form() -> None:
    originals = {p.stem for p in EXAMPLES.glob("*.py")}
    assert originals == set(NAMES)
    for name in NAMES:
        source = (RAY_FORMS / f"{name}.py").read_text()
        assert "import tunefleet" not in source and "from tunefleet" not in source, name
        assert re.search(r"^(from ray|import ray)", source, re.MULTILINE), name


def test_from_ray_tune_ports_to_the_original(ported: Path) -> None:
    """The ported Ray Tune script is examples/from_ray_tune.py, but for its comments."""
    ours = (EXAMPLES / "from_ray_tune.py").read_text().split("def train_fn")[1]
    assert (ported / "from_ray_tune.py").read_text().split("def train_fn")[1] == ours
    out = run(ported, ["from_ray_tune.py", "--storage-path", str(ported.parent / "r")], 55)
    assert "Trials: 12, errors: 0" in out
    assert "Best checkpoint: step 30" in out
    assert "'lr'" in best_config_line(out)


def test_quickstart(ported: Path) -> None:
    storage = ported.parent / "quickstart_results"
    out = run(ported, ["quickstart.py", "--storage-path", str(storage)], 55)
    line = best_config_line(out)
    for key in ("optimizer", "lr", "width"):
        assert f"'{key}'" in line
    assert "Trials: 8, errors: 0" in out
    assert "after 20 iterations" in out
    assert str(storage) in out


def test_error_handling(ported: Path) -> None:
    out = run(ported, ["error_handling.py", "--storage-path", str(ported.parent / "r")], 55)
    assert "    ok: finished" in out
    assert "raises: EXCEPTION" in out and "ValueError: bad batch at step 3" in out
    assert "   oom: OOM" in out
    # Ray Tune has no nan_policy: the NaN trial is recorded (and flagged), not an error.
    assert "   nan: finished" in out
    assert "Best: {'mode': 'ok'}" in out


def test_asha_vs_random(ported: Path) -> None:
    out = run(
        ported, ["asha_vs_random.py", "--smoke", "--storage-path", str(ported.parent / "r")], 90
    )
    assert "time to target" in out
    assert re.search(r"^FIFO .* 0/12$", out, re.MULTILINE), out
    assert re.search(r"^ASHA .* \d+/12$", out, re.MULTILINE), out


def test_pbt_schedule(ported: Path) -> None:
    out = run(
        ported, ["pbt_schedule.py", "--smoke", "--storage-path", str(ported.parent / "r")], 90
    )
    assert re.search(r"^Best trial \S+: loss \S+, its schedule:$", out, re.MULTILINE), out
    assert "Best initial lr held constant" in out


def test_resources(ported: Path) -> None:
    out = run(
        ported,
        ["resources.py", "--smoke", "--simulate-gpus", "1", "--storage-path", str(ported.parent)],
        90,
    )
    assert "device 0: at most 2 trials at once" in out
    assert "small-a: finished" in out and "small-b: finished" in out
    assert "grows: OOM" in out


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_search_pareto(ported: Path) -> None:
    out = run(
        ported,
        ["search_pareto.py", "--num-samples", "6", "--storage-path", str(ported.parent / "r")],
        140,
    )
    front = [line for line in out.splitlines() if line.startswith("  error ")]
    assert front, out
    params = [int(line.split("params")[1].split()[0]) for line in front]
    errors = [float(line.split()[1]) for line in front]
    assert params == sorted(params) and errors == sorted(errors, reverse=True)
    assert "Infeasible trials (over 40,000 parameters): " in out


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torch_examples(ported: Path) -> None:
    storage = str(ported.parent / "torch_results")
    out = run(ported, ["lstm_sunspots.py", "--smoke", "--storage-path", storage], 140)
    assert "Trials: 2, errors: 0" in out and "Forecast for 2009" in out
    for key in ("lr", "hidden", "layers", "dropout"):
        assert f"'{key}'" in best_config_line(out)
    out = run(ported, ["lstm_search.py", "--smoke", "--storage-path", storage], 140)
    assert "Search: tpe, scheduler: asha, 4 trials" in out
    out = run(ported, ["trainable_digits.py", "--smoke", "--storage-path", storage], 140)
    assert "Trials: 4, errors: 0" in out
