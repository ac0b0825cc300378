"""How fast each scheduler finds a good config: random search alone vs early stopping.

Runs on the simulated backend (virtual time, see docs/simulated.md) over the synthetic
problems of ``problems.py``. Every method gets the same budget of workers x virtual
time and draws configs from the same random search (``BasicVariantGenerator(seed=s)``,
``num_samples=-1``): the same seed gives every method the same sequence of configs.

Methods (default): random search alone (FIFO, every trial runs to the max budget), ASHA
(stopping form, ``grace_period=1, reduction_factor=3``), async HyperBand ("ahb": the same
with ``brackets=3``), HyperBand (``reduction_factor=3``, synchronous, pause/resume) and
the median stopping rule (on ``training_iteration``, ``grace_period=1``), all with
``max_t`` = the problem's max budget. Opt-in variants: ``asha-g{3,9}`` (grace period),
``asha-r4`` / ``asha-g{3,9}-r4`` (reduction factor 4), ``asha-promo`` (promotion form).

Figures, per problem x method over the seeds:

``incumbent``
    At any virtual time, the result (any trial, any budget) with the lowest reported,
    noisy loss so far: what a user would pick. Its quality is its noise-free loss at
    that budget, so that many noisy draws of one converged config are not progress.
``time-to-target``
    Virtual seconds until the incumbent's noise-free loss is at or below a target, the
    p-th percentile of the noise-free max-budget loss of 2,000 random configs, for each
    p of ``--target-quantiles`` (5 and 1). The table shows the median over seeds
    (">budget" when more than half never reach it) and the fraction that never do.
``ceiling``
    Any method must train one config until it reaches the target, serially. ``t_hit``
    is that serial time for the 2,000 configs that reach it (median and minimum), and
    random search's median time-to-target over it bounds every method's speed-up:
    ``RS / median t_hit`` for a typical winner, ``RS / min t_hit`` at the very most.
    Random search needs about ``1 / (p * workers)`` rounds of max-budget trials.
``regret@q``
    ``(incumbent - opt) / (median random - opt)`` at ``q`` = 25/50/100 % of the time
    budget, median over seeds; ``opt`` is the lowest noise-free max-budget loss of
    100,000 random configs, ``median random`` the median of the 2,000 above.
``speed-up``
    Random search's median time-to-target over the method's (">x" when random search's
    median is "never": a lower bound), and the paired median over seeds of the ratio
    per seed ("never" counted as the whole budget, so a bound where it occurs).

    .. code-block:: sh

        .venv/bin/python benchmarks/search_efficiency.py --quick
        .venv/bin/python benchmarks/search_efficiency.py --plots benchmarks/plots
        .venv/bin/python benchmarks/search_efficiency.py --methods asha-g3 asha-g9-r4
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _plot  # siblings: the script's folder is on sys.path
import numpy as np
from problems import PROBLEMS, Problem

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import (
    AsyncHyperBandScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    TrialScheduler,
)
from tunefleet.search import BasicVariantGenerator

REFERENCE_CONFIGS = 2_000
OPTIMUM_CONFIGS = 100_000
FRACTIONS = (0.25, 0.5, 1.0)
TRACE_POINTS = 100  # regret curves: points per run, evenly spaced over the budget


def _asha(grace: int, eta: int, **kwargs: Any) -> Callable[[int], TrialScheduler]:
    def make(max_t: int) -> TrialScheduler:
        return AsyncHyperBandScheduler(
            max_t=max_t, grace_period=grace, reduction_factor=eta, **kwargs
        )

    return make


SCHEDULERS: dict[str, Callable[[int], TrialScheduler | None]] = {
    "random": lambda max_t: None,
    "asha": _asha(1, 3),
    "ahb": _asha(1, 3, brackets=3),  # async HyperBand: first rungs at 1, 3 and 9
    "hyperband": lambda max_t: HyperBandScheduler(max_t=max_t, reduction_factor=3),
    "median": lambda max_t: MedianStoppingRule(time_attr="training_iteration", grace_period=1),
    # opt-in variants: a later first rung cuts fewer late bloomers; eta=4 cuts harder
    "asha-g3": _asha(3, 3),
    "asha-g9": _asha(9, 3),
    "asha-r4": _asha(1, 4),
    "asha-g3-r4": _asha(3, 4),
    "asha-g9-r4": _asha(9, 4),
    "asha-promo": _asha(1, 3, promotion=True),  # the ASHA paper's form (pause at rungs)
}
METHODS = tuple(SCHEDULERS)
DEFAULT_METHODS = ("random", "asha", "ahb", "hyperband", "median")


def make_scheduler(method: str, max_t: int) -> TrialScheduler | None:
    if method not in SCHEDULERS:
        raise ValueError(f"unknown method {method!r}: choose from {', '.join(METHODS)}")
    return SCHEDULERS[method](max_t)


def rank_correlation(a: list[float], b: list[float]) -> float:
    """Spearman's rho (no ties expected: the values are continuous)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def serial_time_to(problem: Problem, config: dict[str, Any], target: float) -> float | None:
    """Virtual seconds one worker needs to train `config` until it is at or below `target`."""
    total = 0.0
    for b in range(1, problem.max_budget + 1):
        total += problem.cost(config, b)
        if problem.true_loss(config, b) <= target:
            return total
    return None


def reference(
    problem: Problem, workers: int, full_trials: int, quantiles: list[str]
) -> dict[str, Any]:
    """Targets, median random value, optimum, ceilings and budget, once per problem."""
    rng = random.Random(12345)
    configs = [problem.sample(rng) for _ in range(REFERENCE_CONFIGS)]
    final = [problem.true_loss(c, problem.max_budget) for c in configs]
    opt_rng = random.Random(54321)
    optimum = min(
        problem.true_loss(problem.sample(opt_rng), problem.max_budget)
        for _ in range(OPTIMUM_CONFIGS)
    )
    mean_step_cost = statistics.fmean(problem.cost(c, 1) for c in configs)
    budgets = [b for b in (1, 3, 9, 27) if b < problem.max_budget]
    targets, t_hit = {}, {}
    for q in quantiles:
        target = float(np.percentile(final, float(q)))
        hits = [t for c in configs if (t := serial_time_to(problem, c, target)) is not None]
        targets[q] = target
        t_hit[q] = {"median": float(np.median(hits)), "min": min(hits), "n": len(hits)}
    return {
        "targets": targets,
        "t_hit": t_hit,
        "median_random": float(np.median(final)),
        "optimum": optimum,
        "mean_step_cost_s": mean_step_cost,
        "full_trial_s": mean_step_cost * problem.max_budget,
        # room for `full_trials` max-budget trials of average cost, `workers` at a time
        "time_budget_s": full_trials * mean_step_cost * problem.max_budget / workers,
        "rank_correlation_with_max_budget": {
            str(b): rank_correlation([problem.f(c, b)["loss"] for c in configs], final)
            for b in budgets
        },
    }


def run_once(
    problem: Problem, method: str, seed: int, time_budget_s: float, workers: int
) -> dict[str, Any]:
    """One tuning run; returns every result's (virtual timestamp, loss, noise-free loss)."""
    sim = SimulatedTrainable(
        problem.f,
        cost=problem.cost,
        max_budget=problem.max_budget,
        workers=workers,
        overhead_scale=0,  # reproducible; the driver's real time is not counted
        name=problem.name,
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tunefleet-eff-") as storage:
        results = tune.Tuner(
            sim,
            param_space=problem.param_space,
            tune_config=tune.TuneConfig(
                metric="loss",
                mode="min",
                num_samples=-1,
                time_budget_s=time_budget_s,
                search_alg=BasicVariantGenerator(seed=seed),
                scheduler=make_scheduler(method, problem.max_budget),
            ),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        ).fit()
        points: list[tuple[float, float, float]] = []  # (timestamp, reported loss, noise-free)
        for result in results:
            df = result.metrics_dataframe
            if df is None or df.empty:
                continue
            budgets = df["training_iteration"].tolist()
            true = [problem.true_loss(result.config, int(b)) for b in budgets]
            points.extend(zip(df["timestamp"].tolist(), df["loss"].tolist(), true, strict=True))
        # A trial stopped before its first result must not be an error (fixed 2026-11-23);
        # counted apart so that a regression shows.
        errors, no_result = [], []
        for e in results.errors:
            (no_result if str(e).startswith("NO_RESULT") else errors).append(str(e))
        trials = len(results)
    points.sort()
    return {
        "points": points,
        "trials": trials,
        "results": len(points),
        "errors": errors,
        "no_result": no_result,
        "wall_s": time.perf_counter() - started,
    }


def summarize_run(run: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Time-to-target per target, normalized regret at each fraction and over time."""
    budget, opt = ref["time_budget_s"], ref["optimum"]
    scale = ref["median_random"] - opt
    # The incumbent is the result with the lowest reported (noisy) loss; its quality is
    # its noise-free loss, so that many noisy draws of one config do not count as progress.
    reported, best = math.inf, math.inf
    ttt: dict[str, float | None] = dict.fromkeys(ref["targets"])
    marks = [(q * budget, str(q)) for q in FRACTIONS]
    marks += [(budget * (i + 1) / TRACE_POINTS, f"trace{i}") for i in range(TRACE_POINTS)]
    marks.sort()
    at: dict[str, float | None] = {}
    for timestamp, loss, true in run["points"]:
        while marks and timestamp > marks[0][0]:
            at[marks.pop(0)[1]] = (best - opt) / scale if best < math.inf else None
        if loss < reported:
            reported, best = loss, true
        for q, target in ref["targets"].items():
            if ttt[q] is None and best <= target:
                ttt[q] = timestamp
    for _, key in marks:
        at[key] = (best - opt) / scale if best < math.inf else None
    return {
        "time_to_target_s": ttt,
        "regret": {str(q): at[str(q)] for q in FRACTIONS},
        "regret_trace": [at[f"trace{i}"] for i in range(TRACE_POINTS)],
        "best": best,
    }


def median_ttt(values: list[float | None]) -> float:
    """Median with "never" as +inf: inf when more than half never reach the target."""
    return float(np.median([math.inf if v is None else v for v in values]))


def fmt_time(value: float, budget: float) -> str:
    return f">{budget:,.0f}" if math.isinf(value) else f"{value:,.0f}"


def speedup(rs: float, other: float, budget: float) -> str:
    if math.isinf(other):
        return "n/a (never)" if math.isinf(rs) else "<1 (never)"
    if math.isinf(rs):
        return f">{budget / other:.1f}x"
    return f"{rs / other:.1f}x"


def paired(rows: dict[str, list[Any]], method: str, q: str, budget: float) -> list[float]:
    """RS time-to-target / the method's, per seed; "never" counts as the whole budget."""
    ratios = []
    for rs, other in zip(rows["random"], rows[method], strict=True):
        a = rs["time_to_target_s"][q] or budget
        b = other["time_to_target_s"][q] or budget
        ratios.append(a / b)
    return ratios


def ceilings(ref: dict[str, Any], rs_median: float, q: str) -> tuple[float, float]:
    """(typical, absolute) bound on any method's speed-up: RS median TTT / t_hit."""
    hit = ref["t_hit"][q]
    return rs_median / hit["median"], rs_median / hit["min"]


def print_table(
    problem: Problem, ref: dict[str, Any], rows: dict[str, list[Any]], workers: int
) -> None:
    budget = ref["time_budget_s"]
    corr = ", ".join(f"b={b}: {v:+.2f}" for b, v in ref["rank_correlation_with_max_budget"].items())
    targets = ", ".join(f"p{q} {t:.4g}" for q, t in ref["targets"].items())
    print(f"\n## {problem.name}: {problem.description}")
    print(
        f"budget {budget:,.0f} virtual s x {workers} workers "
        f"({budget / ref['full_trial_s']:.1f} rounds of average max-budget trials); "
        f"targets {targets} (of {REFERENCE_CONFIGS:,} random configs at budget "
        f"{problem.max_budget}); median random {ref['median_random']:.4g}; "
        f"optimum estimate {ref['optimum']:.4g}"
    )
    print(f"rank correlation of the loss at budget b with the max-budget loss: {corr}")
    for q, hit in ref["t_hit"].items():
        rs = median_ttt([s["time_to_target_s"][q] for s in rows["random"]])
        typical, most = ceilings(ref, rs, q)
        bound = "n/a (RS never)" if math.isinf(rs) else f"{typical:.1f}x typical, {most:.1f}x most"
        print(
            f"p{q}: t_hit (one worker) median {hit['median']:,.0f} s, min {hit['min']:,.0f} s "
            f"({hit['n']} of {REFERENCE_CONFIGS:,} configs); RS needs ~1/(p*W) = "
            f"{100 / (float(q) * workers):.1f} rounds; ceiling on any speed-up: {bound}"
        )
    cols = "".join(f" {'p' + q + ' TTT':>10} {'never':>5} {'speed-up':>10}" for q in ref["targets"])
    header = (
        f"{'method':<11}{cols} {'regret@25%':>10} {'@50%':>6} {'@100%':>6} "
        f"{'trials/run':>10} {'no-result':>9} {'wall s/run':>10}"
    )
    print(header)
    print("-" * len(header))
    for method, summaries in rows.items():
        line = f"{method:<11}"
        for q in ref["targets"]:
            rs = median_ttt([s["time_to_target_s"][q] for s in rows["random"]])
            ttts = [s["time_to_target_s"][q] for s in summaries]
            med = median_ttt(ttts)
            never = sum(t is None for t in ttts) / len(ttts)
            line += f" {fmt_time(med, budget):>10} {never:>5.0%} {speedup(rs, med, budget):>10}"
        for q in FRACTIONS:
            values = [s["regret"][str(q)] for s in summaries if s["regret"][str(q)] is not None]
            line += f" {statistics.median(values):>{10 if q == 0.25 else 6}.3f}" if values else " -"
        trials = statistics.fmean(s["trials"] for s in summaries)
        wall = statistics.fmean(s["wall_s"] for s in summaries)
        no_result = sum(len(s["no_result"]) for s in summaries)
        print(f"{line} {trials:>10,.0f} {no_result:>9} {wall:>10.2f}")


def speedup_cells(
    refs: dict[str, Any], all_rows: dict[str, Any], method: str, q: str
) -> dict[str, dict[str, Any]]:
    """Per problem: median-TTT speed-up text, paired median, never counts, bound flag."""
    cells = {}
    for name, rows in all_rows.items():
        budget = refs[name]["time_budget_s"]
        rs = median_ttt([s["time_to_target_s"][q] for s in rows["random"]])
        ttts = [s["time_to_target_s"][q] for s in rows[method]]
        med = median_ttt(ttts)
        ratios = paired(rows, method, q, budget)
        cells[name] = {
            "text": speedup(rs, med, budget),
            "paired": float(np.median(ratios)),
            "never": sum(t is None for t in ttts),
            "rs_never": sum(s["time_to_target_s"][q] is None for s in rows["random"]),
            "seeds": len(ttts),
            "bound": math.isinf(rs) or math.isinf(med),
        }
    return cells


def print_summary(
    refs: dict[str, Any], all_rows: dict[str, Any], methods: list[str]
) -> dict[str, Any]:
    """Markdown tables (ready for RESULTS.md) of the speed-ups per target; returns them."""
    overall: dict[str, Any] = {}
    names = list(all_rows)
    for q in next(iter(refs.values()))["targets"]:
        print(f"\n### Speed-up vs random search alone, target = p{q} of random configs")
        print("median-TTT ratio (paired median over seeds; seeds that never reach it)\n")
        print(
            "| problem | rank corr. b=1/3/9/27 | RS median TTT s (never) "
            "| ceiling (typical / most) | " + " | ".join(methods[1:]) + " |"
        )
        print("|---" * (len(methods) + 3) + "|")
        overall[q] = {}
        for name in names:
            ref = refs[name]
            corr = " / ".join(f"{v:+.2f}" for v in ref["rank_correlation_with_max_budget"].values())
            rs = median_ttt([s["time_to_target_s"][q] for s in all_rows[name]["random"]])
            typical, most = ceilings(ref, rs, q)
            ceil = "RS never" if math.isinf(rs) else f"{typical:.1f}x / {most:.1f}x"
            rs_never = sum(s["time_to_target_s"][q] is None for s in all_rows[name]["random"])
            budget = ref["time_budget_s"]
            rs_text = f"{fmt_time(rs, budget)} ({rs_never}/{len(all_rows[name]['random'])})"
            cells = []
            for m in methods[1:]:
                c = speedup_cells(refs, {name: all_rows[name]}, m, q)[name]
                cells.append(f"{c['text']} ({c['paired']:.1f}x; {c['never']}/{c['seeds']})")
            print(f"| {name} | {corr} | {rs_text} | {ceil} | " + " | ".join(cells) + " |")
        line = []
        for m in methods[1:]:
            ratios = [
                r
                for name in names
                for r in paired(all_rows[name], m, q, refs[name]["time_budget_s"])
            ]
            overall[q][m] = float(np.median(ratios))
            line.append(f"{overall[q][m]:.1f}x")
        print("| paired median, all problems x seeds | | | | " + " | ".join(line) + " |")
    return overall


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per problem x method")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--full-trials",
        type=int,
        default=30,
        help="budget: time for this many max-budget trials of average cost, per worker set",
    )
    parser.add_argument("--problems", nargs="+", choices=sorted(PROBLEMS), default=list(PROBLEMS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS))
    parser.add_argument(
        "--target-quantiles",
        nargs="+",
        type=float,
        default=[5.0, 1.0],
        metavar="P",
        help="targets: these percentiles of random configs' max-budget loss (default 5 1)",
    )
    parser.add_argument("--quick", action="store_true", help="3 seeds, budget of 20 full trials")
    parser.add_argument("--json", metavar="OUT", help="write every figure to this file")
    parser.add_argument("--plots", metavar="DIR", help="write PNG plots there (matplotlib)")
    parser.add_argument("--plot-prefix", default="eff", help="PNG names: PREFIX_<problem>.png")
    parser.add_argument(
        "--from-json",
        nargs="+",
        metavar="IN",
        help="run nothing: print and plot the runs of these --json files (merged by problem)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.full_trials = 3, 20
    if "random" in args.methods:
        args.methods.remove("random")
    args.methods.insert(0, "random")  # the reference of every speed-up, first
    for q in args.target_quantiles:
        if not 0 < q < 50:
            parser.error(f"--target-quantiles {q}: each must be a percentile in (0, 50)")
    args.target_quantiles = [f"{q:g}" for q in args.target_quantiles]
    return args


def run_problem(problem: Problem, args: argparse.Namespace) -> tuple[dict[str, Any], Any, bool]:
    """Every method x seed on one problem: (reference, rows per method, any trial failed)."""
    ref = reference(problem, args.workers, args.full_trials, args.target_quantiles)
    rows: dict[str, list[Any]] = {m: [] for m in args.methods}
    failed = False
    for method in args.methods:
        for seed in range(args.seeds):
            run = run_once(problem, method, seed, ref["time_budget_s"], args.workers)
            if run["errors"]:
                failed = True
                print(f"{problem.name}/{method}/seed {seed}: {len(run['errors'])} trial errors:")
                print("  " + run["errors"][0][:500])
            summary = summarize_run(run, ref)
            keys = ("trials", "results", "errors", "no_result", "wall_s")
            summary.update({k: run[k] for k in keys})
            summary["seed"] = seed
            rows[method].append(summary)
    return ref, rows, failed


def load(paths: list[str], args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Merge the problems of earlier `--json` files (same methods, targets and workers)."""
    refs: dict[str, Any] = {}
    all_rows: dict[str, Any] = {}
    for path in paths:
        payload = json.loads(Path(path).read_text())
        saved = payload["args"]
        if all_rows and (saved["methods"], saved["workers"]) != (args.methods, args.workers):
            raise SystemExit(f"{path}: other methods or workers than {paths[0]}; not merged")
        args.methods, args.workers = saved["methods"], saved["workers"]
        args.target_quantiles = saved["target_quantiles"]
        refs.update(payload["references"])
        all_rows.update(payload["runs"])
    args.problems = list(all_rows)
    return refs, all_rows


def plot_speedups(args: argparse.Namespace, refs: dict[str, Any], all_rows: Any) -> None:
    path = Path(args.plots) / f"{args.plot_prefix}_speedups.png"
    cells = {
        q: {m: speedup_cells(refs, all_rows, m, q) for m in args.methods[1:]}
        for q in args.target_quantiles
    }
    bounds = {}
    for q in args.target_quantiles:
        bounds[q] = {}
        for name, rows in all_rows.items():
            rs = median_ttt([s["time_to_target_s"][q] for s in rows["random"]])
            bounds[q][name] = ceilings(refs[name], rs, q)[0]
    _plot.speedup_bars(path, cells, bounds, args.workers)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plots and (missing := _plot.missing()):
        print(f"no plots: {missing}", file=sys.stderr)
        args.plots = None
    started = time.perf_counter()
    refs: dict[str, dict[str, Any]] = {}
    all_rows: dict[str, dict[str, list[Any]]] = {}
    failed = False
    if args.from_json:
        refs, all_rows = load(args.from_json, args)
    for name in args.problems:
        problem = PROBLEMS[name]
        if not args.from_json:
            refs[name], all_rows[name], failed_here = run_problem(problem, args)
            failed = failed or failed_here
        print_table(problem, refs[name], all_rows[name], args.workers)
        if args.plots:
            path = Path(args.plots) / f"{args.plot_prefix}_{name}.png"
            _plot.regret_curves(path, problem.name, refs[name], all_rows[name])
            print(f"plot: {path}")
    overall = print_summary(refs, all_rows, args.methods)
    if args.plots and len(args.methods) > 1:
        plot_speedups(args, refs, all_rows)
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")
    if args.json:
        payload = {
            "args": vars(args),
            "references": refs,
            "runs": all_rows,
            "median_paired_speedup_vs_random": overall,
        }
        Path(args.json).write_text(json.dumps(payload, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
