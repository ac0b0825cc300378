"""How fast each scheduler finds a good config on real small problems, in real time.

The problems of ``real_problems.py`` train for real on the CPU: a numpy MLP on
scikit-learn's digits (budget: up to ``--max-t`` epochs) and the LSTM sunspot
forecaster of ``examples/lstm_sunspots.py`` (``--lstm-max-t`` epochs). tunefleet runs
them with its local backend (real worker processes, wall-clock time), ``--concurrency``
trials at a time, one CPU each, ``num_samples=-1`` and the same
``TuneConfig(time_budget_s=...)`` for every method; the configs come from random search
(``BasicVariantGenerator(seed=s)``), so every tunefleet method sees the same sequence
of configs for the same seed.

Methods: ``random`` (FIFO: every trial runs to ``max_t``), ``asha`` (stopping form,
``grace_period=--grace, reduction_factor=--eta, max_t``), ``hyperband``
(``reduction_factor=--eta, max_t``; synchronous, pause/resume from checkpoints saved at
its milestones). On digits, when ``--peers-python`` exists (``.venv-peers``), the same
MLP also runs under Ray Tune's ``ASHAScheduler`` (``peers/ray_tune_asha.py``) and
Optuna's ``SuccessiveHalvingPruner`` (``peers/optuna_sha.py``) with the same budget,
``max_t``, grace and eta, each with its own seeded random search (``random_state`` /
``RandomSampler(seed)``: the same seeds, not the same configs as tunefleet's). The
peers' environment has no torch, so the LSTM runs with tunefleet only.

Time is wall-clock seconds from the start of the tuning call (tunefleet: just before
``Tuner(...)``; Ray: before ``ray.init``, so its start-up counts; Optuna: before
``create_study``) to the moment the trial reported the result (``time.time()`` in the
trial). Results after the budget are ignored. Wall-clock figures need an otherwise idle
machine: the 1-minute load average after each run is printed, and one well above
``--concurrency`` means other processes took CPU time from the trials.

Figures, per problem x method over the seeds:

``target``
    The ``--target-quantile`` (0.05) quantile, over ``--reference-configs`` random
    configs each trained for ``max_t`` epochs, of the best validation error of the
    config's run (over its epochs): what one random-search trial yields. Computed once
    (in parallel, outside any framework) and cached in ``--cache-dir``.
``time-to-target``
    Seconds until the best validation error reported so far (any trial, any epoch) is
    at or below the target. Median over seeds (">budget" when more than half never
    reach it) and the fraction of seeds that never do within the budget.
``speed-up``
    Random search's median time-to-target over the method's; and the median over
    seeds of the paired ratio RS / method, a "never" counting as the budget (a bound).
``final regret``
    The best validation error at the end of the budget minus the best known (the
    lowest error of the reference configs and of every result of this invocation);
    median over seeds, in percentage points of error (digits) or sunspots (LSTM).
``first result``
    Seconds until the first result: the frameworks' start-up.

A PNG per problem (``--plots-dir``, default ``benchmarks/plots``; ``--quick`` writes to
the cache dir instead) shows the best error so far against wall time, the median
across seeds, per method.

    .venv/bin/python benchmarks/real_efficiency.py --quick        # < 3 minutes
    .venv/bin/python benchmarks/real_efficiency.py                # ~25 minutes, 2 CPUs
    .venv/bin/python benchmarks/real_efficiency.py --problems digits --seeds 3 --skip-peers
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# One CPU per trial: BLAS reads these when numpy is first imported, in this process, in
# tunefleet's workers and in the peers' processes, which all inherit them.
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import numpy as np
import real_problems as rp  # siblings: the script's folder is on sys.path
from methods import METHODS as NAMED_METHODS
from methods import make_method

import tunefleet as tune
from tunefleet.schedulers import ASHAScheduler, HyperBandScheduler, TrialScheduler
from tunefleet.search import BasicVariantGenerator, Searcher

BENCH_DIR = Path(__file__).resolve().parent
PEERS = {"ray-asha": "ray_tune_asha.py", "optuna-sha": "optuna_sha.py"}
METHODS = ("random", "asha", "hyperband")  # the default; any method of methods.py too
SEARCHER_METHODS = ("random", "tpe", "gp", "cmaes", "asha", "bohb", "asha-tpe")  # --searchers
FRACTIONS = (0.5, 1.0)  # normalized regret at these fractions of the budget
LABELS = {
    "random": "tunefleet RS (FIFO)",
    "asha": "tunefleet ASHA",
    "hyperband": "tunefleet HyperBand",
    "tpe": "Optuna TPE (FIFO)",
    "gp": "BayesOptSearch GP (FIFO)",
    "cmaes": "Optuna CMA-ES (FIFO)",
    "bohb": "TuneBOHB + HyperBandForBOHB",
    "asha-tpe": "ASHA + Optuna TPE",
    "ray-asha": "Ray Tune ASHA",
    "optuna-sha": "Optuna SHA pruner",
}
Point = tuple[float, float]  # (seconds since the tuning call started, metric)


@dataclass
class Setting:
    """One problem's budget: epochs, wall-clock seconds per run, seeds, reference size."""

    problem: str
    max_t: int
    budget_s: float
    seeds: int
    reference_configs: int


# --- the reference: random configs trained to max_t, outside any framework ----------------

_REF_DATA: Any = None  # set before the pool forks: the workers inherit it


def _learning_curve(job: tuple[str, dict[str, Any], int]) -> list[float]:
    problem, config, max_t = job
    model = rp.make_model(problem, config, _REF_DATA)
    return [model.train_epoch() for _ in range(max_t)]


def rank_correlation(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def reference(s: Setting, data: Any, args: argparse.Namespace, cache_dir: Path) -> dict[str, Any]:
    """Target, median, best of ``reference_configs`` random full-budget runs (cached)."""
    q, workers = args.target_quantile, args.concurrency
    spec = rp.SPACES[s.problem]
    source = hashlib.sha256(Path(rp.__file__).read_bytes()).hexdigest()[:12]
    key = f"{s.problem}-t{s.max_t}-n{s.reference_configs}-{source}"
    path = cache_dir / f"reference-{key}.json"
    if path.exists():
        ref: dict[str, Any] = json.loads(path.read_text())
        print(f"{s.problem}: reference from {path}")
    else:
        global _REF_DATA
        _REF_DATA = data
        rng = random.Random(12345)
        configs = [rp.sample(spec, rng) for _ in range(s.reference_configs)]
        print(
            f"{s.problem}: training {len(configs)} random configs x {s.max_t} epochs for "
            f"the target ({workers} processes; cached in {path}) ...",
            flush=True,
        )
        started = time.perf_counter()
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            jobs = [(s.problem, c, s.max_t) for c in configs]
            curves = list(pool.map(_learning_curve, jobs))
        ref = {"configs": configs, "curves": curves, "seconds": time.perf_counter() - started}
        path.write_text(json.dumps(ref))
    best = [min(c) for c in ref["curves"]]
    rungs = [args.grace * args.eta**k for k in range(20) if args.grace * args.eta**k < s.max_t]
    return {
        "target": float(np.quantile(best, q)),
        "quantile": q,
        "median_random": float(np.median(best)),
        "best": float(min(best)),
        "configs": len(best),
        "cache": str(path),
        "rank_correlation": {
            str(b): rank_correlation([c[b - 1] for c in ref["curves"]], best) for b in rungs
        },
    }


# --- tunefleet runs ---------------------------------------------------------------------


class Recorder(tune.Callback):
    """Every result's (report time - start, metric) and the trials started, in the driver."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self.t0 = 0.0
        self.points: list[Point] = []
        self.trials = 0

    def on_trial_start(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
        self.trials += 1

    def on_trial_result(
        self, iteration: int, trials: Any, trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        self.points.append((result["t_report"] - self.t0, float(result[self.metric])))


def train(
    config: dict[str, Any], problem: str, data: Any, max_t: int, checkpoint_at: list[int]
) -> None:
    """The trainable: an epoch per report; a checkpoint where HyperBand may pause."""
    model = rp.make_model(problem, config, data)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            model.load(d)
    metric = rp.METRICS[problem]
    while model.epoch < max_t:
        value = model.train_epoch()
        metrics = {metric: value, "t_report": time.time()}
        if model.epoch in checkpoint_at:
            with tempfile.TemporaryDirectory() as d:
                model.save(d)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)


def hyperband_milestones(max_t: int, eta: int) -> list[int]:
    """Where tunefleet's HyperBand pauses trials: its brackets' r0 * eta**k below max_t."""
    out: set[int] = set()
    s = 0
    while (r := int(max_t * eta ** (-s))) > 0:
        while r < max_t:
            out.add(r)
            r *= eta
        s += 1
    return sorted(out)


def make_real_method(
    method: str, seed: int, max_t: int, grace: int, eta: int
) -> tuple[Searcher, TrialScheduler | None]:
    """The seeded searcher and scheduler: random search with --grace/--eta, or methods.py's."""
    searcher: Searcher = BasicVariantGenerator(seed=seed)
    if method == "random":
        return searcher, None
    if method == "asha":
        return searcher, ASHAScheduler(max_t=max_t, grace_period=grace, reduction_factor=eta)
    if method == "hyperband":
        return searcher, HyperBandScheduler(max_t=max_t, reduction_factor=eta)
    return make_method(method, seed, max_t)


def run_tunefleet(
    s: Setting, method: str, seed: int, data: Any, args: argparse.Namespace
) -> dict[str, Any]:
    metric = rp.METRICS[s.problem]
    searcher, scheduler = make_real_method(method, seed, s.max_t, args.grace, args.eta)
    pauses = isinstance(scheduler, HyperBandScheduler)  # BOHB's too: resumes from checkpoints
    checkpoint_at = hyperband_milestones(s.max_t, args.eta) if pauses else []
    trainable = tune.with_resources(
        tune.with_parameters(
            train, problem=s.problem, data=data, max_t=s.max_t, checkpoint_at=checkpoint_at
        ),
        {"cpu": 1},
    )
    recorder = Recorder(metric)
    with tempfile.TemporaryDirectory(prefix="tunefleet-real-") as storage:
        recorder.t0 = t0 = time.time()
        results = tune.Tuner(
            trainable,
            param_space=rp.tune_space(rp.SPACES[s.problem], tune),
            tune_config=tune.TuneConfig(
                metric=metric,
                mode="min",
                num_samples=-1,
                time_budget_s=s.budget_s,
                max_concurrent_trials=args.concurrency,
                search_alg=searcher,
                scheduler=scheduler,
            ),
            run_config=tune.RunConfig(
                storage_path=storage,
                verbose=0,
                callbacks=[recorder],
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            ),
        ).fit()
        wall_s = time.time() - t0
        errors = [str(e) for e in results.errors]
    return {
        "points": sorted(recorder.points),
        "trials": recorder.trials,
        "errors": errors,
        "wall_s": wall_s,
        "framework": "tunefleet",
        "version": tune.__version__,
    }


# --- peer runs (subprocesses in .venv-peers) --------------------------------------------


def run_peer(
    s: Setting, method: str, seed: int, args: argparse.Namespace, data_path: Path
) -> dict[str, Any]:
    command = [
        args.peers_python,
        str(BENCH_DIR / "peers" / PEERS[method]),
        f"--problem={s.problem}",
        f"--seed={seed}",
        f"--budget={s.budget_s}",
        f"--max-t={s.max_t}",
        f"--grace={args.grace}",
        f"--eta={args.eta}",
        f"--concurrency={args.concurrency}",
        f"--data={data_path}",
    ]
    started = time.time()
    failure = None
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=s.budget_s + args.peer_slack_s
        )
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, rc = f"timed out after {e.timeout:.0f} s", None
    points: list[Point] = []
    summary: dict[str, Any] = {}
    for line in stdout.splitlines():
        if not line.startswith(rp.TAG + " "):
            continue
        record = json.loads(line[len(rp.TAG) + 1 :])
        if record["kind"] == "result":
            points.append((float(record["t"]), float(record["value"])))
        else:
            summary = record
    if rc != 0 or not summary:
        failure = f"{PEERS[method]} exit {rc}: {stderr.strip()[-800:]}"
    return {
        "points": sorted(points),
        "trials": summary.get("trials", 0),
        "errors": [failure] if failure else [],
        "wall_s": summary.get("wall_s", time.time() - started),
        "setup_s": summary.get("setup_s"),
        "framework": summary.get("framework", method),
        "version": summary.get("version", "?"),
    }


# --- figures ----------------------------------------------------------------------------


def summarize(run: dict[str, Any], target: float, budget: float) -> dict[str, Any]:
    best, ttt = math.inf, None
    points = [p for p in run["points"] if p[0] <= budget]
    for t, value in points:
        best = min(best, value)
        if ttt is None and best <= target:
            ttt = t
    return {
        "time_to_target_s": ttt,
        "final_best": best,
        "first_result_s": points[0][0] if points else None,
        "results": len(points),
    }


def normalized_regret(
    run: dict[str, Any], budget: float, best_known: float, median_random: float
) -> dict[str, float]:
    """``(best so far - best known) / (random median - best known)`` at each fraction.

    1 is what one random full-budget trial typically yields, 0 the best known; +inf
    before the first result.
    """
    scale = median_random - best_known
    at = best_so_far(run["points"], np.array([f * budget for f in FRACTIONS]))
    return {f"{f:g}": float((b - best_known) / scale) for f, b in zip(FRACTIONS, at, strict=True)}


def mean_ranks(rows: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Per seed, the methods ranked by final regret (1 = best, ties averaged); the mean."""
    ranks: dict[str, list[float]] = {m: [] for m in rows}
    seeds = min(len(r) for r in rows.values())
    for i in range(seeds):
        regrets = {m: rows[m][i]["regret"] for m in rows}
        for m, mine in regrets.items():
            below = sum(r < mine for r in regrets.values())
            ties = sum(r == mine for r in regrets.values())
            ranks[m].append(1 + below + (ties - 1) / 2)
    return {m: statistics.fmean(r) for m, r in ranks.items() if r}


def median_or_inf(values: list[float | None]) -> float:
    """Median with "never" as +inf: inf when more than half never happen."""
    return float(np.median([math.inf if v is None else v for v in values]))


def best_so_far(points: list[Point], grid: np.ndarray) -> np.ndarray:
    out = np.full(len(grid), np.inf)
    if points:
        times = np.array([p[0] for p in points])
        best = np.minimum.accumulate(np.array([p[1] for p in points]))
        idx = np.searchsorted(times, grid, side="right") - 1
        out[idx >= 0] = best[idx[idx >= 0]]
    return out


def plot(
    s: Setting, ref: dict[str, Any], runs: dict[str, list[dict[str, Any]]], path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, PercentFormatter, ScalarFormatter

    grid = np.linspace(0.0, s.budget_s, 400)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for method, method_runs in runs.items():
        curves = np.array([best_so_far(r["points"], grid) for r in method_runs])
        median = np.median(curves, axis=0)
        median[~np.isfinite(median)] = np.nan
        label = f"{LABELS.get(method, method)} ({len(method_runs)})"
        ax.step(grid, median, where="post", label=label)
    ax.axhline(ref["target"], color="grey", ls="--", lw=1, label="target")
    ax.axhline(ref["best_known"], color="grey", ls=":", lw=1, label="best known")
    ax.set_yscale("log")
    if s.problem == "digits":
        ax.set_yticks([0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5])
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=1))
        ax.yaxis.set_minor_formatter(NullFormatter())
        what = "validation error"
    else:
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        what = "validation RMSE (sunspots)"
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlim(0.0, s.budget_s)
    ax.set_xlabel("wall-clock seconds since the tuning call started")
    ax.set_ylabel("best so far, median over seeds")
    ax.set_title(
        f"{s.problem}: best {what} so far; max_t {s.max_t} epochs, {s.budget_s:g} s per run, "
        f"{len(next(iter(runs.values())))} seeds",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def fmt_metric(problem: str, value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{100 * value:.2f}%" if problem == "digits" else f"{value:.2f}"


def fmt_regret(problem: str, value: float) -> str:
    if not math.isfinite(value):
        return "- (no result)"
    return f"{100 * value:.2f} pp" if problem == "digits" else f"{value:.2f}"


def fmt_s(value: float | None, budget: float) -> str:
    if value is None or math.isinf(value):
        return f">{budget:g}"
    return f"{value:.1f}"


def table(s: Setting, ref: dict[str, Any], rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    budget = s.budget_s
    lines = [
        "| method | version | median time-to-target (s) | never | speed-up vs RS (medians) "
        "| paired speed-up vs RS (median) | final regret (median) | final best (median) "
        "| normalized regret @50% / @100%, mean (median) | mean rank "
        "| first result (s, median) | trials/run | results/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ranks = mean_ranks(rows)
    rs = rows.get("random")
    rs_med = median_or_inf([x["time_to_target_s"] for x in rs]) if rs else math.inf
    for method, summaries in rows.items():
        ttts = [x["time_to_target_s"] for x in summaries]
        med = median_or_inf(ttts)
        never = sum(t is None for t in ttts) / len(ttts)
        if method == "random" or rs is None:
            speedup = paired = "-"
        else:
            if math.isinf(med):
                speedup = "<1 (never)" if not math.isinf(rs_med) else "n/a"
            elif math.isinf(rs_med):
                speedup = f">{budget / med:.1f}x"
            else:
                speedup = f"{rs_med / med:.1f}x"
            ratios = [
                (a["time_to_target_s"] or budget) / (b["time_to_target_s"] or budget)
                for a, b in zip(rs, summaries, strict=False)
            ]
            paired = f"{statistics.median(ratios):.1f}x ({len(ratios)} seeds)"
        regret = statistics.median(x["regret"] for x in summaries)
        final = statistics.median(x["final_best"] for x in summaries)
        firsts = [x["first_result_s"] for x in summaries]
        first = median_or_inf(firsts)
        trials = statistics.fmean(x["trials"] for x in summaries)
        results = statistics.fmean(x["results"] for x in summaries)
        normalized = " / ".join(
            f"{statistics.fmean(v):.2f} ({statistics.median(v):.2f})"
            for f in FRACTIONS
            for v in [[x["normalized_regret"][f"{f:g}"] for x in summaries]]
        )
        lines.append(
            f"| {LABELS.get(method, method)} | {summaries[0]['version']} | {fmt_s(med, budget)} "
            f"| {never:.0%} | {speedup} | {paired} | {fmt_regret(s.problem, regret)} "
            f"| {fmt_metric(s.problem, final)} | {normalized} | {ranks.get(method, math.nan):.1f} "
            f"| {fmt_s(first, budget)} | {trials:,.0f} | {results:,.0f} |"
        )
    return lines


# --- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", nargs="+", choices=["digits", "lstm"])
    parser.add_argument(
        "--methods",
        nargs="+",
        metavar="METHOD",
        help=f"default {' '.join(METHODS)}; any of methods.py: {', '.join(NAMED_METHODS)}, "
        "or SEARCHER+SCHEDULER",
    )
    parser.add_argument(
        "--searchers",
        action="store_true",
        help=f"the searcher comparison: --methods {' '.join(SEARCHER_METHODS)}, no peers, "
        "plots named real_PROBLEM_searchers.png",
    )
    parser.add_argument("--tag", default="", help="suffix of the plots' names")
    parser.add_argument("--seeds", type=int, help="seeds per method on digits (default 5)")
    parser.add_argument("--lstm-seeds", type=int, help="seeds per method on lstm (default 5)")
    parser.add_argument("--budget", type=float, help="seconds per digits run (default 40)")
    parser.add_argument("--lstm-budget", type=float, help="seconds per lstm run (default 20)")
    parser.add_argument("--max-t", type=int, help="epochs of a full digits trial (default 81)")
    parser.add_argument("--lstm-max-t", type=int, help="epochs of a full lstm trial (27)")
    parser.add_argument("--grace", type=int, default=1, help="ASHA grace_period (epochs)")
    parser.add_argument("--eta", type=int, default=3, help="ASHA and HyperBand reduction_factor")
    parser.add_argument("--concurrency", type=int, default=2, help="trials at a time")
    parser.add_argument("--target-quantile", type=float, default=0.05)
    parser.add_argument(
        "--reference-configs", type=int, help="random configs for the target (200; lstm 100)"
    )
    parser.add_argument("--quick", action="store_true", help="2 seeds, short runs (< 3 min)")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--peers-python", default=str(BENCH_DIR.parent / ".venv-peers/bin/python"))
    parser.add_argument("--peer-slack-s", type=float, default=120.0, help="peer timeout slack")
    parser.add_argument(
        "--cache-dir", default=str(Path(tempfile.gettempdir()) / "tunefleet-real-bench")
    )
    parser.add_argument("--plots-dir", help="default benchmarks/plots (--quick: the cache dir)")
    parser.add_argument("--json", metavar="OUT", help="write every figure and run to this file")
    parser.add_argument("--from-json", metavar="IN", help="no runs: tables and plots from --json")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "seeds": 2 if quick else 5,
        "lstm_seeds": 2 if quick else 5,
        "budget": 6.0 if quick else 40.0,
        "lstm_budget": 5.0 if quick else 20.0,
        "max_t": 27 if quick else 81,
        "lstm_max_t": 9 if quick else 27,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.problems = args.problems or ["digits", "lstm"]
    if args.searchers:
        args.methods = args.methods or list(SEARCHER_METHODS)
        args.skip_peers = True
        args.tag = args.tag or "_searchers"
    args.methods = args.methods or list(METHODS)
    for method in args.methods:  # a typo fails now, not after the first problem's runs
        try:
            make_real_method(method, 0, 3, 1, 3)
        except ValueError as e:
            parser.error(str(e))
    if "random" not in args.methods:
        args.methods.insert(0, "random")  # the reference of every speed-up
    if args.plots_dir is None:
        args.plots_dir = str(Path(args.cache_dir) if quick else BENCH_DIR / "plots")
    return args


def settings(args: argparse.Namespace) -> list[Setting]:
    quick = args.quick
    out = []
    for problem in args.problems:
        if problem == "digits":
            n = args.reference_configs or (40 if quick else 200)
            out.append(Setting("digits", args.max_t, args.budget, args.seeds, n))
        else:
            n = args.reference_configs or (24 if quick else 100)
            out.append(Setting("lstm", args.lstm_max_t, args.lstm_budget, args.lstm_seeds, n))
    return out


def run_problem(
    s: Setting, args: argparse.Namespace, peers_ok: bool, cache_dir: Path
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], bool]:
    """Every run of one problem, seed-major: a change in the machine's load hits all alike."""
    data = rp.load_data(s.problem)
    data_path = cache_dir / "digits_split.npz"
    if s.problem == "digits":
        rp.save_digits_data(data_path)
    ref = reference(s, data, args, cache_dir)
    methods = list(args.methods)
    if s.problem == "digits" and peers_ok:
        methods += list(PEERS)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    failed = False
    for seed in range(s.seeds):
        for method in methods:
            if method in PEERS:
                run = run_peer(s, method, seed, args, data_path)
            else:
                run = run_tunefleet(s, method, seed, data, args)
            run["seed"] = seed
            run["loadavg_1min"] = os.getloadavg()[0]  # > concurrency: others ran too
            runs[method].append(run)
            summary = summarize(run, ref["target"], s.budget_s)
            ttt = summary["time_to_target_s"]
            print(
                f"{s.problem} seed {seed} {method:<10} trials {run['trials']:>5} "
                f"results {summary['results']:>6} best "
                f"{fmt_metric(s.problem, summary['final_best']):>7} time-to-target "
                f"{fmt_s(ttt, s.budget_s):>6} wall {run['wall_s']:.1f} s "
                f"load {run['loadavg_1min']:.1f}",
                flush=True,
            )
            if run["errors"]:
                failed = True
                print(f"  {len(run['errors'])} errors, first: {run['errors'][0][:800]}")
    return ref, runs, failed


def analyse(
    s: Setting,
    ref: dict[str, Any],
    runs: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    """Best known, per-run summaries, the PNG and the markdown lines of one problem."""
    observed = [v for rs in runs.values() for r in rs for t, v in r["points"] if t <= s.budget_s]
    ref["best_known"] = min([ref["best"], *observed])
    rows: dict[str, list[dict[str, Any]]] = {}
    for method, method_runs in runs.items():
        rows[method] = []
        for run in method_runs:
            summary = summarize(run, ref["target"], s.budget_s)
            summary["regret"] = summary["final_best"] - ref["best_known"]
            summary["normalized_regret"] = normalized_regret(
                run, s.budget_s, ref["best_known"], ref["median_random"]
            )
            keys = ("trials", "wall_s", "version", "seed", "loadavg_1min")
            summary.update({k: run[k] for k in keys})
            rows[method].append(summary)
    png = Path(args.plots_dir) / f"real_{s.problem}{args.tag}.png"
    plot(s, ref, runs, png)
    loads = [r["loadavg_1min"] for rs in runs.values() for r in rs]
    corr = ", ".join(f"epoch {b}: {v:+.2f}" for b, v in ref["rank_correlation"].items())
    lines = [
        "",
        f"## {s.problem}: {rp.DESCRIPTIONS[s.problem]}",
        "",
        f"max_t {s.max_t} epochs, grace {args.grace}, eta {args.eta}; {s.budget_s:g} s "
        f"per run, {args.concurrency} trials at a time, {s.seeds} seeds; target "
        f"{fmt_metric(s.problem, ref['target'])} (the {ref['quantile']:g} quantile of "
        f"the best error of {ref['configs']} random configs trained {s.max_t} epochs); "
        f"their median {fmt_metric(s.problem, ref['median_random'])}; best known "
        f"{fmt_metric(s.problem, ref['best_known'])}. Spearman correlation of the error "
        f"at an epoch with the run's best: {corr}. 1-min load average after the runs: "
        f"median {statistics.median(loads):.1f}, max {max(loads):.1f}. Plot: {png}",
        "",
        *table(s, ref, rows),
    ]
    print("\n".join(lines), flush=True)
    return lines, rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    failed = False
    report: dict[str, Any] = {"args": vars(args), "problems": {}}
    if args.from_json:  # tables and plots again, from a saved run
        saved = json.loads(Path(args.from_json).read_text())
        for entry in saved["problems"].values():
            s = Setting(**entry["setting"])
            for key in ("grace", "eta", "concurrency"):
                setattr(args, key, saved["args"][key])
            analyse(s, entry["reference"], entry["runs"], args)
        return 0
    cache_dir = Path(args.cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    peers_ok = not args.skip_peers and Path(args.peers_python).exists()
    if not args.skip_peers and not peers_ok:
        print(f"no peers: {args.peers_python} does not exist (make bench-peers)")
    for s in settings(args):
        ref, runs, problem_failed = run_problem(s, args, peers_ok, cache_dir)
        failed |= problem_failed
        _, rows = analyse(s, ref, runs, args)
        report["problems"][s.problem] = {
            "setting": vars(s),
            "reference": ref,
            "rows": rows,
            "runs": runs,
        }
    total = time.perf_counter() - started
    print(f"\ntotal wall time: {total:.0f} s")
    if args.json:
        report["total_s"] = total
        Path(args.json).write_text(json.dumps(report, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
