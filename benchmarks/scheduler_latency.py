"""How long does each scheduler take per decision with 10,000 trials? Target: p99 < 1 ms.

Every scheduler in ``tunefleet.schedulers`` gets ``--trials`` trials (default 10,000),
all added up front, then results fed round-robin, ``--iterations`` per trial (default
20), each ``{"training_iteration": it, "time_total_s": it, "loss": <seeded random>}``.
Every ``on_trial_result`` and every ``choose_trial_to_run`` call is timed with
``time.perf_counter_ns``; nothing else is. A minimal controller carries out the
decisions: STOP ends the trial (``on_trial_complete``), PAUSE parks it until
``choose_trial_to_run`` picks it (asked every 100 results with the paused trials, and
whenever nothing runs), and PBT's ``Exploit`` is a pause resumed at once with the new
config. A scheduler whose next call would end past ``--budget-s`` seconds (judging by
its last call) is cut short there, with fewer results than planned; the output says so.

    .venv/bin/python benchmarks/scheduler_latency.py [--trials N] [--iterations N]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tunefleet as tune
from tunefleet.schedulers import (
    ASHAScheduler,
    Candidates,
    Decision,
    Exploit,
    FIFOScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from tunefleet.trial import PAUSED_BY_SCHEDULER, Trial, TrialStatus

CHOOSE_EVERY = 100  # results between two choose_trial_to_run calls
TARGET_NS = 1_000_000  # 1 ms


def schedulers(iterations: int) -> dict[str, Callable[[], TrialScheduler]]:
    """Each scheduler, set up so that it decides something within `iterations`."""
    max_t = max(iterations, 2)
    return {
        "FIFOScheduler": FIFOScheduler,
        "ASHAScheduler (stopping)": lambda: ASHAScheduler(max_t=max_t, reduction_factor=3),
        "ASHAScheduler (promotion)": lambda: ASHAScheduler(
            max_t=max_t, reduction_factor=3, promotion=True
        ),
        "HyperBandScheduler": lambda: HyperBandScheduler(max_t=max_t),
        "HyperBandForBOHB": lambda: HyperBandForBOHB(max_t=max_t),
        "MedianStoppingRule": lambda: MedianStoppingRule(
            time_attr="training_iteration", grace_period=2
        ),
        "PopulationBasedTraining": lambda: PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=4,
            hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1)},
            seed=0,
        ),
    }


@dataclass
class Run:
    """What one scheduler did, and the time each of its decisions took (ns)."""

    name: str
    result_ns: list[int] = field(default_factory=list)
    choose_ns: list[int] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    planned_results: int = 0
    highest_iteration: int = 0
    cut_short: bool = False
    wall_s: float = 0.0


def make_trials(n: int) -> list[Trial]:
    return [
        Trial(
            trial_id=f"t{i:05d}",
            index=i,
            name=f"t{i:05d}",
            config={"lr": 10 ** -(1 + i % 3)},
            resources={"cpu": 1.0},
            path="",
        )
        for i in range(n)
    ]


def drive(name: str, sched: TrialScheduler, trials: int, iterations: int, budget_s: float) -> Run:
    """Feed `sched` round-robin as a controller would, timing each decision."""
    run = Run(name, planned_results=trials * iterations)
    rng = random.Random(0)
    clock = time.perf_counter_ns
    sched.set_search_properties("loss", "min")
    population = make_trials(trials)
    for trial in population:
        trial.status = TrialStatus.RUNNING  # the controller launches each trial at once
        sched.on_trial_add(trial)
    running: collections.deque[Trial] = collections.deque(population)
    paused = Candidates()  # as the controller keeps it: updated, never rebuilt
    since_choose = 0
    start = time.perf_counter()

    last_result = last_choose = 0  # ns the latest call of each kind took

    def over_budget(next_call_ns: int) -> bool:
        """Would the next call, if as slow as the last one, end past the budget?"""
        run.cut_short = time.perf_counter() - start + next_call_ns / 1e9 > budget_s
        return run.cut_short

    def choose() -> Trial | None:
        nonlocal last_choose
        paused.starved = not running  # every trial was added up front: no new ones come
        t0 = clock()
        chosen = sched.choose_trial_to_run(paused)
        last_choose = clock() - t0
        run.choose_ns.append(last_choose)
        if chosen is not None:
            paused.discard(chosen.trial_id)
            chosen.status = TrialStatus.RUNNING
            running.append(chosen)
            run.counts["resumed"] += 1
        return chosen

    while running or paused:
        if not running:  # everything is paused: the controller asks until one resumes
            if over_budget(last_choose):
                break
            if choose() is None:  # the controller ends them (counted below)
                break
            continue
        if over_budget(last_result):
            break
        trial = running.popleft()
        it = trial.iteration + 1
        run.highest_iteration = max(run.highest_iteration, it)
        result = {"training_iteration": it, "time_total_s": float(it), "loss": rng.random()}
        trial.last_result = result
        trial.num_results += 1
        t0 = clock()
        decision = sched.on_trial_result(trial, result)
        last_result = clock() - t0
        run.result_ns.append(last_result)
        if isinstance(decision, Exploit):
            trial.config = decision.new_config  # paused, cloned, resumed at once
            run.counts["exploit"] += 1
            decision = Decision.CONTINUE
        if decision is Decision.PAUSE:
            trial.status = TrialStatus.PAUSED
            trial.stop_reason = PAUSED_BY_SCHEDULER
            paused.add(trial)
            run.counts["pause"] += 1
        elif decision is Decision.STOP or it >= iterations:
            trial.status = TrialStatus.TERMINATED
            sched.on_trial_complete(trial, result)
            run.counts["stop" if decision is Decision.STOP else "done"] += 1
        else:
            running.append(trial)
        since_choose += 1
        if since_choose >= CHOOSE_EVERY:
            since_choose = 0
            if over_budget(last_choose):
                break
            choose()
    run.counts["left paused"] = len(paused)
    run.wall_s = time.perf_counter() - start
    return run


def percentile(ordered: list[int], q: float) -> int:
    """Nearest-rank percentile of sorted values (0 when there are none)."""
    if not ordered:
        return 0
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def summary(samples: list[int]) -> dict[str, Any]:
    ordered = sorted(samples)
    p99 = percentile(ordered, 99)
    return {
        "n": len(ordered),
        "p50_us": percentile(ordered, 50) / 1000,
        "p99_us": p99 / 1000,
        "max_us": (ordered[-1] if ordered else 0) / 1000,
        "p99_under_1ms": p99 < TARGET_NS,
    }


def table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'scheduler':<26} {'call':<20} {'timed':>8} {'p50 us':>8} {'p99 us':>9} "
        f"{'max us':>9}  p99<1ms"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        for call in ("on_trial_result", "choose_trial_to_run"):
            s = row[call]
            lines.append(
                f"{row['scheduler'] if call == 'on_trial_result' else '':<26} {call:<20} "
                f"{s['n']:>8,} {s['p50_us']:>8.1f} {s['p99_us']:>9.1f} {s['max_us']:>9.1f}  "
                f"{'yes' if s['p99_under_1ms'] else 'NO'}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=20, help="results per trial")
    parser.add_argument(
        "--budget-s", type=float, default=15.0, help="wall time per scheduler before cutting"
    )
    parser.add_argument("--only", help="run only schedulers whose name contains this")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON here")
    args = parser.parse_args()
    if args.trials < 1 or args.iterations < 1 or args.budget_s <= 0:
        parser.error("--trials and --iterations must be >= 1, --budget-s > 0")

    print(
        f"{args.trials:,} trials x {args.iterations} results round-robin; "
        f"choose_trial_to_run every {CHOOSE_EVERY} results; budget {args.budget_s:g} s each\n"
    )
    rows: list[dict[str, Any]] = []
    for name, factory in schedulers(args.iterations).items():
        if args.only and args.only.lower() not in name.lower():
            continue
        run = drive(name, factory(), args.trials, args.iterations, args.budget_s)
        fed = len(run.result_ns)
        note = f"{fed:,} of {run.planned_results:,} results in {run.wall_s:.1f} s"
        if run.cut_short:
            note += f", CUT SHORT by the budget at iteration {run.highest_iteration}"
        counts = ", ".join(f"{k} {v:,}" for k, v in sorted(run.counts.items()) if v)
        print(f"{name}: {note}; {counts}", flush=True)
        rows.append(
            {
                "scheduler": name,
                "on_trial_result": summary(run.result_ns),
                "choose_trial_to_run": summary(run.choose_ns),
                "results_planned": run.planned_results,
                "highest_iteration": run.highest_iteration,
                "cut_short": run.cut_short,
                "counts": dict(run.counts),
                "wall_s": run.wall_s,
            }
        )
    print()
    print(table(rows))
    slow = [r["scheduler"] for r in rows if not r["on_trial_result"]["p99_under_1ms"]] + [
        r["scheduler"] for r in rows if not r["choose_trial_to_run"]["p99_under_1ms"]
    ]
    print(f"\np99 >= 1 ms: {', '.join(dict.fromkeys(slow)) or 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "schedulers": rows}, f, indent=2)


if __name__ == "__main__":
    main()
