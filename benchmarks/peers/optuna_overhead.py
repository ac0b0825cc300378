"""The overhead workload of ``benchmarks/overhead.py``, run with Optuna.

Run by ``benchmarks/overhead.py`` with the peer virtual environment's Python
(``.venv-peers``, made by ``make bench-peers``: ``pip install 'ray[tune]' optuna``);
Optuna is never a tunefleet dependency. It prints one JSON line with its figures, with
the definitions of ``overhead.py``'s docstring.

Setup as an Optuna user would write it for durable, parallel tuning on one machine:
``create_study`` with SQLite storage (``sqlite:///<scratch>/optuna.db``, so every
result is stored, as with tunefleet and Ray Tune), the default sampler (TPE) and
pruner, and ``study.optimize(objective, n_trials=trials, n_jobs=concurrency)``:
Optuna's own parallelism, threads in one process. Each trial suggests one float and
calls ``trial.report(value, step)`` ``reports`` times. Optuna has no trial
processes: "first trial" is the first call of the objective, and the driver's memory
is all of it. The setup time (``wall_s``, ``first_trial_s``) includes
``create_study``.

    .venv-peers/bin/python benchmarks/peers/optuna_overhead.py --trials 100
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
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
    throughput_figures,
    tree_peak_mb,
)


class FirstCall:
    """Remembers the time.time() of the objective's first call."""

    def __init__(self) -> None:
        self.time: float | None = None
        self._lock = threading.Lock()

    def mark(self) -> None:
        now = time.time()
        with self._lock:
            if self.time is None:
                self.time = now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_args(parser)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="optuna-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{workdir / 'optuna.db'}"

    t0 = time.time()
    import optuna

    t_import = time.time()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    record: dict[str, Any] = {
        "framework": "optuna",
        "version": optuna.__version__,
        "case": args.case,
        "import_s": t_import - t0,
    }
    first = FirstCall()
    marker: dict[str, Any] = {}

    def trivial_objective(trial: optuna.Trial) -> float:
        first.mark()
        x = trial.suggest_float("x", 0.0, 1.0)
        for i in range(args.reports):
            trial.report(x * i, i)
        return x * (args.reports - 1)

    def throughput_objective(trial: optuna.Trial) -> float:
        t_first = time.time()
        n, deadline = args.throughput_reports, t_first + args.throughput_max_s
        done, capped = 0, False
        t_loop = time.time()
        while done < n:
            trial.report(float(done), done)
            done += 1
            if not done & 1023 and time.time() > deadline:
                capped = True
                break
        marker.update(t_first=t_first, t_loop=t_loop, t_end=time.time(), done=done)
        marker["capped"] = capped
        return float(done)

    with MemorySampler() as mem:
        t_setup = time.time()
        study = optuna.create_study(storage=db_url, study_name=args.case, direction="maximize")
        if args.case == "overhead":
            study.optimize(trivial_objective, n_trials=args.trials, n_jobs=args.concurrency)
        else:
            study.optimize(throughput_objective, n_trials=1)
        t_end = time.time()
    record["peak_driver_rss_mb"] = peak_rss_mb()
    record["peak_tree_rss_mb"] = tree_peak_mb(mem)

    trials = study.get_trials(deepcopy=False)
    complete = optuna.trial.TrialState.COMPLETE
    record["trials_ok"] = sum(t.state == complete for t in trials)
    record["trials_error"] = sum(t.state != complete for t in trials)
    record["results_recorded"] = sum(len(t.intermediate_values) for t in trials)

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
        record["t_first_trial"] = first.time
        record["first_trial_s"] = None if first.time is None else first.time - t_setup
    else:
        record.update(throughput_figures(marker, t_end))
    emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
