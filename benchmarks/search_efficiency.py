"""How fast each method finds a good config: searchers, schedulers and their pairs.

Runs on the simulated backend (virtual time, see docs/simulated.md) over the synthetic
problems of ``problems.py`` (the default) and, opt-in, real learning curves tabulated on
this machine (``tab-digits-mlp``, ``tab-gbm``, ``tab-gbm-late``: ``tabulated.py``).
Every method gets the same budget of workers x virtual time (``num_samples=-1``,
``time_budget_s``). A method is a searcher paired with a scheduler, both seeded by the
run's seed; random-search methods draw from ``BasicVariantGenerator(seed=s)``, so a
seed gives them the same sequence of configs.

Methods (default): random search alone (FIFO, every trial runs to the max budget), ASHA
(stopping form, ``grace_period=1, reduction_factor=3``), async HyperBand ("ahb": the same
with ``brackets=3``), HyperBand (``reduction_factor=3``, synchronous, pause/resume) and
the median stopping rule (on ``training_iteration``, ``grace_period=1``), all with
``max_t`` = the problem's max budget. Opt-in variants: ``asha-g{3,9}`` (grace period),
``asha-r4`` / ``asha-g{3,9}-r4`` (reduction factor 4), ``asha-promo`` (promotion form).
Opt-in searchers (``SEARCHERS``): ``tpe`` (``OptunaSearch(seed=s)``), ``gp``
(``BayesOptSearch(random_state=s)``, Optuna's GPSampler), ``cmaes``
(``OptunaSearch(sampler="cmaes", seed=s)``), alone (FIFO); ``bohb`` (``TuneBOHB(seed=s)``
with ``HyperBandForBOHB(max_t)``) and ``asha-tpe`` (``OptunaSearch`` with ASHA). Any
``SEARCHER+SCHEDULER`` pair also works, e.g. ``tpe+ahb`` or ``rs+asha-g3``.
Peers, on the tabulated problems only, in their own ask-and-tell loops on simulated
workers, run by ``.venv-peers``: ``optuna-tpe-sha`` / ``optuna-tpe-hb`` (Optuna's TPE with
its ``SuccessiveHalvingPruner`` / ``HyperbandPruner``, ``peers/optuna_tabulated.py``),
``syne-asha`` / ``syne-bohb`` (Syne Tune's, ``peers/syne_tune_tabulated.py``).

Figures, per problem x method over the seeds:

``incumbent``
    At any virtual time, the result (any trial, any budget) with the lowest reported,
    noisy loss so far: what a user would pick. Its quality is its noise-free loss at
    that budget, so that many noisy draws of one converged config are not progress.
``time-to-target``
    Virtual seconds until the incumbent's noise-free loss is at or below a target, the
    p-th percentile of the noise-free max-budget loss of 2,000 random configs, for each
    p of ``--target-quantiles`` (5 and 1); for a tabulated problem, of the table's own
    configs. The table shows the median over seeds (">budget" when more than half never
    reach it), apart from it the median over the runs that reach it ("hit med") and the
    miss rate (the fraction of runs that never do).
``ceiling``
    Any method must train one config until it reaches the target, serially. ``t_hit``
    is that serial time for the 2,000 configs that reach it (median and minimum), and
    random search's median time-to-target over it bounds every method's speed-up:
    ``RS / median t_hit`` for a typical winner, ``RS / min t_hit`` at the very most.
    Random search needs about ``1 / (p * workers)`` rounds of max-budget trials.
    (It bounds early stopping of random configs; a model-based searcher can beat it.)
``regret@q``
    ``(incumbent - opt) / (median random - opt)`` at ``q`` = 25/50/100 % of the time
    budget, mean and median over seeds; ``opt`` is the lowest noise-free max-budget
    loss of 100,000 random configs (a searcher can go below it: negative regret),
    ``median random`` the median of the 2,000 above. For a tabulated problem, ``opt`` is
    the table's lowest loss at any step and the median is the table's.
``95 % CI``
    Bootstrap over seeds (2,000 resamples with replacement, seeded, percentile
    interval): on the mean regret at 25/50/100 % and on every speed-up ratio (seeds
    resampled in pairs with random search's; "never" counted as the whole budget).
``trials/run``
    Trials that started: reported at least one result (``no-result``: created but
    never run, or cut by the budget before their first result).
``rank``
    Per seed, the methods ranked by final regret (1 = best, ties averaged), averaged
    over seeds. A method run on fewer seeds than the most (``--from-json`` merges) is
    ranked against the others on its seeds (1 + how many it trails), which leaves their
    ranks unchanged.
``speed-up``
    Random search's median time-to-target over the method's (">x" when random search's
    median is "never": a lower bound), and the paired median over seeds of the ratio
    per seed ("never" counted as the whole budget, so a bound where it occurs).
``decision time``
    Real seconds in the searcher per suggestion (``suggest`` only) and per run (every
    hook: suggest, results, ends, ``get_state``). With ``--overhead-scale 0`` (the
    default) the driver's real time is not added to virtual time, so a slow searcher
    costs nothing there; ``--overhead-scale 1`` charges it (start of trials wait).

    .. code-block:: sh

        .venv/bin/python benchmarks/search_efficiency.py --quick
        .venv/bin/python benchmarks/search_efficiency.py --plots benchmarks/plots
        .venv/bin/python benchmarks/search_efficiency.py --methods asha-g3 asha-g9-r4
        .venv/bin/python benchmarks/search_efficiency.py --methods tpe cmaes asha bohb \
            asha-tpe --target-quantiles 5 --jobs 2 --json searchers.json
        nice -n 5 .venv/bin/python benchmarks/search_efficiency.py --seeds 30 \
            --problems tab-digits-mlp tab-gbm tab-gbm-late \
            --methods random tpe asha asha-tpe bohb --json tabulated.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
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
from efficiency_report import (
    FRACTIONS,
    REFERENCE_CONFIGS,
    plot_mean_regret,
    plot_speedups,
    print_regret_summary,
    print_summary,
    print_table,
)
from methods import (
    COLORS,
    DEFAULT_METHODS,
    METHODS,
    PAIR_SCHEDULERS,
    PEERS,
    SCHEDULERS,
    SEARCHERS,
    make_method,
    parse_method,
    run_peer,
)
from problems import DEFAULT_PROBLEMS, PROBLEMS, Problem

import tunefleet as tune
from tunefleet import search
from tunefleet.backends.simulated import SimulatedTrainable

OPTIMUM_CONFIGS = 100_000
TRACE_POINTS = 100  # regret curves: points per run, evenly spaced over the budget


def time_hooks(searcher: search.Searcher) -> dict[str, Any]:
    """Wrap the searcher's hooks to add up their real and CPU time; returns the counters.

    CPU time (the process's, all threads) does not count time lost to other processes
    on a shared machine; real time does.
    """
    timing: dict[str, Any] = {"suggest_s": [], "suggest_cpu_s": 0.0, "configs": 0}
    timing.update(hooks_s=0.0, hooks_cpu_s=0.0)

    def timed(name: str) -> Callable[..., Any]:
        hook = getattr(searcher, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.process_time()
            out = hook(*args, **kwargs)
            took, took_cpu = time.perf_counter() - started, time.process_time() - cpu
            timing["hooks_s"] += took
            timing["hooks_cpu_s"] += took_cpu
            if name == "suggest":
                timing["suggest_s"].append(took)
                timing["suggest_cpu_s"] += took_cpu
                timing["configs"] += isinstance(out, dict)
            return out

        return call

    for name in ("suggest", "on_trial_result", "on_trial_complete", "get_state"):
        setattr(searcher, name, timed(name))  # the instance's attribute wins over the class's
    return timing


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
    if problem.reference_configs is not None:  # a table: its configs are the truth
        configs = problem.reference_configs()
        final = [problem.true_loss(c, problem.max_budget) for c in configs]
        # every config maps onto a row, and the incumbent may be a result at any budget
        # (real curves climb back up): the lowest loss at any step is the optimum
        steps = range(1, problem.max_budget + 1)
        optimum = min(problem.true_loss(c, b) for c in configs for b in steps)
    else:
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
        "reference_configs": len(configs),
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
    problem: Problem,
    method: str,
    seed: int,
    time_budget_s: float,
    workers: int,
    overhead_scale: float = 0.0,
) -> dict[str, Any]:
    """One tuning run; returns every result's (virtual timestamp, loss, noise-free loss)."""
    sim = SimulatedTrainable(
        problem.f,
        cost=problem.cost,
        max_budget=problem.max_budget,
        workers=workers,
        overhead_scale=overhead_scale,  # 0: reproducible, the driver's real time not counted
        name=problem.name,
    )
    searcher, scheduler = make_method(method, seed, problem.max_budget)
    timing = time_hooks(searcher)
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
                search_alg=searcher,
                scheduler=scheduler,
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
        # A trial the budget stopped before its first result is not an error: it ends
        # TERMINATED with no metrics (as in Ray Tune); counted apart, for the record.
        errors = [str(e) for e in results.errors]
        no_result = [result.path for result in results if not result.metrics]
        # started = reported a result: a trial created but never given a worker, or cut
        # by the time budget before its first result, is in `no_result` only
        trials = len(results) - len(no_result)
    points.sort()
    suggest_s = timing["suggest_s"]
    return {
        "points": points,
        "trials": trials,
        "results": len(points),
        "errors": errors,
        "no_result": no_result,
        "wall_s": time.perf_counter() - started,
        "searcher_s": timing["hooks_s"],
        "searcher_cpu_s": timing["hooks_cpu_s"],
        "suggest_s": sum(suggest_s),
        "suggest_cpu_s": timing["suggest_cpu_s"],
        "suggestions": timing["configs"],
        "suggest_p50_s": float(np.median(suggest_s)) if suggest_s else 0.0,
        "suggest_max_s": max(suggest_s, default=0.0),
        "last_timestamp": points[-1][0] if points else 0.0,
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
    parser.add_argument(
        "--problems",
        nargs="+",
        choices=sorted(PROBLEMS),
        default=list(DEFAULT_PROBLEMS),
        help="default: the synthetic ones; tab-*: real learning curves (tabulated.py)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(DEFAULT_METHODS),
        metavar="METHOD",
        help=f"any of {', '.join(METHODS)}, or SEARCHER+SCHEDULER (searchers: "
        f"{', '.join(SEARCHERS)}; schedulers: {', '.join([*SCHEDULERS, *PAIR_SCHEDULERS])})",
    )
    parser.add_argument(
        "--target-quantiles",
        nargs="+",
        type=float,
        default=[5.0, 1.0],
        metavar="P",
        help="targets: these percentiles of random configs' max-budget loss (default 5 1)",
    )
    parser.add_argument(
        "--overhead-scale",
        type=float,
        default=0.0,
        help="factor on the driver's real time added to virtual time (0: not charged, "
        "reproducible; 1: the searchers' decision time is charged)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (processes)")
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
    for method in args.methods:
        try:
            parse_method(method)
        except ValueError as e:
            parser.error(str(e))
    if any(m in PEERS for m in args.methods) and not all(
        PROBLEMS[p].reference_configs for p in args.problems
    ):
        parser.error(f"{', '.join(PEERS)} run on the tabulated problems (tab-*) only")
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


def run_task(task: tuple[str, str, int, dict[str, Any], int, float]) -> dict[str, Any]:
    """One run, summarized (the unit of work of --jobs)."""
    name, method, seed, ref, workers, overhead_scale = task
    if method in PEERS:  # Optuna's own loop, in the peers' environment
        run = run_peer(name.removeprefix("tab-"), method, seed, ref["time_budget_s"], workers)
    else:
        run = run_once(PROBLEMS[name], method, seed, ref["time_budget_s"], workers, overhead_scale)
    summary = summarize_run(run, ref)
    keys = (
        *("trials", "results", "errors", "no_result", "wall_s", "searcher_s", "suggest_s"),
        *("searcher_cpu_s", "suggest_cpu_s", "suggestions", "suggest_p50_s", "suggest_max_s"),
        "last_timestamp",
    )
    summary.update({k: run[k] for k in keys})
    summary["seed"] = seed
    return summary


def run_problem(problem: Problem, args: argparse.Namespace) -> tuple[dict[str, Any], Any, bool]:
    """Every method x seed on one problem: (reference, rows per method, any trial failed)."""
    ref = reference(problem, args.workers, args.full_trials, args.target_quantiles)
    tasks = [
        (problem.name, method, seed, ref, args.workers, args.overhead_scale)
        for method in args.methods
        for seed in range(args.seeds)
    ]
    if args.jobs > 1:
        with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
            summaries = list(pool.map(run_task, tasks))
    else:
        summaries = [run_task(task) for task in tasks]
    rows: dict[str, list[Any]] = {m: [] for m in args.methods}
    failed = False
    for (_, method, seed, *_), summary in zip(tasks, summaries, strict=True):
        if summary["errors"]:
            failed = True
            print(f"{problem.name}/{method}/seed {seed}: {len(summary['errors'])} trial errors:")
            print("  " + summary["errors"][0][:500])
        rows[method].append(summary)
    return ref, rows, failed


def load(paths: list[str], args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Merge earlier `--json` files by problem and method (same workers, budget, targets).

    A method present in several files keeps the runs of the file with the most seeds.
    """
    refs: dict[str, Any] = {}
    all_rows: dict[str, Any] = {}
    methods: list[str] = []
    first: dict[str, Any] | None = None
    for path in paths:
        payload = json.loads(Path(path).read_text())
        saved = payload["args"]
        saved.setdefault("overhead_scale", 0.0)  # files from before the option
        same = ("workers", "full_trials", "target_quantiles", "overhead_scale")
        if first is not None and any(saved[k] != first[k] for k in same):
            raise SystemExit(f"{path}: other {', '.join(same)} than {paths[0]}; not merged")
        first = first or saved
        methods += [m for m in saved["methods"] if m not in methods]
        for name, rows in payload["runs"].items():
            refs.setdefault(name, payload["references"][name])
            merged = all_rows.setdefault(name, {})
            for m, runs in rows.items():
                if len(runs) > len(merged.get(m, [])):
                    merged[m] = runs
    assert first is not None
    args.methods, args.workers = methods, first["workers"]
    args.target_quantiles = first["target_quantiles"]
    args.overhead_scale = first["overhead_scale"]
    for rows in all_rows.values():  # every table lists the methods in one order
        ordered = {m: rows[m] for m in methods if m in rows}
        rows.clear()
        rows.update(ordered)
    args.problems = list(all_rows)
    return refs, all_rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plots and (missing := _plot.missing()):
        print(f"no plots: {missing}", file=sys.stderr)
        args.plots = None
    for method, color in COLORS.items():
        _plot.COLORS.setdefault(method, color)
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
    verdicts = print_regret_summary(refs, all_rows, args.methods)
    if args.plots and len(args.methods) > 1:
        plot_speedups(args, refs, all_rows)
        plot_mean_regret(args, refs, all_rows)
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")
    if args.json:
        payload = {
            "args": vars(args),
            "references": refs,
            "runs": all_rows,
            "median_paired_speedup_vs_random": overall,
            "target_verdicts": verdicts,
        }
        Path(args.json).write_text(json.dumps(payload, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
