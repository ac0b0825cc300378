"""How long does each searcher take per suggestion after 1,000 completed observations?

Every searcher gets the same 8-parameter mixed space (two log-scaled floats, two
floats, an int, a quantized int, two choices) and a cheap synthetic objective. It is
first fed ``--observations`` trials (default 1,000) through its own ``suggest`` and
``on_trial_complete``, as the controller would, then ``--calls`` more suggestions
(default 50) are timed with ``time.perf_counter``, each made while ``--pending``
trials (default 3: 4 workers) are still running, the oldest one completed after each
call. Also timed: ``on_trial_complete`` and ``get_state`` (the controller saves the
searcher's state every step), and the size of that state as JSON.

Exceptions, said in the output:

- GP searchers cannot be fed through a GP suggestion per trial (seconds each, growing
  with the data): ``BayesOptSearch(random_search_steps=N)`` is fed through ``suggest``
  with its random start-up phase, so its GP starts at the N-th observation;
  ``OptunaSearch(sampler="gp")`` is given the N observations as ``points_to_evaluate``
  with ``evaluated_rewards`` (told to the study as finished trials, not suggested).
- ``TuneBOHB`` is told each trial's results per budget as HyperBand would make them
  (every trial at 1, a third also at 3, a ninth at 9, ...; ``hyperband_info`` set), so
  it models the largest budget with enough points, as in a run.
- ``OptunaSearch(sampler="nsga2")`` optimises two objectives (loss and a latency).
- A searcher whose timed calls pass ``--budget-s`` seconds stops there (at least 3
  calls); the table gives the number of calls.

    .venv/bin/python benchmarks/searcher_latency.py [--observations N] [--calls N]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import tunefleet as tune
from tunefleet import search

SPACE: dict[str, Any] = {
    "lr": tune.loguniform(1e-5, 1e-1),
    "wd": tune.loguniform(1e-6, 1e-2),
    "dropout": tune.uniform(0.0, 0.5),
    "momentum": tune.uniform(0.5, 0.99),
    "layers": tune.randint(1, 6),
    "units": tune.qrandint(16, 256, 16),
    "act": tune.choice(["relu", "gelu", "tanh"]),
    "batch": tune.choice([32, 64, 128, 256]),
}
BUDGETS = (1, 3, 9, 27, 81)  # HyperBand's milestones for TuneBOHB, reduction factor 3
ACT = {"relu": 0.0, "gelu": -0.1, "tanh": 0.3}


def objective(config: dict[str, Any], budget: int = 81) -> dict[str, float]:
    """A smooth loss with one optimum, plus a second objective (a cost) for NSGA-II."""
    loss = (
        (math.log10(config["lr"]) + 3.0) ** 2
        + 0.3 * (math.log10(config["wd"]) + 4.0) ** 2
        + 2.0 * (config["dropout"] - 0.2) ** 2
        + (config["momentum"] - 0.9) ** 2
        + 0.1 * (config["layers"] - 3) ** 2
        + ((config["units"] - 128) / 128) ** 2
        + ACT[config["act"]]
        + 0.05 * math.log2(config["batch"] / 64) ** 2
        + 2.0 / budget
    )
    latency = config["layers"] * config["units"] / config["batch"]
    return {"loss": loss, "latency": latency, "training_iteration": budget}


@dataclass
class Case:
    """One searcher to measure: how to build it and how it is fed."""

    name: str
    build: Callable[[list[dict[str, Any]]], search.Searcher]  # arg: warm-start configs
    metric: str | list[str] = "loss"
    mode: str | list[str] = "min"
    warm_start: bool = False  # fed as points_to_evaluate + evaluated_rewards
    budgets: bool = False  # results per HyperBand budget (TuneBOHB)
    note: str = ""


def cases(observations: int) -> list[Case]:
    """Every searcher of the table, seeded with 0."""
    return [
        Case("BasicVariantGenerator", lambda _: search.BasicVariantGenerator(seed=0)),
        Case("OptunaSearch (tpe)", lambda _: search.OptunaSearch(seed=0)),
        Case(
            "OptunaSearch (gp)",
            lambda points: search.OptunaSearch(
                sampler="gp",
                seed=0,
                points_to_evaluate=points,
                evaluated_rewards=[objective(p)["loss"] for p in points],
            ),
            warm_start=True,
            note="observations given as evaluated_rewards",
        ),
        Case("OptunaSearch (cmaes)", lambda _: search.OptunaSearch(sampler="cmaes", seed=0)),
        Case("OptunaSearch (qmc)", lambda _: search.OptunaSearch(sampler="qmc", seed=0)),
        Case(
            "OptunaSearch (nsga2, 2 obj.)",
            lambda _: search.OptunaSearch(sampler="nsga2", seed=0),
            metric=["loss", "latency"],
            mode=["min", "min"],
        ),
        Case("HyperOptSearch", lambda _: search.HyperOptSearch(random_state_seed=0)),
        Case(
            "BayesOptSearch",
            lambda _: search.BayesOptSearch(random_state=0, random_search_steps=observations),
            note=f"random_search_steps={observations}: the GP starts after the feed",
        ),
        Case("QMCSearch", lambda _: search.QMCSearch(seed=0)),
        Case(
            "TuneBOHB",
            lambda _: search.TuneBOHB(seed=0),
            budgets=True,
            note="results at HyperBand budgets 1/3/9/27/81",
        ),
    ]


def complete(
    searcher: search.Searcher, trial_id: str, config: dict[str, Any], i: int, case: Case
) -> None:
    """Tell the searcher the trial's results and its end (the i-th trial of the run)."""
    if not case.budgets:
        searcher.on_trial_complete(trial_id, objective(config))
        return
    # HyperBand with reduction factor 3: trial i reaches budget 3^k if 3^k divides i + 1
    reached = [b for b in BUDGETS if (i + 1) % b == 0]
    result: dict[str, Any] = {}
    for b in reached:
        result = {**objective(config, b), "hyperband_info": {"budget": b, "bracket": 0}}
        searcher.on_trial_result(trial_id, result)
    searcher.on_trial_complete(trial_id, result)


def measure(case: Case, args: argparse.Namespace) -> dict[str, Any]:
    sampler = search.BasicVariantGenerator(seed=1)
    sampler.set_search_properties(None, None, SPACE, num_samples=-1)
    points = []
    if case.warm_start:
        points = [sampler.suggest(f"w{i}") for i in range(args.observations)]
    searcher = case.build(points)  # type: ignore[arg-type]
    searcher.set_search_properties(case.metric, case.mode, SPACE, num_samples=-1)
    started = time.perf_counter()
    count = 0
    if not case.warm_start:
        for i in range(args.observations):
            config = searcher.suggest(f"f{i}")
            if not isinstance(config, dict):
                raise RuntimeError(f"{case.name}: suggest returned {config!r} while feeding")
            complete(searcher, f"f{i}", config, i, case)
        count = args.observations
    feed_s = time.perf_counter() - started
    pending: list[tuple[str, dict[str, Any]]] = []
    for _ in range(args.pending):
        trial_id = f"p{len(pending)}"
        config = searcher.suggest(trial_id)
        assert isinstance(config, dict)
        pending.append((trial_id, config))
    suggest_s, complete_s = [], []
    measured = time.perf_counter()
    for k in range(args.calls):
        trial_id = f"m{k}"
        t0 = time.perf_counter()
        config = searcher.suggest(trial_id)
        suggest_s.append(time.perf_counter() - t0)
        if not isinstance(config, dict):
            raise RuntimeError(f"{case.name}: suggest returned {config!r}")
        pending.append((trial_id, config))
        old_id, old_config = pending.pop(0)
        t0 = time.perf_counter()
        complete(searcher, old_id, old_config, count, case)
        complete_s.append(time.perf_counter() - t0)
        count += 1
        if k >= 2 and time.perf_counter() - measured > args.budget_s:
            break
    state_s = []
    for _ in range(5):
        t0 = time.perf_counter()
        state = searcher.get_state()
        state_s.append(time.perf_counter() - t0)
    return {
        "searcher": case.name,
        "note": case.note,
        "feed_s": feed_s,
        "calls": len(suggest_s),
        "suggest_p50_ms": 1000 * float(np.percentile(suggest_s, 50)),
        "suggest_p99_ms": 1000 * float(np.percentile(suggest_s, 99)),
        "suggest_max_ms": 1000 * max(suggest_s),
        "complete_p50_ms": 1000 * statistics.median(complete_s),
        "get_state_ms": 1000 * statistics.median(state_s),
        "state_kb": len(json.dumps(state)) / 1024,
    }


def fmt(value: float) -> str:
    """Three significant digits or so, without an exponent."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--observations", type=int, default=1000, help="completed trials first")
    parser.add_argument("--calls", type=int, default=50, help="timed suggestions")
    parser.add_argument("--pending", type=int, default=3, help="running trials at each call")
    parser.add_argument("--budget-s", type=float, default=120.0, help="cap on the timed calls")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="searchers whose name has this")
    parser.add_argument("--json", metavar="OUT", help="write the rows to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = []
    for case in cases(args.observations):
        if args.only and not any(word.lower() in case.name.lower() for word in args.only):
            continue
        row = measure(case, args)
        rows.append(row)
        print(f"{case.name}: done ({row['feed_s']:.1f} s feed, {row['calls']} calls)", flush=True)
    print(
        f"\n### suggest latency after {args.observations:,} completed observations "
        f"(8 mixed parameters, {args.pending} trials pending at each call)\n"
    )
    print(
        "| searcher | calls | suggest p50 ms | p99 ms | on_trial_complete p50 ms "
        "| get_state ms | state KB | feed s | note |"
    )
    print("|---" * 9 + "|")
    for r in rows:
        cells = [r[k] for k in ("suggest_p50_ms", "suggest_p99_ms", "complete_p50_ms")]
        cells += [r["get_state_ms"], r["state_kb"], r["feed_s"]]
        print(
            f"| {r['searcher']} | {r['calls']} | "
            + " | ".join(fmt(v) for v in cells)
            + f" | {r['note']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
