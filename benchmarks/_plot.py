"""PNG plots for the benchmarks: matplotlib (Agg backend), imported only when plotting.

matplotlib is not a tunefleet dependency (extra ``tunefleet[bench]``): ``missing()``
says why plots cannot be made, so a benchmark can print it and run on without them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

DPI = 100
COLORS = {
    "random": "#444444",
    "asha": "#1f77b4",
    "ahb": "#2ca02c",
    "hyperband": "#ff7f0e",
    "median": "#9467bd",
}
INSTALL = "matplotlib is not installed: pip install 'tunefleet[bench]' (or matplotlib)"


def missing() -> str | None:
    """None when plots can be made, else why not (to print)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return INSTALL
    return None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


EXTRA = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#d62728", "#000080", "#ff9896")


def _color(method: str, index: int) -> str:
    return COLORS.get(method, EXTRA[index % len(EXTRA)])


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)


def regret_curves(
    path: Path, title: str, ref: dict[str, Any], rows: dict[str, list[dict[str, Any]]]
) -> None:
    """Median normalized regret over seeds (25-75 % band) vs virtual time, per method."""
    import numpy as np

    plt = _pyplot()
    budget = ref["time_budget_s"]
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    floor = 1e-4  # below the estimated optimum, or at it: drawn at the floor
    for i, (method, summaries) in enumerate(rows.items()):
        traces = np.array(
            [[np.nan if v is None else max(v, floor) for v in s["regret_trace"]] for s in summaries]
        )
        times = budget * (np.arange(traces.shape[1]) + 1) / traces.shape[1]
        ok = (~np.isnan(traces)).sum(axis=0) > len(summaries) / 2  # most seeds have a result
        if not ok.any():
            continue
        med = np.nanmedian(traces[:, ok], axis=0)
        low, high = np.nanpercentile(traces[:, ok], [25, 75], axis=0)
        color = _color(method, i)
        ax.plot(times[ok], med, color=color, label=method, lw=1.6)
        ax.fill_between(times[ok], low, high, color=color, alpha=0.15, lw=0)
    scale = ref["median_random"] - ref["optimum"]
    for q, target in ref["targets"].items():
        level = (target - ref["optimum"]) / scale
        ax.axhline(level, color="black", ls=":", lw=0.8)
        ax.annotate(f"p{q} target", (budget, level), ha="right", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlim(0, budget)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(f"normalized regret of the incumbent (floor {floor:g})")
    corr = ", ".join(f"{v:+.2f}" for v in ref["rank_correlation_with_max_budget"].values())
    ax.set_title(
        f"{title}: median over {len(next(iter(rows.values())))} seeds, 25-75 % band\n"
        f"rank corr. of budget 1/3/9/27 with final: {corr}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    _save(fig, path)


def speedup_bars(
    path: Path,
    cells: dict[str, dict[str, dict[str, dict[str, Any]]]],
    ceilings: dict[str, dict[str, float]],
    workers: int,
) -> None:
    """Paired median speed-up vs RS per problem and method, one panel per target.

    `cells[q][method][problem]` holds "paired" (the ratio) and "bound" (a seed set where
    RS or the method mostly never reached the target: the ratio is a bound, hatched);
    `ceilings[q][problem]` is RS's median time-to-target over a typical winner's serial
    time to the target (drawn as a black tick; inf: RS never reached it).
    """
    import numpy as np

    plt = _pyplot()
    quantiles = list(cells)
    fig, axes = plt.subplots(1, len(quantiles), figsize=(5.2 * len(quantiles), 4.2), squeeze=False)
    for ax, q in zip(axes[0], quantiles, strict=True):
        methods = list(cells[q])
        problems = list(next(iter(cells[q].values())))
        width = 0.8 / len(methods)
        x = np.arange(len(problems))
        for i, m in enumerate(methods):
            values = [cells[q][m][p]["paired"] for p in problems]
            hatch = ["//" if cells[q][m][p]["bound"] else "" for p in problems]
            bars = ax.bar(
                x + (i - (len(methods) - 1) / 2) * width, values, width, color=_color(m, i)
            )
            for bar, h in zip(bars, hatch, strict=True):
                bar.set_hatch(h)
        for j, p in enumerate(problems):
            c = ceilings[q][p]
            if math.isfinite(c):
                ax.hlines(c, j - 0.45, j + 0.45, color="black", lw=2)
        ax.axhline(1, color="grey", lw=0.8)
        ax.axhline(5, color="red", ls="--", lw=1, label="target 5x")
        ax.axhline(10, color="red", ls=":", lw=1, label="aim 10x")
        ax.set_yscale("log")
        ax.set_xticks(x, [p.replace("-", "-\n", 1) for p in problems], fontsize=8)
        ax.set_ylabel("RS time-to-target / method's (paired median)")
        ax.set_title(
            f"target p{q}: black tick = ceiling (RS / serial t_hit)\n"
            "hatched: a bound (most seeds never reached the target)",
            fontsize=9,
        )
        ax.grid(alpha=0.3, axis="y", which="both")
    from matplotlib.patches import Patch

    handles = [Patch(color=_color(m, i), label=m) for i, m in enumerate(cells[quantiles[0]])]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="//", label="a bound")]
    lines, _ = axes[0][0].get_legend_handles_labels()
    axes[0][0].legend(handles=handles + lines, fontsize=7, ncol=2)
    fig.suptitle(f"speed-up over random search alone, {workers} workers, equal budget", fontsize=10)
    fig.tight_layout()
    _save(fig, path)


def pbt_schedule(
    path: Path,
    learned: list[tuple[int, int, float]],
    optimal: list[float],
    best_constant: float,
    losses: dict[str, list[float]],
) -> None:
    """PBT's learned lr schedule against the optimal one, and the losses over iterations.

    `learned` holds (from_iteration, to_iteration, lr) segments; `optimal[i]` is the best
    lr for iteration i + 1; `losses` maps a label to the loss after each iteration.
    """
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    iters = range(1, len(optimal) + 1)
    left.step(iters, optimal, where="pre", color="black", label="optimal schedule (greedy)")
    for k, (start, end, lr) in enumerate(learned):
        left.hlines(lr, start, end, color="C0", lw=2.5, label="PBT, best trial" if k == 0 else None)
    left.axhline(best_constant, color="C1", ls="--", label="best constant lr")
    left.set_yscale("log")
    left.set_xlabel("training iteration")
    left.set_ylabel("learning rate")
    left.legend(fontsize=8)
    left.grid(alpha=0.3, which="both")
    for label, values in losses.items():
        right.plot(range(1, len(values) + 1), values, label=label)
    right.set_yscale("log")
    right.set_xlabel("training iteration")
    right.set_ylabel("loss")
    right.legend(fontsize=8)
    right.grid(alpha=0.3, which="both")
    fig.tight_layout()
    _save(fig, path)
