"""The scale workload of ``benchmarks/scale.py``, run with Ray Tune.

Run by ``benchmarks/scale.py`` with the peer virtual environment's Python
(``.venv-peers``, made by ``make bench-peers``); Ray is never a tunefleet dependency.
It prints one JSON line with its figures, with the definitions of ``scale.py``'s
docstring, for one case:

- ``--case run``: a local Ray with ``ray.init(num_cpus=concurrency)`` (no
  dashboard), one CPU per trial, ``TuneConfig(reuse_actors=True,
  max_concurrent_trials=concurrency)``, a function trainable calling ``tune.report``
  ``reports`` times, default searcher (random) and scheduler (FIFO), ``verbose=0``,
  storage in the scratch directory; a ``tune.Callback`` in the driver takes the
  readings. Ray's experiment-state saves keep their default period ("auto": as often
  as keeps them under 5 % of the run time).
- ``--case resume --experiment PATH``: ``ray.init`` as above (timed on its own), then
  ``Tuner.restore(PATH, trainable)`` and ``.fit()`` of the finished experiment.

    .venv-peers/bin/python benchmarks/peers/ray_tune_scale.py --trials 500
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The helpers shared by all cases (standard library only) live in benchmarks/scale.py.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overhead import emit
from scale import (
    RERUN_ENV,
    Probe,
    add_case_args,
    count_results,
    marks,
    peak_rss_mb,
    probe_callback,
    rerun_count,
    scale_figures,
    state_sizes,
    window_for,
)


def trivial_trainable(config: dict[str, Any]) -> None:
    """A trial that does no work: ``reports`` results (and a line in a file on resume)."""
    from ray import tune

    rerun = os.environ.get(RERUN_ENV)
    if rerun:
        with open(rerun, "a") as f:
            f.write(f"{os.getpid()}\n")
    x = config["x"]
    for i in range(config["reports"]):
        tune.report({"score": x * i})


def trainable() -> Any:
    """The trainable with its wrappers: the same for the run and the resume."""
    from ray import tune

    return tune.with_resources(trivial_trainable, {"cpu": 1})


def run(args: argparse.Namespace, workdir: Path, ray_tmp: str) -> dict[str, Any]:
    import ray
    from ray import tune

    window = args.window or window_for(args.trials)
    probe = Probe(marks(args.trials, window))

    t_setup = time.perf_counter()
    ray.init(num_cpus=args.concurrency, include_dashboard=False, _temp_dir=ray_tmp)
    tuner = tune.Tuner(
        trainable(),
        param_space={"x": tune.uniform(0.0, 1.0), "reports": args.reports},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            num_samples=args.trials,
            max_concurrent_trials=args.concurrency,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name="scale",
            storage_path=str(workdir / "storage"),
            verbose=0,
            callbacks=[probe_callback(tune.Callback, probe)],
        ),
    )
    results = tuner.fit()
    wall = time.perf_counter() - t_setup
    experiment = Path(results.experiment_path)
    record: dict[str, Any] = {
        "framework": "ray_tune",
        "version": ray.__version__,
        "trials": args.trials,
        "window": window,
        "wall_s": wall,
        "experiment_path": str(experiment),
        "peak_driver_rss_mb": peak_rss_mb(),
    }
    record.update(count_results(results))
    record.update(scale_figures(probe.readings, trials=args.trials, window=window))
    # Ray's state: the files at the top of the experiment directory.
    record.update(state_sizes(experiment, "*", args.trials))
    return record


def resume(args: argparse.Namespace, workdir: Path, ray_tmp: str) -> dict[str, Any]:
    rerun_file = workdir / "rerun.txt"
    os.environ[RERUN_ENV] = str(rerun_file)  # before ray.init, so that workers inherit it
    t0 = time.perf_counter()
    import ray
    from ray import tune

    t1 = time.perf_counter()
    ray.init(num_cpus=args.concurrency, include_dashboard=False, _temp_dir=ray_tmp)
    t2 = time.perf_counter()
    tuner = tune.Tuner.restore(args.experiment, trainable())
    t3 = time.perf_counter()
    results = tuner.fit()
    t4 = time.perf_counter()
    record: dict[str, Any] = {
        "framework": "ray_tune",
        "import_s": t1 - t0,
        "ray_init_s": t2 - t1,
        "restore_s": t3 - t2,
        "fit_s": t4 - t3,
        "resume_s": t4 - t1,
        "resume_peak_rss_mb": peak_rss_mb(),
        "resume_rerun": rerun_count(rerun_file),
    }
    counts = count_results(results)
    record["resume_trials"] = counts["trials_ok"] + counts["trials_error"]
    record.update({f"resume_{key}": value for key, value in counts.items()})
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_args(parser)
    args = parser.parse_args()
    if args.case == "resume" and args.experiment is None:
        parser.error("--case resume needs --experiment PATH")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ray-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network call, no prompt
    # Ray's session files (logs, sockets) in a directory of their own, removed at the end;
    # a short path, because Ray's socket paths must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        record = (run if args.case == "run" else resume)(args, workdir, ray_tmp)
    finally:
        if "ray" in sys.modules:
            import ray

            ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
