"""The benchmarks' methods: a seeded searcher paired with a scheduler, by name.

``search_efficiency.py`` (simulated backend) and ``real_efficiency.py`` (real training)
both build their methods here, so a name means the same thing in both.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tunefleet import search
from tunefleet.schedulers import (
    AsyncHyperBandScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    TrialScheduler,
)

# plot colours of the searcher methods (the scheduler methods' are in _plot.COLORS)
COLORS = {
    "tpe": "#e377c2",
    "gp": "#8c564b",
    "cmaes": "#bcbd22",
    "bohb": "#d62728",
    "asha-tpe": "#17becf",
    "qmc": "#7f7f7f",
    "hyperopt": "#000080",
}


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
# schedulers for SEARCHER+SCHEDULER pairs only ("random" is FIFO too)
PAIR_SCHEDULERS: dict[str, Callable[[int], TrialScheduler | None]] = {
    "fifo": lambda max_t: None,
    "hb-bohb": lambda max_t: HyperBandForBOHB(max_t=max_t, reduction_factor=3),
}


def told_as_completed(searcher: search.Searcher) -> search.Searcher:
    """`searcher` as it was before issue 19: a trial a scheduler stopped early is told as
    completed with its last result, not as stopped (a searcher's ``-told`` variant)."""

    def stopped(trial_id: str, result: dict[str, Any] | None) -> None:
        searcher.on_trial_complete(trial_id, result)

    searcher.on_trial_stopped_early = stopped  # type: ignore[method-assign]
    return searcher


# every searcher seeded by the run's seed; the model-based ones are imported on first use
SEARCHERS: dict[str, Callable[[int], search.Searcher]] = {
    "rs": lambda seed: search.BasicVariantGenerator(seed=seed),
    "tpe": lambda seed: search.OptunaSearch(seed=seed),
    "gp": lambda seed: search.BayesOptSearch(random_state=seed),
    "cmaes": lambda seed: search.OptunaSearch(sampler="cmaes", seed=seed),
    "qmc": lambda seed: search.QMCSearch(seed=seed),
    "hyperopt": lambda seed: search.HyperOptSearch(random_state_seed=seed),
    "hyperopt-told": lambda seed: told_as_completed(search.HyperOptSearch(random_state_seed=seed)),
    "tpe-told": lambda seed: told_as_completed(search.OptunaSearch(seed=seed)),
    "bohb": lambda seed: search.TuneBOHB(seed=seed),
}
# named pairs (searcher, scheduler); a scheduler's own name means random search with it
PAIRS = {
    "tpe": ("tpe", "fifo"),
    "gp": ("gp", "fifo"),
    "cmaes": ("cmaes", "fifo"),
    "bohb": ("bohb", "hb-bohb"),
    "asha-tpe": ("tpe", "asha"),
}
# peers in their own ask-and-tell loops, run by the peers' Python on the tabulated
# problems only: (script in peers/, its variant, (searcher, scheduler) for the reports)
PEERS = {
    "optuna-tpe-sha": ("optuna_tabulated.py", "sha", ("tpe", "optuna-sha")),
    "optuna-tpe-hb": ("optuna_tabulated.py", "hb", ("tpe", "optuna-hb")),
    "syne-asha": ("syne_tune_tabulated.py", "asha", ("rs", "syne-asha")),
    "syne-bohb": ("syne_tune_tabulated.py", "bohb", ("bohb", "syne-bohb")),
}
PEERS_PYTHON = Path(__file__).resolve().parent.parent / ".venv-peers" / "bin" / "python"
METHODS = (*SCHEDULERS, *PAIRS, *PEERS)
DEFAULT_METHODS = ("random", "asha", "ahb", "hyperband", "median")


def parse_method(method: str) -> tuple[str, str]:
    """(searcher, scheduler) of a method name: a named pair, a scheduler or "S+SCHED"."""
    if method in PAIRS:
        return PAIRS[method]
    if method in PEERS:
        return PEERS[method][2]  # for the reports only: make_method does not build peers
    if method in SCHEDULERS:
        return "rs", method
    searcher, _, scheduler = method.partition("+")
    if searcher in SEARCHERS and (scheduler in SCHEDULERS or scheduler in PAIR_SCHEDULERS):
        return searcher, scheduler
    raise ValueError(
        f"unknown method {method!r}: choose from {', '.join(METHODS)}, or SEARCHER+SCHEDULER "
        f"with a searcher of {', '.join(SEARCHERS)} and a scheduler of "
        f"{', '.join([*SCHEDULERS, *PAIR_SCHEDULERS])}"
    )


def make_method(method: str, seed: int, max_t: int) -> tuple[search.Searcher, Any]:
    """The seeded searcher and the scheduler (None: FIFO) of `method`."""
    searcher, scheduler = parse_method(method)
    make_scheduler = SCHEDULERS.get(scheduler) or PAIR_SCHEDULERS[scheduler]
    return SEARCHERS[searcher](seed), make_scheduler(max_t)


def is_model_based_multi_fidelity(method: str) -> bool:
    """A model-based searcher with an early-stopping scheduler (the issue's contenders)."""
    searcher, scheduler = parse_method(method)
    return searcher not in ("rs", "qmc") and scheduler not in ("random", "fifo")


def run_peer(task: str, method: str, seed: int, budget: float, workers: int) -> dict[str, Any]:
    """One run of a peer method (``PEERS``) on tabulated `task`: ``run_once``'s record."""
    name, variant, _ = PEERS[method]
    script = Path(__file__).resolve().parent / "peers" / name
    args = ["--task", task, "--variant", variant, "--seeds", str(seed)]
    args += ["--budget", repr(budget), "--workers", str(workers)]
    if not PEERS_PYTHON.exists():
        raise SystemExit(f"{method}: no {PEERS_PYTHON} (make bench-peers creates it)")
    proc = subprocess.run(
        [str(PEERS_PYTHON), str(script), *args], capture_output=True, text=True, check=False
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("TUNEFLEET_TABULATED ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{method} on {task}, seed {seed}: {proc.stderr[-2000:]}")
    record: dict[str, Any] = json.loads(lines[-1].partition(" ")[2])
    return record
