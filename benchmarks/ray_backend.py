"""Overhead per trial on Ray: tunefleet's Ray backend and Ray Tune on the same Ray.

The workload of ``overhead.py``: ``--trials`` function trials, each reporting
``--reports`` results, one CPU each, ``--cpus`` at a time, default search and FIFO,
``verbose=0``. With ``--sleep S`` each trial works S seconds (spread over its reports),
so the ideal wall time is ``ceil(trials / cpus) * S``.

One Ray head is started for the whole run (``ray start --head --num-cpus CPUS``, no
dashboard), and every case joins it from a fresh process, so both frameworks run on the
same Ray: tunefleet with ``RunConfig(backend="ray", ray_init={"address": ...})`` (this
venv), Ray Tune with ``ray.init(address=...)`` (``.venv-peers``, ``make bench-peers``:
the same Ray version). The local backend runs the same workload without Ray, for scale.

Figures: ``wall_s`` from just before setup (``Tuner(...)``; Ray Tune: ``ray.init``) to
the end of ``fit()``; ``overhead_ms_per_trial = (wall_s - ideal_s) / trials``; ``over
ideal`` = ``wall_s / ideal_s - 1`` when ``--sleep`` > 0.

    .venv/bin/python benchmarks/ray_backend.py                  # 200 trials, ~3 min
    .venv/bin/python benchmarks/ray_backend.py --cpus 16 --trials 2000 --sleep 1
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Ray 2.60 turns token authentication on for `ray start`; the cases join by address from
# fresh processes (two venvs), so this local, short-lived head runs without it.
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
TAG = "RAY_BACKEND_BENCH "


def trivial(config: dict[str, Any]) -> None:
    """Works `sleep` seconds in `reports` steps, reporting after each."""
    import tunefleet as tune

    pause = config["sleep"] / config["reports"]
    for i in range(config["reports"]):
        if pause:
            time.sleep(pause)
        tune.report({"score": config["x"] * i})


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One tunefleet case in this (fresh) process: the Ray backend, or the local one."""
    import tunefleet as tune

    storage = tempfile.mkdtemp(prefix="tf-raybench-")
    ray_run = args.backend == "ray"
    t_setup = time.time()
    grid = tune.Tuner(
        tune.with_resources(trivial, {"cpu": 1}),
        param_space={"x": tune.uniform(0, 1), "reports": args.reports, "sleep": args.sleep},
        tune_config=tune.TuneConfig(
            num_samples=args.trials, max_concurrent_trials=args.cpus, reuse_actors=True
        ),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            backend=args.backend,
            ray_init={"address": args.address} if ray_run else None,
            resources=None if ray_run else {"cpu": args.cpus},
        ),
    ).fit()
    wall = time.time() - t_setup
    shutil.rmtree(storage, ignore_errors=True)
    errors = [r.error for r in grid if r.error is not None]
    recorded = sum(int((r.metrics or {}).get("training_iteration", 0)) for r in grid)
    return {
        "framework": f"tunefleet ({args.backend})",
        "version": tune.__version__,
        "wall_s": wall,
        "trials_ok": len(grid) - len(errors),
        "trials_error": len(errors),
        "results_recorded": recorded,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_ray(cpus: int, python: Path, temp_dir: str) -> str:
    """Start a Ray head with `python`'s Ray; its address as Ray prints it (the node's IP).

    Its workers run that Python, with this checkout's ``src`` on their path, so they can
    run both tunefleet's actors and (in the peers' venv, which has ray[tune]) Ray Tune's.
    """
    port = free_port()
    ray_cli = str(python.parent / "ray")
    src = str(REPO / "src")
    env = {
        **os.environ,
        **ENV,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [
            ray_cli,
            "start",
            "--head",
            f"--num-cpus={cpus}",
            "--num-gpus=0",
            f"--port={port}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",  # its own: stop_ray() ends only this cluster
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    found = re.search(r"--address='([^']+)'", proc.stdout + proc.stderr)
    return found.group(1) if found else f"127.0.0.1:{port}"


def stop_ray(temp_dir: str) -> None:
    """End the processes of the head started in `temp_dir` (never another Ray here)."""
    import psutil

    mine = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(temp_dir in part for part in (p.info["cmdline"] or []))
    ]
    for proc in mine:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(mine, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def run(command: list[str], timeout: float) -> dict[str, Any]:
    env = {**os.environ, **ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        for tag in (TAG, "TUNEFLEET_BENCH_RESULT "):
            if line.startswith(tag):
                record: dict[str, Any] = json.loads(line[len(tag) :])
                return record
        if line.startswith("{") and '"wall_s"' in line:
            return dict(json.loads(line))
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    return {"error": f"exit code {proc.returncode}\n{tail}"}


def table(records: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    ideal = math.ceil(args.trials / args.cpus) * args.sleep
    lines = [
        f"{args.trials:,} trials x {args.reports} reports, {args.sleep:g} s of work each, "
        f"{args.cpus} CPUs (one per trial); ideal wall time {ideal:.1f} s",
        "",
        "| case | version | wall (s) | overhead per trial (ms) | over ideal | ok / error "
        "| results |",
        "|---|---|---|---|---|---|---|",
    ]
    ours = records.get("tunefleet-ray", {}).get("wall_s")
    for name, r in records.items():
        if "error" in r:
            lines.append(f"| {name} | - | failed: {r['error'].splitlines()[0]} | | | | |")
            continue
        over = f"{r['wall_s'] / ideal - 1:+.1%}" if ideal else "-"
        per_trial = (r["wall_s"] - ideal) / args.trials * 1000
        lines.append(
            f"| {r.get('framework', name)} | {r.get('version', '?')} | {r['wall_s']:.1f} "
            f"| {per_trial:.1f} | {over} | {r.get('trials_ok')} / {r.get('trials_error')} "
            f"| {r.get('results_recorded'):,} |"
        )
    peer = records.get("ray-tune", {}).get("wall_s")
    if ours and peer:
        ratio = (peer - ideal) / max(ours - ideal, 1e-9)
        lines += ["", f"Ray Tune's overhead per trial / tunefleet's (same Ray): {ratio:.1f}x"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=2, help="the Ray head's CPUs: trials at once")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of work per trial")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--peers-python", default=str(REPO / ".venv-peers/bin/python"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="ray", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("trials", "reports", "cpus"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    if args.sleep < 0:
        parser.error(f"--sleep must be >= 0, not {args.sleep}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(TAG + json.dumps(child(args)), flush=True)
        return 0
    common = [f"--trials={args.trials}", f"--reports={args.reports}", f"--sleep={args.sleep}"]
    me = [sys.executable, str(Path(__file__).resolve()), "--child", f"--cpus={args.cpus}", *common]
    records: dict[str, dict[str, Any]] = {}
    peers = Path(args.peers_python)
    with_peers = not args.skip_peers and peers.exists()
    head = peers if with_peers else Path(sys.executable)  # Ray Tune's workers need ray[tune]
    temp_dir = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # short: Ray's socket paths
    try:
        print(f"starting a Ray head with {args.cpus} CPUs ...", file=sys.stderr, flush=True)
        address = start_ray(args.cpus, head, temp_dir)
        cases: list[tuple[str, list[str]]] = [
            ("tunefleet-ray", [*me, "--backend=ray", f"--address={address}"])
        ]
        if with_peers:
            script = REPO / "benchmarks/peers/ray_tune_overhead.py"
            cases.append(
                (
                    "ray-tune",
                    [
                        str(peers),
                        str(script),
                        f"--address={address}",
                        f"--concurrency={args.cpus}",
                        *common,
                    ],
                )
            )
        elif not args.skip_peers:
            print(f"no peers: {peers} does not exist (make bench-peers)", file=sys.stderr)
        for name, command in cases:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            records[name] = run(command, args.timeout)
    finally:
        stop_ray(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    if not args.skip_local:
        print("[bench] tunefleet-local ...", file=sys.stderr, flush=True)
        records["tunefleet-local"] = run([*me, "--backend=local"], args.timeout)
    print(table(records, args))
    if args.json:
        report = {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "args": vars(args),
            "records": records,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if any("error" in r for r in records.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
