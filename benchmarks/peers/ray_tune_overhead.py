"""The overhead workload of ``benchmarks/overhead.py``, run with Ray Tune.

Run by ``benchmarks/overhead.py`` with the peer virtual environment's Python
(``.venv-peers``, made by ``make bench-peers``: ``pip install 'ray[tune]' optuna``);
Ray is never a tunefleet dependency. It prints one JSON line with its figures, with the
definitions of ``overhead.py``'s docstring.

Setup as a Ray Tune user would write it for this workload: a local Ray with
``ray.init(num_cpus=concurrency)`` (no dashboard), one CPU per trial, so
``concurrency`` trials at a time; ``TuneConfig(reuse_actors=True)``; a function
trainable that calls ``tune.report`` once per iteration; default searcher (random) and
scheduler (FIFO); ``verbose=0``; storage in a scratch directory. The setup time
(``wall_s``, ``first_trial_s``) includes ``ray.init``.

    .venv-peers/bin/python benchmarks/peers/ray_tune_overhead.py --trials 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The helpers shared by all cases (standard library only) live in benchmarks/overhead.py.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overhead import (
    MemorySampler,
    add_case_args,
    emit,
    overhead_figures,
    peak_rss_mb,
    read_first_trial_time,
    read_throughput_marker,
    throughput_figures,
    tree_peak_mb,
)


def trivial_trainable(config: dict[str, Any]) -> None:
    """A trial that does no work: marks its start, then reports ``reports`` results."""
    now = time.time()
    try:
        fd = os.open(
            os.path.join(config["marker_dir"], "first_trial"),
            os.O_CREAT | os.O_EXCL | os.O_WRONLY,
        )
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(repr(now))
    from ray import tune

    x = config["x"]
    pause = config.get("sleep", 0.0) / config["reports"]  # the trial's length, spread out
    for i in range(config["reports"]):
        if pause:
            time.sleep(pause)
        tune.report({"score": x * i})


def throughput_trainable(config: dict[str, Any]) -> None:
    """One trial reporting as fast as it can, then writing its timings to a file."""
    t_first = time.time()
    from ray import tune

    n, deadline = config["reports"], t_first + config["max_s"]
    done, capped = 0, False
    t_loop = time.time()
    while done < n:
        tune.report({"score": done})
        done += 1
        if not done & 1023 and time.time() > deadline:
            capped = True
            break
    t_end = time.time()
    marker = {"t_first": t_first, "t_loop": t_loop, "t_end": t_end, "done": done}
    marker["capped"] = capped
    with open(os.path.join(config["marker_dir"], "throughput.json"), "w") as f:
        json.dump(marker, f)


def run(args: argparse.Namespace, workdir: Path, ray_tmp: str) -> dict[str, Any]:
    """Run one case and return its figures."""
    marker_dir, storage = workdir / "markers", workdir / "storage"
    marker_dir.mkdir(parents=True, exist_ok=True)
    storage.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    import ray
    from ray import tune

    t_import = time.time()
    record: dict[str, Any] = {
        "framework": "ray_tune",
        "version": ray.__version__,
        "case": args.case,
        "import_s": t_import - t0,
    }
    with MemorySampler() as mem:
        t_setup = time.time()
        concurrency = args.concurrency if args.case == "overhead" else 1
        if args.address:  # a running Ray (benchmarks/ray_backend.py): the same one as ours
            ray.init(address=args.address)
        else:
            ray.init(num_cpus=concurrency, include_dashboard=False, _temp_dir=ray_tmp)
        record["ray_init_s"] = time.time() - t_setup
        if args.case == "overhead":
            tuner = tune.Tuner(
                tune.with_resources(trivial_trainable, {"cpu": 1}),
                param_space={
                    "x": tune.uniform(0.0, 1.0),
                    "reports": args.reports,
                    "sleep": args.sleep,
                    "marker_dir": str(marker_dir),
                },
                tune_config=tune.TuneConfig(
                    metric="score",
                    mode="max",
                    num_samples=args.trials,
                    max_concurrent_trials=args.concurrency,
                    reuse_actors=True,
                ),
                run_config=tune.RunConfig(name="overhead", storage_path=str(storage), verbose=0),
            )
        else:
            tuner = tune.Tuner(
                tune.with_resources(throughput_trainable, {"cpu": 1}),
                param_space={
                    "reports": args.throughput_reports,
                    "max_s": args.throughput_max_s,
                    "marker_dir": str(marker_dir),
                },
                tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=1),
                run_config=tune.RunConfig(name="throughput", storage_path=str(storage), verbose=0),
            )
        results = tuner.fit()
        t_end = time.time()
    record["peak_driver_rss_mb"] = peak_rss_mb()
    record["peak_tree_rss_mb"] = tree_peak_mb(mem)

    ok = errors = recorded = 0
    for result in results:
        if result.error is not None:
            errors += 1
        else:
            ok += 1
        recorded += int((result.metrics or {}).get("training_iteration", 0))
    record.update({"trials_ok": ok, "trials_error": errors, "results_recorded": recorded})

    if args.case == "overhead":
        record.update(
            overhead_figures(
                trials=args.trials,
                reports=args.reports,
                concurrency=args.concurrency,
                t_setup=t_setup,
                t_end=t_end,
            )
        )
        t_first = read_first_trial_time(marker_dir)
        record["t_first_trial"] = t_first
        record["first_trial_s"] = None if t_first is None else t_first - t_setup
    else:
        record.update(throughput_figures(read_throughput_marker(marker_dir), t_end))
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_args(parser)
    parser.add_argument("--address", help="join this running Ray instead of starting one")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of work per trial")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ray-bench-"))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network call, no prompt
    # Ray's session files (logs, sockets) in a directory of their own, removed at the end;
    # a short path, because Ray's socket paths must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        record = run(args, workdir, ray_tmp)
    finally:
        if "ray" in sys.modules:
            import ray

            ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
