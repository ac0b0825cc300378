"""The examples and the overhead benchmark run end to end, in real subprocesses."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import EXAMPLES, REPO
from tests.helpers.scripts import best_config_line, run_script

BENCHMARKS = REPO / "benchmarks"


def test_quickstart(tmp_path: Path) -> None:
    storage = tmp_path / "results"
    proc = run_script(
        [str(EXAMPLES / "quickstart.py"), "--storage-path", str(storage)], tmp_path, timeout=55
    )
    line = best_config_line(proc.stdout)
    for key in ("optimizer", "lr", "width"):
        assert f"'{key}'" in line
    assert "Trials: 8, errors: 0" in proc.stdout
    assert "after 20 iterations" in proc.stdout  # the stop dict ended every trial at 20
    assert str(storage) in proc.stdout
    assert any(storage.iterdir()), "nothing was stored under --storage-path"


def test_from_ray_tune(tmp_path: Path) -> None:
    """A Ray Tune script with only its imports changed runs, checkpoints and reloads."""
    proc = run_script(
        [str(EXAMPLES / "from_ray_tune.py"), "--storage-path", str(tmp_path / "r")],
        tmp_path,
        timeout=55,
    )
    assert "Trials: 12, errors: 0" in proc.stdout
    assert "Best checkpoint: step 30" in proc.stdout  # the best trial ran to max_t
    assert "'lr'" in best_config_line(proc.stdout)
    source = (EXAMPLES / "from_ray_tune.py").read_text()
    body = source.split("def train_fn")[1]
    assert "ray." not in body and "import" not in body, "the body is Ray Tune's, unchanged"


def test_error_handling(tmp_path: Path) -> None:
    """A trial raises, one reports NaN, one runs out of its memory: the run goes on."""
    proc = run_script(
        [str(EXAMPLES / "error_handling.py"), "--storage-path", str(tmp_path / "r")],
        tmp_path,
        timeout=55,
    )
    out = proc.stdout
    assert "3 ERROR, 1 TERMINATED" in out
    assert "    ok: finished" in out
    assert "raises: EXCEPTION" in out and "ValueError: bad batch at step 3" in out
    assert "   nan: NAN_METRIC" in out and "metric 'loss' is nan" in out
    assert "   oom: OOM" in out and "limit" in out
    assert "Best: {'mode': 'ok'}" in out


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed (tunefleet[torch])"
)
def test_lstm_sunspots_smoke(tmp_path: Path) -> None:
    storage = tmp_path / "results"
    proc = run_script(
        [str(EXAMPLES / "lstm_sunspots.py"), "--smoke", "--storage-path", str(storage)],
        tmp_path,
        timeout=110,
    )
    line = best_config_line(proc.stdout)
    for key in ("lr", "hidden", "layers", "dropout"):
        assert f"'{key}'" in line
    assert "Best val_rmse: " in proc.stdout
    assert "Trials: 2, errors: 0" in proc.stdout
    assert "Forecast for 2009" in proc.stdout
    assert str(storage) in proc.stdout


@pytest.mark.timeout(120)
def test_overhead_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = run_script(
        [
            str(BENCHMARKS / "overhead.py"),
            "--quick",
            "--trials",
            "20",
            "--skip-peers",
            "--json",
            str(out),
        ],
        tmp_path,
        timeout=110,
    )
    for label in (
        "total wall time (s)",
        "overhead per trial (ms)",
        "results per second",
        "import (s)",
        "setup+fit -> first trial (s)",
        "peak driver RSS (MiB)",
        "report throughput: results/s",
    ):
        assert label in proc.stdout, f"{label!r} missing from:\n{proc.stdout}"
    assert "20 trivial trials x 10 reports" in proc.stdout
    assert "FAILED" not in proc.stdout

    figures = json.loads(out.read_text())
    ours = figures["tunefleet"]
    assert figures["peers"] == {}
    assert ours["overhead"]["trials_ok"] == 20
    assert ours["overhead"]["trials_error"] == 0
    assert ours["overhead"]["results_recorded"] == 200
    assert ours["overhead"]["wall_s"] > 0
    assert ours["overhead"]["first_trial_s"] is not None
    assert ours["throughput"]["throughput_reports_done"] == 20_000
    assert ours["throughput"]["throughput_results_per_s"] > 0
    machine = figures["machine"]  # beside every figure: the load and the filesystem's cost
    assert len(machine["load_average"]) == 3
    assert machine["filesystem"]["mkdir_us"] > 0 and machine["filesystem"]["create_us"] > 0
    assert "load average" in proc.stdout and "to create a file" in proc.stdout


@pytest.mark.timeout(120)
def test_scale_methods_benchmark_quick(tmp_path: Path) -> None:
    # the per-method scale benchmark, through scale.py, at toy sizes on the simulated
    # backend: each method's run, its resume in a fresh process, and the TPE cap
    out = tmp_path / "methods.json"
    proc = run_script(
        [
            str(BENCHMARKS / "scale.py"),
            "methods",
            "--sizes",
            "40,80",
            "--methods",
            "random,tpe,pbt",
            "--max-trials-per-method",
            "tpe=40",
            "--json",
            str(out),
        ],
        tmp_path,
        timeout=110,
    )
    for label in ("driver ms/unit", "suggest ms", "optuna ms", "peak RSS MB", "resume s"):
        assert label in proc.stdout, f"{label!r} missing from:\n{proc.stdout}"
    assert "simulated random: 40 -> 80:" in proc.stdout
    assert "tpe 80: skipped: above the cap of 40" in proc.stdout

    rows = {(r["method"], r["size"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(m, n) for m in ("random", "tpe", "pbt") for n in (40, 80)}
    for key in (("random", 40), ("random", 80), ("tpe", 40)):
        row = rows[key]
        assert row["trials_ok"] == key[1] and row["suggests"] >= key[1], row
        assert row["resume_trials"] == key[1] and row["resume_rerun"] == 0, row
        assert row["driver_ms"] > 0 and row["state_bytes_per_event"] > 0, row
    assert rows[("tpe", 40)]["optuna_ms"] > 0
    assert "driver_ms" not in rows[("tpe", 80)]
    pbt = rows[("pbt", 80)]
    assert pbt["unit"] == "result" and pbt["trials_ok"] == 64 and pbt["resume_rerun"] == 0


def test_scale_methods_benchmark_bad_input(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "scale_methods.py"), "--methods", "random,grid"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "--methods: ['grid'] not among random, tpe, asha, pbt, bohb" in proc.stderr


def test_search_pareto_example(tmp_path: Path) -> None:
    storage = tmp_path / "results"
    proc = run_script(
        [str(EXAMPLES / "search_pareto.py"), "--storage-path", str(storage), "--num-samples", "10"],
        tmp_path,
        timeout=120,
    )
    front = [line for line in proc.stdout.splitlines() if line.startswith("  error ")]
    assert front, proc.stdout
    params = [int(line.split("params")[1].split()[0]) for line in front]
    errors = [float(line.split()[1]) for line in front]
    # a front: sorted by size, the error falls; every member is feasible
    assert params == sorted(params) and errors == sorted(errors, reverse=True)
    assert all(p <= 40_000 for p in params)
