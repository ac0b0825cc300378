"""How fast each method finds a good config: searchers, schedulers and their pairs.

Runs on the simulated backend (virtual time, see docs/simulated.md) over the synthetic
problems of ``problems.py``. Every method gets the same budget of workers x virtual
time (``num_samples=-1``, ``time_budget_s``). A method is a searcher paired with a
scheduler, both seeded by the run's seed; random-search methods draw from
``BasicVariantGenerator(seed=s)``, so a seed gives them the same sequence of configs.

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
    (It bounds early stopping of random configs; a model-based searcher can beat it.)
``regret@q``
    ``(incumbent - opt) / (median random - opt)`` at ``q`` = 25/50/100 % of the time
    budget, mean and median over seeds; ``opt`` is the lowest noise-free max-budget
    loss of 100,000 random configs (a searcher can go below it: negative regret),
    ``median random`` the median of the 2,000 above.
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
from methods import (
    COLORS,
    DEFAULT_METHODS,
    METHODS,
    PAIR_SCHEDULERS,
    SCHEDULERS,
    SEARCHERS,
    is_model_based_multi_fidelity,
    make_method,
    parse_method,
)
from problems import PROBLEMS, Problem

import tunefleet as tune
from tunefleet import search
from tunefleet.backends.simulated import SimulatedTrainable

REFERENCE_CONFIGS = 2_000
OPTIMUM_CONFIGS = 100_000
FRACTIONS = (0.25, 0.5, 1.0)
TRACE_POINTS = 100  # regret curves: points per run, evenly spaced over the budget
CPU = "suggest_cpu_s"


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
        # A trial stopped before its first result must not be an error (fixed 2026-11-23);
        # counted apart so that a regression shows.
        errors, no_result = [], []
        for e in results.errors:
            (no_result if str(e).startswith("NO_RESULT") else errors).append(str(e))
        trials = len(results)
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
    rs_by_seed = {s["seed"]: s for s in rows["random"]}
    ratios = []
    for other in rows[method]:
        if (rs := rs_by_seed.get(other["seed"])) is None:
            continue
        a = rs["time_to_target_s"][q] or budget
        b = other["time_to_target_s"][q] or budget
        ratios.append(a / b)
    return ratios


def regrets(summaries: list[dict[str, Any]], q: float) -> list[float]:
    """The regret at fraction `q` of every seed that has a result by then."""
    return [s["regret"][str(q)] for s in summaries if s["regret"][str(q)] is not None]


def mean_ranks(rows: dict[str, list[Any]]) -> dict[str, float]:
    """Mean over seeds of each method's rank by final regret (1 = best, ties averaged).

    The methods run on the most seeds are ranked among themselves; a method with fewer
    seeds is ranked on its seeds as 1 + the number of those it trails (ties: half).
    """
    final = {m: {s["seed"]: s["regret"]["1.0"] for s in rows[m]} for m in rows}
    most = max(len(v) for v in final.values())
    full = [m for m in rows if len(final[m]) == most]
    seeds = set.intersection(*(set(final[m]) for m in full))
    ranks: dict[str, list[float]] = {m: [] for m in rows}
    for seed in sorted(seeds):
        for m in rows:
            if seed not in final[m]:
                continue
            mine = final[m][seed]
            others = [final[o][seed] for o in full if o != m]
            key = math.inf if mine is None else mine
            worse = [math.inf if v is None else v for v in others]
            ranks[m].append(1 + sum(v < key for v in worse) + 0.5 * sum(v == key for v in worse))
    return {m: statistics.fmean(r) if r else math.nan for m, r in ranks.items()}


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
        f"{'method':<13}{cols} {'regret@25% mean/med':>19} {'@50%':>13} {'@100%':>13} "
        f"{'rank':>5} {'seeds':>5} {'trials/run':>10} {'no-result':>9} {'ms/sugg real/cpu':>16} "
        f"{'search s/run real/cpu':>21} {'wall s/run':>10}"
    )
    print(header)
    print("-" * len(header))
    ranks = mean_ranks(rows)
    for method, summaries in rows.items():
        line = f"{method:<13}"
        for q in ref["targets"]:
            rs = median_ttt([s["time_to_target_s"][q] for s in rows["random"]])
            ttts = [s["time_to_target_s"][q] for s in summaries]
            med = median_ttt(ttts)
            never = sum(t is None for t in ttts) / len(ttts)
            line += f" {fmt_time(med, budget):>10} {never:>5.0%} {speedup(rs, med, budget):>10}"
        for q in FRACTIONS:
            values = regrets(summaries, q)
            cell = (
                f"{statistics.fmean(values):.3f}/{statistics.median(values):.3f}" if values else "-"
            )
            line += f" {cell:>{19 if q == 0.25 else 13}}"
        trials = statistics.fmean(s["trials"] for s in summaries)
        wall = statistics.fmean(s["wall_s"] for s in summaries)
        no_result = sum(len(s["no_result"]) for s in summaries)
        print(
            f"{line} {ranks[method]:>5.2f} {len(summaries):>5} {trials:>10,.0f} {no_result:>9} "
            f"{decision_cells(summaries)[0]:>16} {decision_cells(summaries)[1]:>21} {wall:>10.2f}"
        )


def decision_cells(summaries: list[dict[str, Any]]) -> tuple[str, str]:
    """("real/CPU ms per suggestion", "real/CPU searcher s per run")."""
    per = f"{1000 * per_suggestion(summaries):.1f}/{1000 * per_suggestion(summaries, CPU):.1f}"
    run = "/".join(
        f"{statistics.fmean(s.get(k, 0.0) for s in summaries):.2f}"
        for k in ("searcher_s", "searcher_cpu_s")
    )
    return per, run


def per_suggestion(summaries: list[dict[str, Any]], key: str = "suggest_s") -> float:
    """Seconds in `suggest` (real; CPU with key="suggest_cpu_s") per config, all runs."""
    configs = sum(s.get("suggestions", 0) for s in summaries)
    return sum(s.get(key, 0.0) for s in summaries) / configs if configs else 0.0


def print_regret_summary(
    refs: dict[str, Any], all_rows: dict[str, Any], methods: list[str]
) -> dict[str, Any]:
    """Markdown: mean (median) regret per fraction, mean rank, p5 TTT; the issue's target."""
    q = next(iter(refs.values()))["targets"]
    q = "5" if "5" in q else next(iter(q))
    print("\n### Normalized regret at 25 / 50 / 100 % of the budget: mean (median) over seeds")
    print(
        "\n| problem | method | seeds | regret@25% | regret@50% | regret@100% | mean rank "
        f"| p{q} TTT s (never) | speed-up vs RS (paired) | trials/run "
        "| ms/suggestion real (CPU) |"
    )
    print("|---" * 11 + "|")
    verdicts: dict[str, Any] = {}
    for name, rows in all_rows.items():
        budget = refs[name]["time_budget_s"]
        ranks = mean_ranks(rows)
        for i, m in enumerate(methods):
            if m not in rows:
                continue
            summaries = rows[m]
            cells = []
            for f in FRACTIONS:
                v = regrets(summaries, f)
                cells.append(f"{statistics.fmean(v):.3f} ({statistics.median(v):.3f})")
            ttts = [s["time_to_target_s"][q] for s in summaries]
            never = sum(t is None for t in ttts)
            sp = speedup_cells(refs, {name: rows}, m, q)[name] if m != "random" else None
            speed = f"{sp['text']} ({sp['paired']:.1f}x)" if sp else "1.0x"
            trials = statistics.fmean(s["trials"] for s in summaries)
            print(
                f"| {name if i == 0 else ''} | {m} | {len(summaries)} | "
                + " | ".join(cells)
                + f" | {ranks[m]:.2f} | {fmt_time(median_ttt(ttts), budget)} ({never}) "
                f"| {speed} | {trials:,.0f} | {1000 * per_suggestion(summaries):.1f} "
                f"({1000 * per_suggestion(summaries, CPU):.1f}) |"
            )
        verdicts[name] = target_verdict(rows)
    if len(all_rows) > 1:
        print_overall(all_rows, methods)
    print("\nIssue target: the best model-based multi-fidelity method beats ASHA+RS (`asha`)")
    print("in MEAN normalized regret at 50 % and at 100 % of the budget.")
    for name, v in verdicts.items():
        print(f"- {name}: {v['text']}")
    overall = target_verdict(
        {
            m: [
                {**s, "key": (name, s["seed"])}
                for name, rows in all_rows.items()
                for s in rows.get(m, [])
            ]
            for m in methods
        }
    )
    print(f"- all problems x seeds: {overall['text']}")
    verdicts["all"] = overall
    return verdicts


def print_overall(all_rows: dict[str, Any], methods: list[str]) -> None:
    """Markdown: per method, regret pooled over problems x seeds and the mean rank."""
    print("\n### All problems: mean normalized regret over problems x seeds, mean rank\n")
    print("| method | runs | regret@25% | regret@50% | regret@100% | mean rank | ms/suggestion |")
    print("|---" * 7 + "|")
    ranks = {name: mean_ranks(rows) for name, rows in all_rows.items()}
    for m in methods:
        names = [name for name, rows in all_rows.items() if m in rows]
        pooled = [s for name in names for s in all_rows[name][m]]
        cells = [f"{statistics.fmean(regrets(pooled, f)):.3f}" for f in FRACTIONS]
        # mean over every (problem, seed) rank: weighted by the seeds of each problem
        rank = sum(ranks[n][m] * len(all_rows[n][m]) for n in names) / len(pooled)
        print(
            f"| {m} | {len(pooled)} | " + " | ".join(cells) + f" | {rank:.2f} "
            f"| {1000 * per_suggestion(pooled):.1f} |"
        )


def target_verdict(rows: dict[str, list[Any]]) -> dict[str, Any]:
    """Whether the best model-based multi-fidelity method's mean regret beats ASHA's."""
    contenders = [m for m in rows if rows[m] and is_model_based_multi_fidelity(m)]
    if "asha" not in rows or not rows["asha"] or not contenders:
        return {"met": None, "text": "n/a (needs asha and a model-based multi-fidelity method)"}
    means = {
        m: {f: statistics.fmean(regrets(rows[m], f)) for f in (0.5, 1.0)}
        for m in [*contenders, "asha"]
    }
    winners = [m for m in contenders if all(means[m][f] < means["asha"][f] for f in (0.5, 1.0))]
    best = min(winners or contenders, key=lambda m: means[m][1.0])
    # paired by seed (and problem): how often the contender is strictly better than ASHA
    asha = {s.get("key", s["seed"]): s["regret"]["1.0"] for s in rows["asha"]}
    wins = {}
    for m in contenders:
        pairs = [(s["regret"]["1.0"], asha.get(s.get("key", s["seed"]))) for s in rows[m]]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        wins[m] = (sum(a < b for a, b in pairs), sum(a > b for a, b in pairs), len(pairs))
    figures = "; ".join(
        f"{m} {means[m][0.5]:.3f} / {means[m][1.0]:.3f}"
        + (
            f" (final: better on {wins[m][0]}, worse on {wins[m][1]} of {wins[m][2]})"
            if m in wins
            else ""
        )
        for m in means
    )
    verdict = f"met by {', '.join(winners)}" if winners else "NOT met"
    text = f"mean regret @50% / @100%: {figures} -> {verdict}"
    return {
        "met": bool(winners),
        "best": best,
        "winners": winners,
        "means": means,
        "wins_losses_pairs": wins,
        "text": text,
    }


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
                if m not in all_rows[name]:
                    cells.append("-")
                    continue
                c = speedup_cells(refs, {name: all_rows[name]}, m, q)[name]
                cells.append(f"{c['text']} ({c['paired']:.1f}x; {c['never']}/{c['seeds']})")
            print(f"| {name} | {corr} | {rs_text} | {ceil} | " + " | ".join(cells) + " |")
        line = []
        for m in methods[1:]:
            ratios = [
                r
                for name in names
                if m in all_rows[name]
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


def plot_speedups(args: argparse.Namespace, refs: dict[str, Any], all_rows: Any) -> None:
    path = Path(args.plots) / f"{args.plot_prefix}_speedups.png"
    everywhere = [m for m in args.methods[1:] if all(m in rows for rows in all_rows.values())]
    cells = {
        q: {m: speedup_cells(refs, all_rows, m, q) for m in everywhere}
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


def plot_mean_regret(args: argparse.Namespace, refs: dict[str, Any], all_rows: Any) -> None:
    """MEAN normalized regret over seeds vs virtual time: one panel per problem."""
    plt = _plot._pyplot()
    floor = 1e-4
    names = list(all_rows)
    cols = min(2, len(names))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 3.6 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        budget = refs[name]["time_budget_s"]
        for i, method in enumerate(args.methods):
            if method not in all_rows[name]:
                continue
            summaries = all_rows[name][method]
            traces = np.array(
                [[np.nan if v is None else v for v in s["regret_trace"]] for s in summaries]
            )
            ok = ~np.isnan(traces).any(axis=0)  # every seed has a result
            times = budget * (np.arange(traces.shape[1]) + 1) / traces.shape[1]
            mean = np.maximum(traces[:, ok].mean(axis=0), floor)
            style = "--" if parse_method(method)[0] == "rs" else "-"
            label = f"{method} ({len(summaries)})"
            ax.plot(times[ok], mean, style, color=_plot._color(method, i), label=label, lw=1.5)
        ax.set_yscale("log")
        ax.set_xlim(0, budget)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("virtual time (s)", fontsize=8)
        ax.set_ylabel("mean normalized regret", fontsize=8)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), fontsize=8)
    fig.suptitle(
        f"mean normalized regret over seeds (seeds in brackets; dashed: random configs), "
        f"{args.workers} workers, overhead_scale={args.overhead_scale:g}, floor {floor:g}",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = Path(args.plots) / f"{args.plot_prefix}_mean_regret.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)  # four panels: under 150 KB
    plt.close(fig)
    print(f"plot: {path}")


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
