"""A tunefleet script submitted with ``ray job submit`` to a real Ray head (with its
dashboard, which job submission talks to) runs on that cluster with backend="ray"."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.paths import SRC

pytest.importorskip("ray")
pytest.importorskip("aiohttp_cors", reason="ray job submit needs ray[default]")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def head() -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head with its dashboard, in a temp dir of its own (only it is stopped)."""
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths
    dashboard = _free_port()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",  # a private head for this test (see docs/clusters.md)
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
    }
    command = [RAY, "start", "--head", "--num-cpus=2", "--num-gpus=0", f"--port={_free_port()}"]
    command += ["--include-dashboard=true", f"--dashboard-port={dashboard}"]
    command += ["--dashboard-host=127.0.0.1", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    subprocess.run(command, check=True, capture_output=True, env=env, timeout=120)
    try:
        yield f"http://127.0.0.1:{dashboard}", env
    finally:
        mine = [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(temp_dir in part for part in (p.info["cmdline"] or []))
        ]
        for proc in mine:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(mine, timeout=15)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()


SCRIPT = """
    import os
    import ray
    import tunefleet as tune

    def train(config):
        for i in range(3):
            tune.report({"score": config["x"] * (i + 1), "pid": os.getpid()})

    results = tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(backend="ray", storage_path=os.environ["RESULTS"], verbose=0),
    ).fit()
    assert not results.errors, results.errors
    best = results.get_best_result()
    print("BEST", best.config["x"], "IN A RAY ACTOR:", best.metrics["pid"] != os.getpid())
"""


def test_a_tunefleet_script_runs_under_ray_job_submit(
    head: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    address, env = head
    script = tmp_path / "tune_job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    results = tmp_path / "results"
    runtime_env = f'{{"env_vars": {{"RESULTS": "{results}"}}}}'
    submit = [RAY, "job", "submit", f"--address={address}", f"--runtime-env-json={runtime_env}"]
    submit += ["--", sys.executable, str(script)]
    deadline = time.monotonic() + 60
    while True:  # the dashboard may take a few seconds to accept jobs
        proc = subprocess.run(submit, capture_output=True, text=True, env=env, timeout=180)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        if "BEST" in proc.stdout or "Job '" in proc.stdout:
            break  # the job ran: its failure is the answer, not the dashboard's start
        time.sleep(2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "BEST 3 IN A RAY ACTOR: True" in proc.stdout
    assert list(results.glob("*/experiment.db")), "the experiment was stored where asked"
