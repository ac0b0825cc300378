"""Reading a big experiment: `tunefleet report` and the dashboard's experiment view.

Writes a synthetic finished experiment of ``--trials`` trials x ``--results``
results straight through `ExperimentStore` (no run: realistic result dicts of about
ten keys, one nested), then times

- ``tunefleet report EXP --out report.html`` in a subprocess (wall time, peak RSS of
  the child, size of the HTML), and
- the dashboard's JSON answers, through a real `DashboardServer` on a free loopback
  port read with urllib: the experiment view (its first page of trials), a second
  page, and the learning curves of six trials. Each is asked ``--repeat`` times;
  the median and the max are printed, after the first view (timed alone: it reads
  every result once, for each trial's best value; later views reuse that).

    .venv/bin/python benchmarks/read_scale.py [--trials 2000] [--results 200]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tunefleet.dashboard import DashboardServer
from tunefleet.store import ExperimentStore
from tunefleet.trial import Trial, TrialStatus


def write_experiment(path: Path, trials: int, results: int, seed: int = 0) -> None:
    """A finished experiment of `trials` x `results` results, written through the store."""
    rng = random.Random(seed)
    store = ExperimentStore(path)
    store.write_meta(
        {
            "name": path.name,
            "metric": "loss",
            "mode": "min",
            "status": "finished",
            "trainable": "bench",
            "searcher": "random",
            "scheduler": "FIFOScheduler",
            "num_samples": trials,
            "created_at": time.time(),
        }
    )
    for i in range(trials):
        lr = 10 ** rng.uniform(-5, -1)
        config = {"lr": lr, "layers": rng.randint(1, 8), "opt": {"name": "adam", "wd": 0.01}}
        trial = Trial(
            trial_id=f"t{i:05d}",
            index=i,
            name=f"t{i:05d}",
            config=config,
            resources={"cpu": 1.0},
            path=str(path / "trials" / f"t{i:05d}"),
        )
        store.add_trial(trial)
        floor = rng.uniform(0.05, 0.5)
        result: dict[str, object] = {}
        for it in range(1, results + 1):
            loss = floor + 1.0 / it + rng.gauss(0, 0.02)
            result = {
                "loss": loss,
                "accuracy": 1.0 - loss / 2,
                "val": {"loss": loss * 1.1, "accuracy": 0.98 - loss / 2},
                "lr": lr,
                "grad_norm": abs(rng.gauss(1, 0.3)),
                "training_iteration": it,
                "time_this_iter_s": 0.01,
                "time_total_s": it * 0.01,
                "timestamp": time.time(),
                "done": it == results,
            }
            store.add_result(trial.trial_id, result)
        trial.status = TrialStatus.TERMINATED
        trial.num_results = results
        trial.last_result = result
        store.update_trial(trial)
        if i % 100 == 99:
            store.flush()
    store.flush()
    store.close()


def time_report(path: Path, out: Path) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of ``tunefleet report`` in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    code = "from tunefleet.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, "report", str(path), "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:  # pragma: no cover - ru_maxrss is the largest child so far
        print("  (peak RSS: no larger than an earlier child)")
    return seconds, peak / 1024


def time_get(url: str, repeat: int) -> tuple[float, float, int]:
    """Median and max milliseconds of GET `url`, and the answer's size in bytes."""
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url) as answer:
            size = len(answer.read())
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--results", type=int, default=200, help="results per trial")
    parser.add_argument("--repeat", type=int, default=7, help="requests per endpoint")
    parser.add_argument("--keep", help="write the experiment here and keep it")
    args = parser.parse_args()
    if args.trials < 1 or args.results < 1 or args.repeat < 1:
        parser.error("--trials, --results and --repeat must be >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        path = root / "read_scale"
        t0 = time.perf_counter()
        if not (path / "experiment.db").exists():
            write_experiment(path, args.trials, args.results)
        size_mb = os.path.getsize(path / "experiment.db") / 2**20
        print(
            f"{args.trials:,} trials x {args.results} results "
            f"({args.trials * args.results:,} results, db {size_mb:.0f} MiB, "
            f"written in {time.perf_counter() - t0:.1f} s); load average "
            + " ".join(f"{x:.2f}" for x in os.getloadavg())
        )
        out = Path(tmp) / "report.html"
        seconds, peak = time_report(path, out)
        print(
            f"report: {seconds:.2f} s, peak RSS {peak:.0f} MiB, "
            f"{out.stat().st_size / 2**20:.1f} MiB of HTML"
        )
        server = DashboardServer(root)
        server.start_background()
        try:
            base = server.url.rstrip("/") + "/api/experiments/read_scale"
            t0 = time.perf_counter()  # the first view reads every result (then remembered)
            view = json.loads(urllib.request.urlopen(base).read())
            print(f"{'first view':>16}: {(time.perf_counter() - t0) * 1000:7.1f} ms (cold)")
            goal = view["objectives"][0]["metric"]
            ids = ",".join(t["trial_id"] for t in view["trials"][:6])
            asked = {
                "experiment view": base,
                "second page": base + "?offset=200&limit=200",
                "6 curves": f"{base}/curves?metric={goal}&trials={ids}",
                "poll": base + "/poll",
            }
            for label, url in asked.items():
                median, worst, size = time_get(url, args.repeat)
                print(
                    f"{label:>16}: median {median:7.1f} ms, max {worst:7.1f} ms, "
                    f"{size / 1024:8.1f} KiB"
                )
        finally:
            server.shutdown()
            server.server_close()
        if not math.isfinite(seconds):  # pragma: no cover
            sys.exit(1)


if __name__ == "__main__":
    main()
