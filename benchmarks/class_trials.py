"""A worker per trial: class trainables with Ray Tune's default (no actor reuse).

Workload: ``--trials`` trials (default 100) of a class trainable whose ``step`` does no
work, 10 steps each, ``--concurrency`` at a time (default 2), one CPU each,
``reuse_actors`` left at its default (None: off for classes, in both frameworks), so
every trial gets a new worker process (Ray: a new actor). Each case runs in a fresh
Python process; the cases are run ``--rounds`` times in turn (A B C A B C ...), and the
medians are printed with the load average before each round.

Cases: tunefleet with workers forked from its zygote (the default on Linux), tunefleet
with ``TUNEFLEET_WORKER_START=spawn`` (each worker a fresh interpreter, as before the
zygote), and Ray Tune from the peer environment (``.venv-peers``, ``make bench-peers``)
when it exists.

Figure: ``ms_per_trial``, the wall time from just before ``Tuner(...)`` (for Ray,
``ray.init``) until ``fit()`` returns, divided by the trials.

    .venv/bin/python benchmarks/class_trials.py [--trials 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TAG = "CLASS_TRIALS "


def _child(framework: str, trials: int, concurrency: int, workdir: str) -> dict[str, Any]:
    if framework == "ray":
        import ray
        from ray import tune

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    else:
        import tunefleet as tune  # type: ignore[no-redef]

    class Steps(tune.Trainable):
        def setup(self, config: dict[str, Any]) -> None:
            self.i = 0

        def step(self) -> dict[str, Any]:
            self.i += 1
            return {"score": self.i * self.config["x"], "done": self.i >= 10}

    t0 = time.time()
    if framework == "ray":
        ray.init(num_cpus=concurrency, include_dashboard=False, _temp_dir=ray_tmp)
    grid = tune.Tuner(
        tune.with_resources(Steps, {"cpu": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", num_samples=trials, max_concurrent_trials=concurrency
        ),
        run_config=tune.RunConfig(
            storage_path=workdir,
            verbose=0,
            # Ray saves a class trainable at its end by default (and fails without a
            # save_checkpoint): off in both, so that only starting workers is measured
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
        ),
    ).fit()
    wall = time.time() - t0
    errors = len(grid.errors)
    if framework == "ray":
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return {"ms_per_trial": wall / trials * 1000.0, "errors": errors, "wall_s": wall}


def _run(python: str, framework: str, env: dict[str, str], args: argparse.Namespace) -> Any:
    with tempfile.TemporaryDirectory(prefix="class-trials-") as workdir:
        command = [python, __file__, "--child", framework, "--trials", str(args.trials)]
        command += ["--concurrency", str(args.concurrency), "--workdir", workdir]
        proc = subprocess.run(
            command, env={**os.environ, **env}, capture_output=True, text=True, check=False
        )
    for line in proc.stdout.splitlines():
        if line.startswith(TAG):
            return json.loads(line[len(TAG) :])
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers-python", default=str(HERE.parent / ".venv-peers/bin/python"))
    parser.add_argument("--child", choices=("tunefleet", "ray"))
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.child:
        record = _child(args.child, args.trials, args.concurrency, args.workdir)
        print(TAG + json.dumps(record), flush=True)
        return 0
    src = str(HERE.parent / "src")
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    cases = [
        ("tunefleet, forked workers", sys.executable, "tunefleet", {"PYTHONPATH": path}),
        (
            "tunefleet, spawned workers",
            sys.executable,
            "tunefleet",
            {"PYTHONPATH": path, "TUNEFLEET_WORKER_START": "spawn"},
        ),
    ]
    if Path(args.peers_python).exists():
        cases.append(("Ray Tune", args.peers_python, "ray", {}))
    figures: dict[str, list[float]] = {name: [] for name, *_ in cases}
    print(
        f"{args.trials} class-trainable trials x 10 steps, {args.concurrency} at a time, "
        f"no actor reuse; {args.rounds} rounds, cases in turn"
    )
    for round_ in range(args.rounds):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"round {round_ + 1}: load average {load} before")
        for name, python, framework, env in cases:
            record = _run(python, framework, env, args)
            if "error" in record or record["errors"]:
                print(f"  {name}: FAILED {record}")
                continue
            figures[name].append(record["ms_per_trial"])
            print(f"  {name}: {record['ms_per_trial']:.1f} ms per trial")
    print("\nmedians (ms per trial):")
    base = statistics.median(figures[cases[0][0]]) if figures[cases[0][0]] else None
    for name, values in figures.items():
        if not values:
            continue
        median = statistics.median(values)
        first = name == cases[0][0]
        ratio = f"  ({median / base:.1f}x the forked workers' time)" if base and not first else ""
        print(f"  {name:28s} {median:8.1f}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
