"""Synchronous HyperBand (Li et al. 2018) with pause/resume, and its BOHB variant.

Trials fill brackets in turn. A bracket's trials pause at its milestone; once all
its live trials reached it (and the bracket is full, or no more trials will come),
the top ``ceil(live / eta)`` are resumed to the next milestone and the rest stopped.
Values are stored as "higher is better" (the direction is applied once).

The saved state holds the brackets that still have trials (a bracket whose trials
all ended is dropped) and logs (`StateLog`) of the trials' brackets and cuts, so
that saving it costs what changed, not the number of trials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tunefleet._state_log import StateLog
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

_STATE_VERSION = 2  # 2: open brackets only, logs of joins and cuts (version 1 loads)


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
        self._brackets: dict[int, dict[str, Any]] = {}  # index -> bracket, while it has trials
        self._count = 0  # brackets made
        self._band_len = 0  # brackets (skipped ones included) in the current band
        self._of: dict[str, int] = {}  # trial -> bracket index
        self._cut: dict[str, int] = {}  # trial cut at a halving (still paused) -> bracket
        self._joins = StateLog()  # [trial, bracket], as trials join
        self._cuts = StateLog()  # [trial, bracket] when cut, [trial] when it ends
        self._starved = False  # `Candidates.starved` when last asked
        self._index()

    def _index(self) -> None:
        """Derived from the state so that a choice needs no pass over every bracket.

        `_held`: the trials in some bracket's waiting or cut list. `_hot`: the brackets
        that may be ready to halve or have promoted trials to resume (a superset).
        """
        self._held: set[str] = set(self._cut)
        for bracket in self._brackets.values():
            self._held.update(bracket["waiting"])
        self._hot: set[int] = set(self._brackets)

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
        bracket.update(halved=False, size=0, live={}, waiting=[], promoted=[])
        self._brackets[self._count] = bracket
        self._count += 1
        return bracket

    # -- events --------------------------------------------------------------------------
    def on_trial_add(self, trial: Trial) -> None:
        self._sign()
        self._starved = False  # the searcher had a new trial after all
        self._join(trial.trial_id)

    def _join(self, trial_id: str) -> dict[str, Any]:
        if trial_id not in self._of:
            bracket = self._brackets.get(self._count - 1)
            if bracket is None or not self._accepts(bracket):
                bracket = self._new_bracket()
            bracket["live"][trial_id] = [0.0, None]
            bracket["size"] += 1
            self._of[trial_id] = self._count - 1
            self._joins.append([trial_id, self._count - 1])
        # a dropped bracket: none of its trials runs on
        return self._brackets.get(self._of[trial_id], _ENDED)

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
        if tid in bracket["waiting"] or tid in self._cut:
            return self.note_stop(tid, cut)  # resumed without a promotion: the experiment's end
        if tid not in bracket["live"]:
            return Decision.STOP
        bracket["live"][tid] = [t, score(result, self.metric, sign)]
        if t < bracket["r"]:
            return Decision.CONTINUE
        if bracket["halves"] == 0:
            if self.stop_last_trials:
                return self.note_stop(tid, f"max_t={self.max_t} reached", early=False)
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
        # rung k of a bracket with s halvings is max_t * eta^(k - s), so the last is max_t
        # whether or not max_t is a power of eta (eta^s * r0 can fall short of it)
        bracket["r"] = max(bracket["r"], self._r0(bracket["halves"]))
        bracket["waiting"] = []
        bracket["promoted"].extend(ranked[:keep])
        self._held.update(ranked[keep:])
        for tid in ranked[keep:]:
            del live[tid]
            self._cut[tid] = index
            self._cuts.append([tid, index])

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        self._leave(trial.trial_id, failed=False)

    def on_trial_error(self, trial: Trial) -> None:
        self._leave(trial.trial_id, failed=True)

    def on_trial_remove(self, trial: Trial) -> None:
        self._leave(trial.trial_id, failed=True)

    def _leave(self, tid: str, *, failed: bool) -> None:
        if tid in self._cut:
            del self._cut[tid]
            self._cuts.append([tid])
        index = self._of.get(tid)
        bracket = self._brackets.get(-1 if index is None else index)
        self._held.discard(tid)
        if index is not None and bracket is not None:
            if bracket["live"].pop(tid, None) is not None and failed and not bracket["halved"]:
                bracket["size"] -= 1  # a failed trial's place goes to a new one
            for key in ("waiting", "promoted"):
                if tid in bracket[key]:
                    bracket[key].remove(tid)
            self._hot.add(index)
            self._drop_if_done(index)

    def _drop_if_done(self, index: int) -> None:
        """Forget a bracket that takes no trial and has none left (it decides nothing)."""
        bracket = self._brackets[index]
        if not (
            self._accepts(bracket) or bracket["live"] or bracket["waiting"] or bracket["promoted"]
        ):
            del self._brackets[index]
            self._hot.discard(index)

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
            "version": _STATE_VERSION,
            "metric": self.metric,
            "mode": self.mode,
            "brackets": {str(i): b for i, b in self._brackets.items()},
            "count": self._count,
            "band_len": self._band_len,
            "starved": self._starved,
            "joins": self._joins,
            "cuts": self._cuts,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        version = state.get("version", 1)
        if version not in (1, _STATE_VERSION):
            raise ValueError(
                f"{type(self).__name__} state version {version!r} is not supported "
                f"(expected 1 or {_STATE_VERSION})"
            )
        if version == 1:  # a list of every bracket, "of" and each bracket's cuts whole
            brackets = dict(enumerate(state["brackets"]))
            joins = [[tid, i] for tid, i in state["of"].items()]
            cuts = [[tid, i] for i, b in brackets.items() for tid in b["cut"]]
            state = {**state, "brackets": brackets, "count": len(brackets)}
            state.update(joins=joins, cuts=cuts)
        self.metric, self.mode = state["metric"], state["mode"]
        self._brackets = {
            int(i): {k: v for k, v in b.items() if k != "cut"}
            | {"live": {k: list(v) for k, v in b["live"].items()}}
            | {key: list(b[key]) for key in ("waiting", "promoted")}
            for i, b in state["brackets"].items()
        }
        self._count, self._band_len = state["count"], state["band_len"]
        self._joins, self._cuts = StateLog(state["joins"]), StateLog(state["cuts"])
        self._of = {tid: i for tid, i in self._joins}
        self._cut = {}
        for cut in self._cuts:
            if len(cut) > 1:
                self._cut[cut[0]] = cut[1]
            else:
                del self._cut[cut[0]]
        self._starved = bool(state.get("starved", False))
        self._index()
        for index in list(self._brackets):
            self._drop_if_done(index)


# the bracket of a trial whose bracket was dropped: it takes no result
_ENDED: dict[str, Any] = {"r": None, "halves": 0, "live": {}, "waiting": [], "promoted": []}


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
