"""The median stopping rule (Golovin et al. 2017, Google Vizier).

Its saved state is a few numbers and logs (`StateLog`) of the results, restarts, soft
stops and failures, appended as they happen: a save writes what changed.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from itertools import pairwise
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

_STATE_VERSION = 2  # 2: the histories etc. as logs of events (a version 1 state loads)


class MedianStoppingRule(TrialScheduler):
    """Stop a trial whose best result is worse than the median of the others' averages.

    At time t (past `grace_period`), the other trials that reached t each give the
    mean of their results between `grace_period` and t; if the trial's best result so
    far is worse than the median of those means (with at least `min_samples_required`
    of them), it is stopped (`hard_stop=True`) or paused (`hard_stop=False`).

    Args:
        time_attr: the result key that measures progress.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        grace_period: no trial is judged before this `time_attr`.
        min_samples_required: other trials needed before anyone is judged.
        min_time_slice: when > 0 and too few samples exist, a trial that ran this
            long since it last started yields its slot to a waiting trial (PAUSE).
        hard_stop: STOP the poor trials; False PAUSEs them (they are resumed only
            when nothing else waits).
    """

    def __init__(
        self,
        *,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: float = 0,
        hard_stop: bool = True,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        name = type(self).__name__
        check_time_attr(name, time_attr)
        check_positive(name, "min_samples_required", min_samples_required, integer=True)
        for arg, value in (("grace_period", grace_period), ("min_time_slice", min_time_slice)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name}: {arg}={value!r} is not valid: it must be a number >= 0")
        self.time_attr = time_attr
        self.grace_period = grace_period
        self.min_samples_required = min_samples_required
        self.min_time_slice = min_time_slice
        self.hard_stop = hard_stop
        self.needs_sync_decisions = not hard_stop or min_time_slice > 0
        self._results: dict[str, list[list[float]]] = {}  # trial -> [[t, value], ...]
        self._stopped: dict[str, None] = {}  # paused as poor (hard_stop=False), in order
        self._last_start: dict[str, float] = {}  # t at which the trial last (re)started
        self._gone = StateLog()  # errored: not compared against
        self._log = StateLog()  # [trial, t, value] per result, in order
        self._starts = StateLog()  # [trial, t]: `_last_start` set
        self._stopped_log = StateLog()  # the keys of `_stopped`, in order
        self._others_waiting = False  # other trials waited for a slot when last asked
        self._reset_caches()

    def _reset_caches(self) -> None:
        """Derived from the state above only (rebuilt by `set_state`), for speed.

        `_sorted_means[t]` (built once t has been asked about twice) holds, sorted,
        the running mean at t of every trial not `_gone` whose last time is >= t: the
        multiset the median is taken over, plus the asking trial itself.
        """
        self._times: dict[str, list[float]] = {}
        self._vals: dict[str, list[float]] = {}
        self._unordered: set[str] = set()  # restarted once: times not increasing
        self._gone_set: set[str] = set(self._gone)
        self._sorted_means: dict[float, list[float]] = {}
        self._key_times: list[float] = []  # the keys of _sorted_means, sorted
        self._asked: set[float] = set()
        for tid, history in self._results.items():
            times = self._times[tid] = [p[0] for p in history]
            self._vals[tid] = [p[1] for p in history]
            if any(not b > a for a, b in pairwise(times)) or any(x != x for x in times):
                self._unordered.add(tid)

    def on_trial_add(self, trial: Trial) -> None:
        self._sign()

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        return self._result(trial, result)

    def _result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        sign = self._sign()
        t = result_time(result, self.time_attr)
        if t is None:
            return Decision.CONTINUE
        assert self.metric is not None
        tid = trial.trial_id
        history = self._results.setdefault(tid, [])
        if tid not in self._last_start or (history and t <= history[-1][0]):
            self._last_start[tid] = t  # first result, or restarted from a checkpoint
            self._starts.append([tid, t])
        self._record(tid, t, score(result, self.metric, sign))
        if tid in self._stopped:
            return Decision.CONTINUE  # resumed after a soft stop: run on (as Ray)
        if t < self.grace_period:
            return Decision.CONTINUE
        median = self._median(tid, t)
        if median is None:
            return self._insufficient(tid, t)
        best = max(v for _, v in history)
        if best < median:
            if self.hard_stop:
                return self.note_stop(tid, "below the median")
            self._stopped[tid] = None
            self._stopped_log.append(tid)
            return Decision.PAUSE
        return Decision.CONTINUE

    def _insufficient(self, tid: str, t: float) -> Decision:
        if self.min_time_slice <= 0 or t - self._last_start[tid] < self.min_time_slice:
            return Decision.CONTINUE
        return Decision.PAUSE if self._others_waiting else Decision.CONTINUE

    def _median(self, tid: str, t: float) -> float | None:
        """The median of the others' running means at t; None when too few."""
        means = self._sorted_means.get(t)
        if means is None and t in self._asked and t == t:
            means = self._build(t)
        if means is None:
            self._asked.add(t)
            gone = {tid, *self._gone}
            others = [i for i, h in self._results.items() if i not in gone and h[-1][0] >= t]
            if len(others) < self.min_samples_required:
                return None
            return statistics.median(self._running_mean(i, t) for i in others)
        skip = len(means)  # the asking trial's own mean, left out
        if tid not in self._gone_set:
            skip = bisect_left(means, self._running_mean(tid, t))
        n = len(means) - (skip < len(means))
        if n < self.min_samples_required:
            return None
        half = n // 2
        upper = means[half] if half < skip else means[half + 1]
        if n % 2:
            return upper
        lower = means[half - 1] if half - 1 < skip else means[half]
        return (lower + upper) / 2

    def _build(self, t: float) -> list[float]:
        means = sorted(
            self._running_mean(i, t)
            for i, h in self._results.items()
            if i not in self._gone_set and h[-1][0] >= t
        )
        self._sorted_means[t] = means
        insort(self._key_times, t)
        return means

    def _keys(self, low: float, high: float, *, low_inclusive: bool) -> list[float]:
        """The cached times in [low, high] (or (low, high])."""
        start = (bisect_left if low_inclusive else bisect_right)(self._key_times, low)
        return self._key_times[start : bisect_right(self._key_times, high)]

    def _record(self, tid: str, t: float, value: float) -> None:
        """Append a result to the trial's history, keeping `_sorted_means` exact."""
        history = self._results[tid]
        cached = bool(self._key_times) and tid not in self._gone_set
        last = history[-1][0] if history else None
        regular = t == t and (last is None or t > last)  # NaN compares False
        if not regular:  # restarted from a checkpoint (or NaN times): redo its means
            self._unordered.add(tid)
            if cached and last is not None and last == last:
                for k in self._keys(-math.inf, last, low_inclusive=True):
                    self._remove(k, self._running_mean(tid, k))
        history.append([t, value])
        self._log.append([tid, t, value])
        self._times.setdefault(tid, []).append(t)
        self._vals.setdefault(tid, []).append(value)
        if cached and t == t:
            low = last if regular and last is not None else -math.inf
            for k in self._keys(low, t, low_inclusive=not (regular and last is not None)):
                insort(self._sorted_means[k], self._running_mean(tid, k))

    def _remove(self, k: float, mean: float) -> None:
        means = self._sorted_means[k]
        del means[bisect_left(means, mean)]

    def _running_mean(self, tid: str, t: float) -> float:
        # statistics.fmean is math.fsum(values) / len(values); fsum is exactly rounded,
        # so the order of the values does not matter.
        if tid in self._unordered:
            scoped = [v for time, v in self._results[tid] if self.grace_period <= time <= t]
            return math.fsum(scoped) / len(scoped) if scoped else -math.inf
        times = self._times[tid]
        lo, hi = bisect_left(times, self.grace_period), bisect_right(times, t)
        return math.fsum(self._vals[tid][lo:hi]) / (hi - lo) if lo < hi else -math.inf

    def on_trial_error(self, trial: Trial) -> None:
        tid = trial.trial_id
        if tid not in self._gone:
            self._gone.append(tid)
            self._gone_set.add(tid)
            history = self._results.get(tid)
            if history and history[-1][0] == history[-1][0]:
                for k in self._keys(-math.inf, history[-1][0], low_inclusive=True):
                    self._remove(k, self._running_mean(tid, k))

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """FIFO, except that trials paused as poor (hard_stop=False) run only when
        nothing else can (`candidates.starved`); then they run to the end, as in Ray."""
        pool = Candidates.of(candidates)
        chosen = pool.first_pending()
        if chosen is None:
            paused = pool.paused.values()
            chosen = next((t for t in paused if t.trial_id not in self._stopped), None)
        if chosen is None and pool.starved:
            chosen = pool.first_paused()
        self._others_waiting = len(pool) > (chosen is not None)
        return chosen

    def _sign(self) -> float:
        return direction(type(self).__name__, self.metric, self.mode)

    def get_state(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "metric": self.metric,
            "mode": self.mode,
            "results": self._log,
            "stopped": self._stopped_log,
            "starts": self._starts,
            "gone": self._gone,
            "others_waiting": self._others_waiting,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        version = state.get("version", 1)
        if version not in (1, _STATE_VERSION):
            raise ValueError(
                f"{type(self).__name__} state version {version!r} is not supported "
                f"(expected 1 or {_STATE_VERSION})"
            )
        if version == 1:  # each trial's history and start whole
            results = [[k, *p] for k, v in state["results"].items() for p in v]
            starts = [[k, t] for k, t in state["last_start"].items()]
            state = {**state, "results": results, "starts": starts}
        self.metric, self.mode = state["metric"], state["mode"]
        self._log, self._starts = StateLog(state["results"]), StateLog(state["starts"])
        self._results = {}
        for tid, t, value in self._log:
            self._results.setdefault(tid, []).append([t, value])
        self._stopped_log = StateLog(state["stopped"])
        self._stopped = dict.fromkeys(self._stopped_log)
        self._last_start = {tid: t for tid, t in self._starts}
        self._gone = StateLog(state["gone"])
        self._others_waiting = bool(state.get("others_waiting", False))
        self._reset_caches()
