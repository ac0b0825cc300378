"""The tables, summaries and plots of ``search_efficiency.py``, from its summarized runs.

Every function here reads the per-run summaries (``summarize_run`` plus the run's
counters) and the per-problem references that ``search_efficiency.py`` computes or
loads with ``--from-json``: time-to-target medians and speed-ups, normalized regret,
ranks, the issue's target verdict, decision time, and the PNGs. The figures are defined
in that module's docstring.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path
from typing import Any

import _plot  # siblings: the script's folder is on sys.path
import numpy as np
from methods import is_model_based_multi_fidelity, parse_method
from problems import Problem

REFERENCE_CONFIGS = 2_000  # random configs of a problem's reference (targets, ceilings)
FRACTIONS = (0.25, 0.5, 1.0)  # normalized regret at these fractions of the budget
CPU = "suggest_cpu_s"
RESAMPLES, RESAMPLE_SEED = 2_000, 0  # bootstrap over seeds: 95 % percentile intervals


def bootstrap(samples: np.ndarray, stat: Any) -> tuple[float, float]:
    """95 % interval of ``stat`` over the seeds resampled with replacement.

    ``samples`` has one row per seed (paired figures side by side in a row); ``stat``
    maps the resamples, shape ``(RESAMPLES, seeds, ...)``, to one value per resample.
    Seeded: the same runs give the same interval.
    """
    if len(samples) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(RESAMPLE_SEED)
    values = stat(samples[rng.integers(0, len(samples), (RESAMPLES, len(samples)))])
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def regret_ci(summaries: list[dict[str, Any]], q: float) -> str:
    """Mean regret at fraction `q` with its bootstrap interval: "x [lo, hi]"."""
    values = np.array(regrets(summaries, q))
    if not len(values):
        return "-"
    lo, hi = bootstrap(values, lambda x: x.mean(axis=1))
    return f"{values.mean():.3f} [{lo:.3f}, {hi:.3f}]"


def speedup_ci(rows: dict[str, list[Any]], method: str, q: str, budget: float) -> str:
    """Interval of RS median TTT / the method's, seeds resampled in pairs ("never" = budget)."""
    rs_by_seed = {s["seed"]: s for s in rows["random"]}
    pairs = np.array(
        [
            [
                rs_by_seed[s["seed"]]["time_to_target_s"][q] or budget,
                s["time_to_target_s"][q] or budget,
            ]
            for s in rows[method]
            if s["seed"] in rs_by_seed
        ]
    )
    if not len(pairs):
        return "[-]"
    lo, hi = bootstrap(pairs, lambda x: np.median(x[..., 0], axis=1) / np.median(x[..., 1], axis=1))
    return f"[{lo:.1f}, {hi:.1f}]"


def hit_median(values: list[float | None]) -> str:
    """Median time-to-target of the runs that reach it ("-": none does)."""
    hits = [v for v in values if v is not None]
    return f"{np.median(hits):,.0f}" if hits else "-"


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
        f"targets {targets} (of {ref.get('reference_configs', REFERENCE_CONFIGS):,} "
        f"{'tabulated' if problem.reference_configs else 'random'} configs at budget "
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
            f"({hit['n']} of {ref.get('reference_configs', REFERENCE_CONFIGS):,} configs); "
            f"RS needs ~1/(p*W) = "
            f"{100 / (float(q) * workers):.1f} rounds; ceiling on any speed-up: {bound}"
        )
    cols = "".join(
        f" {'p' + q + ' TTT':>10} {'hit med':>8} {'miss':>5} {'speed-up [95% CI]':>19}"
        for q in ref["targets"]
    )
    header = (
        f"{'method':<15}{cols} {'regret@25% mean [95% CI]/med':>28} {'@50%':>28} {'@100%':>28} "
        f"{'rank':>5} {'seeds':>5} {'trials/run':>10} {'no-result':>9} {'ms/sugg real/cpu':>16} "
        f"{'search s/run real/cpu':>21} {'wall s/run':>10}"
    )
    print(header)
    print("-" * len(header))
    ranks = mean_ranks(rows)
    for method, summaries in rows.items():
        line = f"{method:<15}"
        for q in ref["targets"]:
            rs = median_ttt([s["time_to_target_s"][q] for s in rows["random"]])
            ttts = [s["time_to_target_s"][q] for s in summaries]
            med = median_ttt(ttts)
            never = sum(t is None for t in ttts) / len(ttts)
            sp = speedup(rs, med, budget)
            if method != "random":
                sp += " " + speedup_ci(rows, method, q, budget)
            line += f" {fmt_time(med, budget):>10} {hit_median(ttts):>8} {never:>5.0%} {sp:>19}"
        for q in FRACTIONS:
            values = regrets(summaries, q)
            cell = f"{regret_ci(summaries, q)}/{statistics.median(values):.3f}" if values else "-"
            line += f" {cell:>28}"
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
    print(
        "\n### Normalized regret at 25 / 50 / 100 % of the budget: mean [bootstrap 95 % CI] "
        "(median) over seeds"
    )
    print(
        "\n| problem | method | seeds | regret@25% | regret@50% | regret@100% | mean rank "
        f"| p{q} TTT s (never) | miss rate | speed-up vs RS [95% CI] (paired) | trials/run "
        "| ms/suggestion real (CPU) |"
    )
    print("|---" * 12 + "|")
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
                cells.append(f"{regret_ci(summaries, f)} ({statistics.median(v):.3f})")
            ttts = [s["time_to_target_s"][q] for s in summaries]
            never = sum(t is None for t in ttts)
            sp = speedup_cells(refs, {name: rows}, m, q)[name] if m != "random" else None
            ci = speedup_ci(rows, m, q, budget) if sp else ""
            speed = f"{sp['text']} {ci} ({sp['paired']:.1f}x)" if sp else "1.0x"
            trials = statistics.fmean(s["trials"] for s in summaries)
            print(
                f"| {name if i == 0 else ''} | {m} | {len(summaries)} | "
                + " | ".join(cells)
                + f" | {ranks[m]:.2f} | {fmt_time(median_ttt(ttts), budget)} ({never}) "
                f"| {never / len(ttts):.0%} "
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
        print(
            "median-TTT ratio [bootstrap 95 % CI, seeds resampled in pairs, never = the "
            "budget] (paired median over seeds; seeds that never reach it)\n"
        )
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
                ci = speedup_ci(all_rows[name], m, q, budget)
                cells.append(f"{c['text']} {ci} ({c['paired']:.1f}x; {c['never']}/{c['seeds']})")
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


def plot_speedups(args: argparse.Namespace, refs: dict[str, Any], all_rows: Any) -> None:
    path = Path(args.plots) / f"{args.plot_prefix}_speedups.png"
    everywhere = [m for m in args.methods[1:] if all(m in rows for rows in all_rows.values())]
    cells = {
        q: {m: speedup_cells(refs, all_rows, m, q) for m in everywhere}
        for q in args.target_quantiles
    }
    bounds: dict[str, dict[str, float]] = {}
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
