"""Synchronous HyperBand (Li et al. 2018) with pause/resume, and its BOHB variant.

Trials fill brackets in turn. A bracket's trials pause at its milestone; once all
its live trials reached it (and the bracket is full, or no more trials will come),
the top ``ceil(live / eta)`` are resumed to the next milestone and the rest stopped.
Values are stored as "higher is better" (the direction is applied once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tunefleet.schedulers._base import Decision, TrialScheduler
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._common import (
    check_positive,
    check_time_attr,
    direction,
    result_time,
    score,
)
from tunefleet.trial import Trial


class HyperBandScheduler(TrialScheduler):
    """HyperBand with Ray Tune's arguments and defaults; brackets fill from s=0 up.

    Args:
        time_attr: the result key that measures progress.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        max_t: the largest budget a trial gets (`time_attr` units).
        reduction_factor: eta; a bracket keeps the top 1/eta at each milestone.
        stop_last_trials: stop trials at the bracket's last milestone (False: run on).
    """

    needs_sync_decisions = True
    _largest_first = False

    def __init__(
        self,
        *,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        name = type(self).__name__
        check_time_attr(name, time_attr)
        check_positive(name, "max_t", max_t)
        check_positive(name, "reduction_factor", reduction_factor)
        if reduction_factor <= 1:
            raise ValueError(f"{name}: reduction_factor={reduction_factor!r} must be > 1")
        self.time_attr = time_attr
        self.max_t = max_t
        self.reduction_factor = reduction_factor
        self.stop_last_trials = stop_last_trials
        self._s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor)) + 1)
        self._brackets: list[dict[str, Any]] = []
        self._band_len = 0  # brackets (skipped ones included) in the current band
        self._of: dict[str, int] = {}  # trial -> bracket index
        self._starved = False  # `Candidates.starved` when last asked
        self._index()

    def _index(self) -> None:
        """Derived from the state so that a choice needs no pass over every bracket.

        `_held`: the trials in some bracket's waiting or cut list. `_hot`: the brackets
        that may be ready to halve or have promoted trials to resume (a superset).
        """
        self._held: set[str] = set()
        for bracket in self._brackets:
            self._held.update(bracket["waiting"], bracket["cut"])
        self._hot: set[int] = set(range(len(self._brackets)))

    def _r0(self, s: int) -> int:
        return int(self.max_t * self.reduction_factor ** (-s))

    def _new_bracket(self) -> dict[str, Any]:
        while True:
            if self._band_len >= self._s_max_1:
                self._band_len = 0
            i = self._band_len
            s = self._s_max_1 - 1 - i if self._largest_first else i
            self._band_len += 1
            if self._r0(s) > 0:
                break
        n0 = math.ceil(self._s_max_1 / (s + 1) * self.reduction_factor**s)
        bracket: dict[str, Any] = {"s": s, "n0": n0, "r": self._r0(s), "halves": s}
        bracket.update(halved=False, size=0, live={}, waiting=[], promoted=[], cut=[])
        self._brackets.append(bracket)
        return bracket

    # -- events --------------------------------------------------------------------------
    def on_trial_add(self, trial: Trial) -> None:
        self._sign()
        self._starved = False  # the searcher had a new trial after all
        self._join(trial.trial_id)

    def _join(self, trial_id: str) -> dict[str, Any]:
        if trial_id not in self._of:
            bracket = self._brackets[-1] if self._brackets else None
            if bracket is None or not self._accepts(bracket):
                bracket = self._new_bracket()
            bracket["live"][trial_id] = [0.0, None]
            bracket["size"] += 1
            self._of[trial_id] = len(self._brackets) - 1
        return self._brackets[self._of[trial_id]]

    @staticmethod
    def _accepts(bracket: dict[str, Any]) -> bool:
        return not bracket["halved"] and bracket["size"] < bracket["n0"]

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        sign = self._sign()
        t = result_time(result, self.time_attr)
        if t is None:
            return Decision.CONTINUE
        assert self.metric is not None
        tid = trial.trial_id
        bracket = self._join(tid)
        cut = f"cut at bracket {self._of[tid] + 1}'s halving"
        if tid in bracket["waiting"] or tid in bracket["cut"]:
            return self.note_stop(tid, cut)  # resumed without a promotion: the experiment's end
        if tid not in bracket["live"]:
            return Decision.STOP
        bracket["live"][tid] = [t, score(result, self.metric, sign)]
        if t < bracket["r"]:
            return Decision.CONTINUE
        if bracket["halves"] == 0:
            if self.stop_last_trials:
                return self.note_stop(tid, f"max_t={self.max_t} reached")
            return Decision.CONTINUE
        bracket["waiting"].append(tid)
        self._held.add(tid)
        self._hot.add(self._of[tid])
        if self._ready(bracket, starved=self._starved):
            self._halve(self._of[tid])
            if tid in bracket["promoted"]:
                bracket["promoted"].remove(tid)
                return Decision.CONTINUE
            return self.note_stop(tid, cut)
        return Decision.PAUSE

    def _ready(self, bracket: dict[str, Any], *, starved: bool) -> bool:
        return self._full(bracket) and (starved or not self._accepts(bracket))

    @staticmethod
    def _full(bracket: dict[str, Any]) -> bool:
        """Every live trial waits at the milestone (and a milestone is left)."""
        live, waiting = bracket["live"], bracket["waiting"]
        if not live or len(waiting) < len(live) or bracket["halves"] <= 0:
            return False
        return bool(live.keys() <= set(waiting))

    def _halve(self, index: int) -> None:
        bracket = self._brackets[index]
        self._hot.add(index)
        self._held.difference_update(bracket["waiting"])
        live = bracket["live"]
        ranked = sorted(live, key=lambda i: -live[i][1])
        keep = math.ceil(len(ranked) / self.reduction_factor)
        bracket["halves"] -= 1
        bracket["halved"] = True
        bracket["r"] = min(bracket["r"] * self.reduction_factor, self.max_t)
        bracket["waiting"] = []
        bracket["promoted"].extend(ranked[:keep])
        bracket["cut"].extend(ranked[keep:])
        self._held.update(ranked[keep:])
        for tid in ranked[keep:]:
            del live[tid]

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        self._leave(trial.trial_id, failed=False)

    def on_trial_error(self, trial: Trial) -> None:
        self._leave(trial.trial_id, failed=True)

    def on_trial_remove(self, trial: Trial) -> None:
        self._leave(trial.trial_id, failed=True)

    def _leave(self, tid: str, *, failed: bool) -> None:
        if tid in self._of:
            bracket = self._brackets[self._of[tid]]
            if bracket["live"].pop(tid, None) is not None and failed and not bracket["halved"]:
                bracket["size"] -= 1  # a failed trial's place goes to a new one
            for key in ("waiting", "promoted", "cut"):
                if tid in bracket[key]:
                    bracket[key].remove(tid)
            self._held.discard(tid)
            self._hot.add(self._of[tid])

    # -- which trial runs next -------------------------------------------------------------
    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """A promoted trial of a bracket, else one paused by an interruption, else a
        pending one (or a new one: None). When no new trial will come
        (`candidates.starved`), a bracket that cannot fill halves with the trials it
        has; trials cut at a milestone stay paused and the controller ends them."""
        pool = Candidates.of(candidates)
        paused = pool.paused
        starved = self._starved = pool.starved
        for index in sorted(self._hot):  # the other brackets have nothing to do
            bracket = self._brackets[index]
            if self._ready(bracket, starved=starved):
                self._halve(index)  # the last trial left the bracket while others waited
            for tid in bracket["promoted"]:
                if tid in paused:
                    bracket["promoted"].remove(tid)
                    return paused[tid]
            if not bracket["promoted"] and not self._full(bracket):
                self._hot.discard(index)
        for tid, trial in pool.interrupted.items():
            if tid not in self._held:  # interrupted between milestones (Ctrl-C)
                return trial
        return pool.first_pending()

    # -- state -----------------------------------------------------------------------------
    def _sign(self) -> float:
        return direction(type(self).__name__, self.metric, self.mode)

    def get_state(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "mode": self.mode,
            "brackets": self._brackets,
            "band_len": self._band_len,
            "of": self._of,
            "starved": self._starved,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.metric, self.mode = state["metric"], state["mode"]
        self._brackets = [
            {**b, "live": {k: list(v) for k, v in b["live"].items()}}
            | {key: list(b[key]) for key in ("waiting", "promoted", "cut")}
            for b in state["brackets"]
        ]
        self._band_len = state["band_len"]
        self._of = dict(state["of"])
        self._starved = bool(state.get("starved", False))
        self._index()


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand for BOHB: fills the largest (most exploratory) bracket first, as Ray.

    Every result it sees gets ``result["hyperband_info"] = {"budget": r}``, the
    milestone the trial's bracket is at, so that a BOHB searcher (which is told of
    the result after the scheduler) fits its model per budget.
    """

    _largest_first = True

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        bracket = self._join(trial.trial_id)
        result["hyperband_info"] = {"budget": bracket["r"], "bracket": self._of[trial.trial_id]}
        return super().on_trial_result(trial, result)
