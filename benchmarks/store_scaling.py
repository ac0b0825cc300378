"""Does the store's cost per event grow with the size of the experiment? It must not.

Ray Tune saves its experiment state by rewriting a file with every trial in it, so
each save costs more as trials accumulate. tunefleet appends rows and updates one
trial's row per event. This benchmark grows one experiment to ``--trials`` trials
(default 20,000), each with ``--results`` results (default 10), written as the
controller writes them (a trial row, its start event, its results, its end; one
commit per batch of ``--batch`` events, as one controller step), and prints the
microseconds per event at each tenth of the way. Flat figures mean the cost does
not grow; the database size is printed too.

    .venv/bin/python benchmarks/store_scaling.py [--trials N] [--results N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from tunefleet.store import ExperimentStore
from tunefleet.trial import Trial, TrialStatus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--results", type=int, default=10, help="results per trial")
    parser.add_argument("--batch", type=int, default=20, help="events per commit")
    args = parser.parse_args()
    if args.trials < 10 or args.results < 1 or args.batch < 1:
        parser.error("--trials must be >= 10, --results and --batch >= 1")

    with tempfile.TemporaryDirectory() as tmp:
        store = ExperimentStore(tmp)
        store.write_meta({"name": "scaling", "metric": "loss", "mode": "min"})
        print(f"{args.trials:,} trials x {args.results} results, commit every {args.batch} events")
        print(f"{'trials so far':>14} {'us per event':>13} {'db size (MiB)':>14}")
        tenth = args.trials // 10
        pending = 0
        events = 0
        t0 = time.perf_counter()
        for i in range(args.trials):
            trial = Trial(
                trial_id=f"t{i:06d}",
                index=i,
                name=f"t{i:06d}",
                config={"lr": 10 ** -(i % 5), "layers": i % 4},
                resources={"cpu": 1.0},
                path=os.path.join(tmp, "trials", f"t{i:06d}"),
            )
            store.add_trial(trial)
            trial.status = TrialStatus.RUNNING
            store.add_event(trial.trial_id, "started", None)
            store.update_trial(trial)
            for it in range(1, args.results + 1):
                result = {
                    "loss": 1.0 / it + i * 1e-6,
                    "training_iteration": it,
                    "trial_id": trial.trial_id,
                }
                store.add_result(trial.trial_id, result)
                trial.last_result = result
                trial.num_results = it
                store.update_trial(trial)
                events += 1
                pending += 1
                if pending >= args.batch:
                    store.flush()
                    pending = 0
            trial.status = TrialStatus.TERMINATED
            store.add_event(trial.trial_id, "terminated", None)
            store.update_trial(trial)
            events += 2
            if (i + 1) % tenth == 0:
                store.flush()
                pending = 0
                elapsed = time.perf_counter() - t0
                size = os.path.getsize(os.path.join(tmp, "experiment.db")) / 2**20
                print(f"{i + 1:>14,} {elapsed / events * 1e6:>13.1f} {size:>14.1f}")
                t0, events = time.perf_counter(), 0
        store.close()


if __name__ == "__main__":
    main()
