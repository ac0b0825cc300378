"""PBT toy: the best learning rate decays during training; does PBT find the schedule?

The model is SGD on a noisy quadratic, in expectation: after one inner step with
learning rate ``lr`` the excess loss ``x`` becomes ``(1 - lr)^2 x + SIGMA2 lr^2``. A
large lr makes fast progress but holds the loss at a floor of about ``SIGMA2 lr / 2``,
so the best lr falls as training goes on (about ``1 / step``) and a too-high lr late
hurts. One training_iteration is ``INNER`` steps; a trial trains ``ITERATIONS`` of them.
The optimal schedule is greedy (each iteration's lr minimizes the loss after it; the
update increases in ``x``, so greedy is optimal).

Compared at equal compute, on the simulated backend (16 workers, 1 virtual s per
iteration), with the same 16 initial configs per seed (``BasicVariantGenerator(seed)``,
lr log-uniform in 1e-4..1):

- random search: each of the 16 trains with its fixed lr;
- ``PopulationBasedTraining`` (asynchronous, Ray's defaults: ``quantile_fraction=0.25``,
  ``resample_probability=0.25``, factors 1.2/0.8), ``time_attr="training_iteration"``,
  ``perturbation_interval=4``, checkpoints every 4 iterations;
- for reference: the best constant lr (a grid of 400) and the optimal schedule.

The simulated backend's blackbox sees ``(config, budget)`` only (docs/simulated.md), so
it cannot carry a model's state through an exploit. The toy does it itself: a PBT
subclass stamps each exploit's new config with a fresh ``lineage`` token naming the
source trial's token; the blackbox computes a token's state from its parent's state at
the budget it starts from. Replaying the schedule that ``pbt_schedule`` reads from the
store must give the same loss (checked per run). Two workarounds, both for tunefleet
issues found here: the subclass turns an exploit by or of a trial at its last iteration
into CONTINUE (the simulated backend does not mark that result done, and a trial resumed
at ``max_budget`` ran one step past it; Ray hands a done result to
``on_trial_complete``), and
all checkpoints are kept (with ``num_to_keep=2`` an exploit's copy can take the name of
a checkpoint whose deletion is pending, and is deleted: ``--num-to-keep 2`` shows it).

    .. code-block:: sh

        .venv/bin/python benchmarks/pbt_toy.py --seeds 10 --plot benchmarks/plots/pbt_schedule.png
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import _plot  # a sibling: the script's folder is on sys.path
import numpy as np

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import Decision, Exploit, PopulationBasedTraining, Resize, pbt_schedule
from tunefleet.search import BasicVariantGenerator
from tunefleet.trial import Trial

SIGMA2 = 1e-2  # gradient-noise variance: the floor at a constant lr is about SIGMA2 * lr / 2
INNER = 10  # SGD steps per training_iteration
ITERATIONS = 60
X0 = 1.0  # the excess loss at the start
NOISE = 0.05  # multiplicative noise of the reported loss (log-normal sd)
POPULATION = 16
INTERVAL = 4
LR_SPACE = tune.loguniform(1e-4, 1.0)


def train(x: float, lr: float) -> float:
    """The excess loss after one training_iteration (INNER steps) at `lr`."""
    for _ in range(INNER):
        x = (1.0 - lr) ** 2 * x + SIGMA2 * lr * lr
    return x


LR_GRID = np.logspace(-4, 0, 400)


def optimal_schedule() -> tuple[list[float], list[float]]:
    """The greedy optimal lr per iteration and the loss after each iteration."""
    x, lrs, losses = X0, [], []
    for _ in range(ITERATIONS):
        after = [train(x, lr) for lr in LR_GRID]
        j = int(np.argmin(after))
        lrs.append(float(LR_GRID[j]))
        x = after[j]
        losses.append(x)
    return lrs, losses


def constant_losses(lr: float) -> list[float]:
    x, losses = X0, []
    for _ in range(ITERATIONS):
        x = train(x, lr)
        losses.append(x)
    return losses


class Lineage:
    """The model state of every lineage token, so that an exploit carries it on."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}  # token -> the token whose checkpoint it copied
        self.start: dict[str, int] = {}  # token -> the budget it started from
        self.lr: dict[str, float] = {}
        self.states: dict[str, dict[int, float]] = {}
        self._count = itertools.count()

    @staticmethod
    def token(config: dict[str, Any]) -> str:
        return str(config.get("lineage") or f"init-{config['uid']}")

    def branch(self, parent: str) -> str:
        token = f"x{next(self._count)}"
        self.parent[token] = parent
        return token

    def state(self, token: str, budget: int) -> float:
        budget = min(budget, ITERATIONS)  # a step past the budget (see LineagePBT) trains nothing
        states = self.states.get(token)
        if states is None or budget < self.start[token]:  # not run yet, or before its branch
            return self.state(self.parent[token], budget) if token in self.parent else X0
        if budget not in states:
            states[budget] = train(self.state(token, budget - 1), self.lr[token])
        return states[budget]

    def f(self, config: dict[str, Any], budget: int) -> dict[str, float]:
        """The blackbox: the loss after `budget` iterations of this config's lineage."""
        token = self.token(config)
        self.lr[token] = config["lr"]
        if token not in self.states:  # first step: it starts from the copied checkpoint
            before = budget - 1
            self.start[token] = before
            x = self.state(self.parent[token], before) if token in self.parent else X0
            self.states[token] = {before: x}
        x = self.state(token, budget)
        noise = random.Random(zlib.crc32(f"{token}|{budget}".encode())).gauss(0.0, NOISE)
        return {"loss": x * math.exp(noise), "true_loss": x}


class LineagePBT(PopulationBasedTraining):
    """Stock PBT decisions, except at max_budget; lineage tokens on exploits.

    Each exploit's new config gets a fresh ``lineage`` token naming the source's token.
    It also counts exploits whose new config was not derived from the source's current
    one (keys other than lr, e.g. "uid", differ): PBT must explore from the config the
    source runs with now, which an earlier exploit may have replaced.
    """

    def __init__(self, lineage: Lineage, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lineage = lineage
        self.trials: dict[str, Trial] = {}
        self.exploits = 0
        self.last_iteration: dict[str, int] = {}
        self.exploits_at_end = 0  # exploits decided on a trial's last result: not carried out
        self.stale = 0  # exploits that copied a config other than the source's current one

    def on_trial_add(self, trial: Trial) -> None:
        super().on_trial_add(trial)
        self.trials[trial.trial_id] = trial

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision | Exploit | Resize:
        decision = super().on_trial_result(trial, result)
        self.last_iteration[trial.trial_id] = result["training_iteration"]
        if isinstance(decision, Exploit) and ITERATIONS in (
            result["training_iteration"],
            self.last_iteration.get(decision.source_trial_id),
        ):
            # The simulated backend does not mark a trial's last result done, and runs a
            # trial resumed at max_budget one step past it: an exploit of a finished
            # trial, or by one, would train past the budget. Ray hands a done result to
            # on_trial_complete (no exploit); here it continues, and finishes.
            self.exploits_at_end += 1
            return Decision.CONTINUE
        if isinstance(decision, Exploit):
            source = self.trials[decision.source_trial_id]
            self.exploits += 1
            copied = {k: v for k, v in decision.new_config.items() if k not in ("lr", "lineage")}
            current = {k: v for k, v in source.config.items() if k not in ("lr", "lineage")}
            self.stale += copied != current
            decision.new_config["lineage"] = self.lineage.branch(self.lineage.token(source.config))
        return decision


def schedule_of(path: str, result: Any, pbt: bool) -> list[tuple[int, int, float]]:
    """(from_iteration, to_iteration, lr) segments that trained this trial's final model."""
    if not pbt:
        return [(0, ITERATIONS, float(result.config["lr"]))]
    return [
        (s["from_iteration"], s["to_iteration"], float(s["value"]))
        for s in pbt_schedule(path, result.metrics["trial_id"], "lr")
        if s["to_iteration"] > s["from_iteration"]
    ]


def replay(segments: list[tuple[int, int, float]]) -> float:
    x = X0
    for start, end, lr in segments:
        for _ in range(start, min(end, ITERATIONS)):
            x = train(x, lr)
    return x


def run(method: str, seed: int, num_to_keep: int | None = None) -> dict[str, Any]:
    """One experiment; the best trial's true loss curve and (PBT) its learned schedule."""
    lineage = Lineage()
    sim = SimulatedTrainable(
        lineage.f, cost=1.0, max_budget=ITERATIONS, workers=POPULATION, overhead_scale=0
    )
    scheduler = None
    if method != "random":
        scheduler = LineagePBT(
            lineage,
            time_attr="training_iteration",
            perturbation_interval=INTERVAL,
            hyperparam_mutations={"lr": LR_SPACE},
            seed=seed,
        )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tunefleet-pbt-") as storage:
        grid = tune.Tuner(
            sim,
            param_space={"lr": LR_SPACE, "uid": tune.randint(0, 2**31 - 1)},
            tune_config=tune.TuneConfig(
                metric="loss",
                mode="min",
                num_samples=POPULATION,
                search_alg=BasicVariantGenerator(seed=seed),
                scheduler=scheduler,
            ),
            run_config=tune.RunConfig(
                storage_path=storage,
                verbose=0,
                checkpoint_config=tune.CheckpointConfig(
                    checkpoint_frequency=INTERVAL, num_to_keep=num_to_keep
                ),
            ),
        ).fit()
        best = grid.get_best_result(metric="loss", mode="min", scope="last")  # as a user would
        token = Lineage.token(best.config)
        curve = [lineage.state(token, b) for b in range(1, ITERATIONS + 1)]
        schedules = {
            r.trial_id: schedule_of(grid.experiment_path, r, scheduler is not None) for r in grid
        }
        segments = schedules[best.trial_id]
        # Every trial's schedule as the store records it (pbt_schedule), replayed, must give
        # the blackbox's state: a check of the lineage tokens and of the exploit records.
        consistent = all(
            math.isclose(
                replay(schedules[r.trial_id]),
                lineage.state(Lineage.token(r.config), ITERATIONS),
                rel_tol=1e-9,
            )
            for r in grid
        )
        frames = [r.metrics_dataframe for r in grid if r.metrics_dataframe is not None]
        iterations = sum(len(df) for df in frames)
        past_max = sum(int(df["training_iteration"].max()) > ITERATIONS for df in frames)
        errors = len(grid.errors)
    return {
        "final": curve[-1],
        "curve": curve,
        "segments": segments,
        "iterations": iterations,
        "errors": errors,
        "consistent": consistent,
        "past_max": past_max,
        "exploits_at_end": getattr(scheduler, "exploits_at_end", 0),
        "exploits": getattr(scheduler, "exploits", 0),
        "stale": getattr(scheduler, "stale", 0),
        "wall_s": time.perf_counter() - started,
    }


def decay(segments: list[tuple[int, int, float]]) -> float:
    """The lr of the last segment over the first one's: < 1 is a decay."""
    return segments[-1][2] / segments[0][2]


def print_schedule(segments: list[tuple[int, int, float]], optimal: list[float]) -> None:
    print("| iterations | PBT lr | optimal lr (geometric mean over the span) | ratio |")
    print("|---|---|---|---|")
    for start, end, lr in segments:
        span = optimal[start:end] or optimal[-1:]  # (nothing past max_budget is expected)
        best = math.exp(statistics.fmean(math.log(v) for v in span))
        print(f"| {start + 1}-{end} | {lr:.4f} | {best:.4f} | {lr / best:.2f} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=("random", "pbt"),
        default=["random", "pbt"],
    )
    parser.add_argument("--plot", metavar="PNG", help="the learned vs optimal schedule")
    parser.add_argument(
        "--num-to-keep",
        type=int,
        help="CheckpointConfig.num_to_keep (default: keep all; simulated ones are tiny)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    opt_lrs, opt_losses = optimal_schedule()
    const_loss, const_lr = min((constant_losses(lr)[-1], float(lr)) for lr in LR_GRID)
    print(
        f"toy: {ITERATIONS} iterations x {INNER} SGD steps, SIGMA2={SIGMA2}; population "
        f"{POPULATION} on {POPULATION} workers; PBT every {INTERVAL} iterations"
    )
    print(
        f"optimal schedule: lr {opt_lrs[0]:.3g} (iteration 1) -> {opt_lrs[9]:.3g} (10) -> "
        f"{opt_lrs[-1]:.3g} ({ITERATIONS}), final loss {opt_losses[-1]:.3g}; best constant lr "
        f"{const_lr:.3g}: final loss {const_loss:.3g} ({const_loss / opt_losses[-1]:.1f}x)"
    )
    runs = {m: [run(m, seed, args.num_to_keep) for seed in range(args.seeds)] for m in args.methods}
    print(
        "\n| method | final loss of the best trial (median; p25-p75) | vs optimal schedule "
        "| lr last/first (median) | seeds with lr decayed >= 3x | exploits/run "
        "| of which copied a stale config | exploits at max_budget (not carried out) "
        "| iterations run | trials past max_budget | errors "
        "| every schedule replays to the loss | wall s/run |"
    )
    print("|---" * 13 + "|")
    for m, rs in runs.items():
        finals = [r["final"] for r in rs]
        q1, med, q3 = np.percentile(finals, [25, 50, 75])
        ratios = [decay(r["segments"]) for r in rs]
        decayed = sum(d <= 1 / 3 for d in ratios)
        print(
            f"| {m} | {med:.3g} ({q1:.3g}-{q3:.3g}) | {med / opt_losses[-1]:.1f}x "
            f"| {statistics.median(ratios):.2g} | {decayed}/{len(rs)} "
            f"| {statistics.fmean(r['exploits'] for r in rs):.0f} "
            f"| {statistics.fmean(r['stale'] for r in rs):.0f} "
            f"| {statistics.fmean(r['exploits_at_end'] for r in rs):.1f} "
            f"| {statistics.fmean(r['iterations'] for r in rs):.0f} "
            f"| {sum(r['past_max'] for r in rs)} "
            f"| {sum(r['errors'] for r in rs)} | {sum(r['consistent'] for r in rs)}/{len(rs)} "
            f"| {statistics.fmean(r['wall_s'] for r in rs):.2f} |"
        )
    print(
        f"| best constant lr (grid) | {const_loss:.3g} | {const_loss / opt_losses[-1]:.1f}x "
        "| 1 | | | | | | | | | |"
    )
    print(f"| optimal schedule | {opt_losses[-1]:.3g} | 1.0x" + " |" * 10 + " |")
    if "pbt" in runs:
        rs = runs["pbt"]
        pick = sorted(range(len(rs)), key=lambda i: rs[i]["final"])[len(rs) // 2]  # median
        print(f"\npbt, seed {pick} (the median seed by final loss): the best trial's lr")
        print_schedule(rs[pick]["segments"], opt_lrs)
        if args.plot:
            if missing := _plot.missing():
                print(f"no plot: {missing}", file=sys.stderr)
            else:
                losses = {
                    f"PBT best trial (seed {pick})": rs[pick]["curve"],
                    f"random best (seed {pick})": runs["random"][pick]["curve"]
                    if "random" in runs
                    else [],
                    f"best constant lr {const_lr:.3g}": constant_losses(const_lr),
                    "optimal schedule": opt_losses,
                }
                _plot.pbt_schedule(
                    Path(args.plot),
                    rs[pick]["segments"],
                    opt_lrs,
                    const_lr,
                    {k: v for k, v in losses.items() if v},
                )
                print(f"plot: {args.plot}")
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")
    return 1 if any(r["errors"] for rs in runs.values() for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
