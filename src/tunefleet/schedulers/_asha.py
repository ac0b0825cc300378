"""Asynchronous successive halving (ASHA), stopping and promotion forms.

Rungs sit at ``grace_period * reduction_factor**k`` (plus the bracket offset).
Stopping form (Ray Tune's): a trial reaching a rung continues only if its value is
at least the ``1 - 1/reduction_factor`` quantile of the values recorded there so
far, else it stops. Promotion form (the ASHA paper's, ``promotion=True``): a trial
reaching a rung pauses; ``choose_trial_to_run`` resumes a paused trial when it is
in the top ``1/reduction_factor`` of its rung, else lets a new trial start.
Values are stored as "higher is better" (the direction is applied once).

Several objectives (``metric=[...]``, ``mode=[...]``, MO-ASHA, Schmucker et al. 2021):
a rung stores vectors and ranks them NSGA-II's way (non-dominated fronts, then
crowding distance, see `_pareto`); "the top 1/eta" is by that order in both forms.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec, objective_point
from tunefleet._milestones import DecisionPoints
from tunefleet._state_log import StateLog
from tunefleet.schedulers._asha_state import (
    LOGS,
    STATE_VERSION,
    asha_view,
    from_version_1,
    new_logs,
)
from tunefleet.schedulers._base import Decision, TrialScheduler
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._common import (
    check_positive,
    check_time_attr,
    direction,
    result_time,
    score,
)
from tunefleet.schedulers._pareto import ParetoRung, check_objectives
from tunefleet.trial import Trial


def _quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of sorted values, q in [0, 1]."""
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class AsyncHyperBandScheduler(TrialScheduler):
    """ASHA (Li et al. 2020) with Ray Tune's arguments and defaults.

    Args:
        time_attr: the result key that measures progress (monotonically increasing).
        metric, mode: what to optimise; taken from `TuneConfig` when None. A list of
            metrics (with one mode, or a list of modes) ranks each rung by non-dominated
            sorting with crowding distance as tie-break (MO-ASHA).
        max_t: no trial runs past this `time_attr` (it is stopped there).
        grace_period: the first rung; no trial is stopped before it.
        reduction_factor: eta; about 1/eta of the trials continue at each rung.
        brackets: number of brackets (each offsets its first rung by a power of eta);
            a trial joins one at random (softmax over their rung counts, as Ray).
        stop_last_trials: stop trials at `max_t` (False lets them run on).
        promotion: the paper's promotion form: pause at rungs, resume the top 1/eta.
        seed: seed of the generator that assigns trials to brackets.

    Example:
        >>> sched = ASHAScheduler(metric="loss", mode="min", max_t=27, reduction_factor=3)
        >>> pareto = ASHAScheduler(metric=["loss", "latency"], mode=["min", "min"], max_t=27)
    """

    def __init__(
        self,
        *,
        time_attr: str = "training_iteration",
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
        promotion: bool = False,
        seed: int | None = 0,
    ) -> None:
        name = type(self).__name__
        #: several objectives as (metric, mode) pairs; None: one, in `metric` and `mode`
        self._objectives: list[tuple[str, str]] | None = None
        if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
            pairs = check_objectives(name, metric, mode)
            metric, mode = pairs[0] if len(pairs) == 1 else (None, None)
            self._objectives = pairs if len(pairs) > 1 else None
        super().__init__(metric=metric, mode=mode)
        check_time_attr(name, time_attr)
        check_positive(name, "max_t", max_t)
        check_positive(name, "grace_period", grace_period)
        check_positive(name, "brackets", brackets, integer=True)
        check_positive(name, "reduction_factor", reduction_factor)
        if reduction_factor <= 1:
            raise ValueError(f"{name}: reduction_factor={reduction_factor!r} must be > 1")
        if grace_period > max_t:
            raise ValueError(f"{name}: grace_period={grace_period!r} must be <= max_t={max_t!r}")
        self.time_attr = time_attr
        self.max_t = max_t
        self.grace_period = grace_period
        self.reduction_factor = reduction_factor
        self.stop_last_trials = stop_last_trials
        self.promotion = promotion
        self.needs_sync_decisions = promotion
        # the generator's origin (a seed, or a state restored from a version 1 state) and
        # how many numbers it gave since: saved instead of its 625 words, which change
        # at every trial
        self._rng_origin: dict[str, Any] = {
            "seed": random.SystemRandom().randrange(2**63) if seed is None else seed
        }
        self._rng = random.Random(self._rng_origin["seed"])
        self._draws = 0
        self._milestones: list[list[float]] = []
        for s in range(brackets):
            ms, m = [], grace_period * reduction_factor**s
            # the promotion form has no rung at max_t: a trial there is done
            while m < max_t or (m == max_t and not promotion):
                ms.append(m)
                m *= reduction_factor
            self._milestones.append(ms)
        self._rungs: list[list[dict[str, float]]] = [[{} for _ in ms] for ms in self._milestones]
        self._pareto = [[ParetoRung() for _ in ms] for ms in self._milestones]  # several
        self._promoted: list[list[list[str]]] = [[[] for _ in ms] for ms in self._milestones]
        self._bracket: dict[str, int] = {}
        self._level: dict[str, int] = {}  # promotion: rungs passed
        self._paused_at: dict[str, int] = {}  # promotion: waiting at this rung
        self._logs = new_logs()
        self._index()

    def _index(self) -> None:
        """Derived from the state, kept in step with it: no sort per decision.

        Stopping form: each rung's values, sorted. Promotion form: each rung's ranking
        as sorted ``(-value, seq, trial)`` (``seq`` keeps the rung's arrival order for
        ties, as a stable sort did), the same for its paused trials, and sets of the
        promoted ones.
        """
        self._sorted = [[sorted(r.values()) for r in rungs] for rungs in self._rungs]
        self._seq: list[list[dict[str, int]]] = []
        self._ranked: list[list[list[tuple[float, int, str]]]] = []
        for rungs in self._rungs:
            self._seq.append([{i: n for n, i in enumerate(r)} for r in rungs])
            self._ranked.append(
                [sorted((-v, n, i) for n, (i, v) in enumerate(r.items())) for r in rungs]
            )
        self._counter = max((len(r) for rungs in self._rungs for r in rungs), default=0)
        self._waiting: list[list[list[tuple[float, int, str]]]] = [
            [[] for _ in rungs] for rungs in self._rungs
        ]
        for trial_id, k in self._paused_at.items():
            b = self._bracket[trial_id]
            if trial_id in self._seq[b][k]:
                bisect.insort(self._waiting[b][k], self._key(b, k, trial_id))
        self._promoted_set = [[set(p) for p in ps] for ps in self._promoted]

    def _key(self, b: int, k: int, trial_id: str) -> tuple[float, int, str]:
        return (-self._rungs[b][k][trial_id], self._seq[b][k][trial_id], trial_id)

    def _record(self, b: int, k: int, trial_id: str, value: float) -> None:
        """Promotion form: `trial_id` scored `value` at rung k (a dict write, indexed)."""
        ranked = self._ranked[b][k]
        if trial_id in self._seq[b][k]:  # rewritten: the dict keeps its place
            del ranked[bisect.bisect_left(ranked, self._key(b, k, trial_id))]
        else:
            self._seq[b][k][trial_id] = self._counter
            self._counter += 1
        self._rungs[b][k][trial_id] = value
        self._logs["records"].append([b, k, trial_id, value])
        bisect.insort(ranked, self._key(b, k, trial_id))

    def _unrecord(self, b: int, k: int, trial_id: str) -> None:
        if trial_id in self._seq[b][k]:
            self._unpause(trial_id)
            ranked = self._ranked[b][k]
            del ranked[bisect.bisect_left(ranked, self._key(b, k, trial_id))]
            del self._seq[b][k][trial_id]
            del self._rungs[b][k][trial_id]
            self._logs["records"].append([b, k, trial_id])  # removed

    def _pause(self, b: int, k: int, trial_id: str) -> None:
        self._unpause(trial_id)
        self._paused_at[trial_id] = k
        self._logs["pauses"].append([trial_id, k])
        bisect.insort(self._waiting[b][k], self._key(b, k, trial_id))

    def _unpause(self, trial_id: str) -> None:
        k = self._paused_at.pop(trial_id, None)
        if k is not None:
            self._logs["pauses"].append([trial_id])  # no longer paused
            b = self._bracket[trial_id]
            if trial_id in self._seq[b][k]:
                waiting = self._waiting[b][k]
                del waiting[bisect.bisect_left(waiting, self._key(b, k, trial_id))]

    # -- events --------------------------------------------------------------------------
    def set_search_properties(self, metric: MetricSpec, mode: ModeSpec, **spec: Any) -> bool:
        """The experiment's objectives, unless the scheduler has its own (they win)."""
        if self._objectives is not None:
            return True
        several = isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple))
        if several and self.metric is None and self.mode is None:
            pairs = check_objectives(type(self).__name__, metric, mode)
            if len(pairs) > 1:
                self._objectives = pairs
                return True
            metric, mode = pairs[0]  # a list of one: the single-objective rule
        return super().set_search_properties(metric, mode, **spec)

    def on_trial_add(self, trial: Trial) -> None:
        if self._objectives is None:
            self._sign()
        self._join(trial.trial_id)

    def _join(self, trial_id: str) -> int:
        if trial_id not in self._bracket:
            sizes = [len(ms) for ms in self._milestones]
            weights = [math.exp(s - max(sizes)) for s in sizes]
            pick, acc = self._rng.random() * sum(weights), 0.0
            self._draws += 1
            index = len(weights) - 1
            for i, w in enumerate(weights):
                acc += w
                if pick < acc:
                    index = i
                    break
            self._bracket[trial_id] = index
            self._level[trial_id] = 0
            self._logs["joins"].append([trial_id, index])
        return self._bracket[trial_id]

    def decision_points(self) -> DecisionPoints | None:
        """Its rungs (of every bracket) and max_t: the stopping form decides only there.
        The promotion form decides on every result (`needs_sync_decisions`)."""
        if self.promotion:
            return None
        points = {m for ms in self._milestones for m in ms}
        if self.stop_last_trials:
            points.add(self.max_t)
        return (self.time_attr, tuple(sorted(float(p) for p in points)))

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        if self._objectives is not None:
            return self._pareto_result(trial.trial_id, result, self._objectives)
        sign = self._sign()
        t = result_time(result, self.time_attr)
        if t is None:
            return Decision.CONTINUE
        assert self.metric is not None
        value = score(result, self.metric, sign)
        b = self._join(trial.trial_id)
        if self.promotion:
            decision = self._promotion_result(trial.trial_id, b, t, value)
        else:
            decision = self._stopping_result(trial.trial_id, b, t, value)
        if self.stop_last_trials and t >= self.max_t:
            return self.note_stop(trial.trial_id, f"max_t={self.max_t} reached", early=False)
        return decision

    def _stopping_result(self, trial_id: str, b: int, t: float, value: float) -> Decision:
        for k in reversed(range(len(self._milestones[b]))):
            if t < self._milestones[b][k]:
                continue
            recorded = self._rungs[b][k]
            if trial_id in recorded:
                break  # decided at this rung already
            ordered = self._sorted[b][k]
            cutoff = None
            if ordered:
                cutoff = _quantile(ordered, 1 - 1 / self.reduction_factor)
            recorded[trial_id] = value
            self._logs["records"].append([b, k, trial_id, value])
            bisect.insort(ordered, value)
            if cutoff is not None and value < cutoff:
                return self.note_stop(trial_id, self._rung_name(b, k))
            break
        return Decision.CONTINUE

    def _rung_name(self, b: int, k: int) -> str:
        return f"rung {k + 1} of {len(self._milestones[b])}"

    def _promotion_result(self, trial_id: str, b: int, t: float, value: float) -> Decision:
        if trial_id in self._paused_at:  # resumed without a promotion: the experiment's end
            return self.note_stop(
                trial_id, f"not promoted from {self._rung_name(b, self._paused_at[trial_id])}"
            )
        ms = self._milestones[b]
        while self._level[trial_id] < len(ms) and t >= ms[self._level[trial_id]]:
            k = self._level[trial_id]
            self._record(b, k, trial_id, value)
            if not self._promotable(b, k, trial_id, relaxed=False):
                self._pause(b, k, trial_id)
                return Decision.PAUSE
            self._promote(b, k, trial_id)  # in the top already: no pause needed
        return Decision.CONTINUE

    def _promotable(self, b: int, k: int, trial_id: str, *, relaxed: bool) -> bool:
        rung = self._rungs[b][k]
        if trial_id not in rung or trial_id in self._promoted_set[b][k]:
            return False
        return self._rank(b, k, trial_id) < self._top(b, k, relaxed=relaxed)

    def _rank(self, b: int, k: int, trial_id: str) -> int:
        return bisect.bisect_left(self._ranked[b][k], self._key(b, k, trial_id))

    def _top(self, b: int, k: int, *, relaxed: bool) -> int:
        n = len(self._rungs[b][k]) / self.reduction_factor
        return math.ceil(n) if relaxed else math.floor(n)

    def _promote(self, b: int, k: int, trial_id: str) -> None:
        self._promoted[b][k].append(trial_id)
        self._logs["promotions"].append([b, k, trial_id])
        self._promoted_set[b][k].add(trial_id)
        self._level[trial_id] = k + 1
        self._unpause(trial_id)

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        self._unpause(trial.trial_id)

    def on_trial_error(self, trial: Trial) -> None:
        self._leave(trial.trial_id)

    def on_trial_remove(self, trial: Trial) -> None:
        self._leave(trial.trial_id)

    def _leave(self, trial_id: str) -> None:
        self._unpause(trial_id)
        if self.promotion and self._objectives is not None:
            for b, pareto_rungs in enumerate(self._pareto):
                for k, pareto_rung in enumerate(pareto_rungs):
                    if trial_id in pareto_rung:
                        pareto_rung.discard(trial_id)
                        self._logs["records"].append([b, k, trial_id])  # removed
        elif self.promotion:  # a gone trial must not take a promotion slot
            for b, rungs in enumerate(self._rungs):
                for k in range(len(rungs)):
                    self._unrecord(b, k, trial_id)

    # -- which trial runs next -------------------------------------------------------------
    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """Promotion form: the best promotable paused trial (highest rung first), else a
        trial paused by an interruption, else a pending one (or a new one: None).

        When no new trial will come (`candidates.starved`), the best paused trial of
        each rung is promoted even when its rung has fewer than `reduction_factor`
        trials, so the search's best still reaches `max_t`; the rest stay paused and
        the controller ends them ("not resumed by the scheduler").
        """
        if not self.promotion:
            return TrialScheduler.choose_trial_to_run(self, candidates)
        pool = Candidates.of(candidates)
        paused = pool.paused
        chosen = self._best_promotable(paused, relaxed=False)
        if chosen is None and pool.interrupted:  # e.g. Ctrl-C between two rungs
            waits = self._paused_at  # (paused at a rung, then interrupted: it waits on)
            chosen = next((t for i, t in pool.interrupted.items() if i not in waits), None)
        if chosen is None:
            chosen = pool.first_pending()
        if chosen is None and pool.starved:
            chosen = self._best_promotable(paused, relaxed=True)
        return chosen

    def _best_promotable(self, paused: Mapping[str, Trial], *, relaxed: bool) -> Trial | None:
        if self._objectives is not None:
            return self._pareto_best_promotable(paused, relaxed=relaxed)
        for b, rungs in enumerate(self._rungs):
            for k in reversed(range(len(rungs))):
                top = self._top(b, k, relaxed=relaxed)
                # the rung's paused trials, best first: past the top, none can be promoted
                for key in self._waiting[b][k]:
                    trial_id = key[2]
                    if trial_id not in paused or trial_id in self._promoted_set[b][k]:
                        continue
                    if bisect.bisect_left(self._ranked[b][k], key) >= top:
                        break
                    self._promote(b, k, trial_id)
                    return paused[trial_id]
        return None

    # -- several objectives: the same rules, by NSGA-II's order --------------------------------
    def _pareto_result(
        self, trial_id: str, result: dict[str, Any], pairs: list[tuple[str, str]]
    ) -> Decision:
        t = result_time(result, self.time_attr)
        point = objective_point(result, pairs)  # "higher is better"; None unless all finite
        if t is None or point is None:
            return Decision.CONTINUE  # ignored, as a result without the metric
        b = self._join(trial_id)
        if self.promotion:
            decision = self._pareto_promotion(trial_id, b, t, point)
        else:
            decision = self._pareto_stopping(trial_id, b, t, point)
        if self.stop_last_trials and t >= self.max_t:
            return self.note_stop(trial_id, f"max_t={self.max_t} reached", early=False)
        return decision

    def _pareto_stopping(self, trial_id: str, b: int, t: float, point: list[float]) -> Decision:
        for k in reversed(range(len(self._milestones[b]))):
            if t < self._milestones[b][k]:
                continue
            rung = self._pareto[b][k]
            if trial_id in rung:
                break  # decided at this rung already
            rung.record(trial_id, point)
            self._logs["records"].append([b, k, trial_id, point])
            # the top 1/eta rounded up, so the first arrival continues (as with one metric)
            if rung.ahead(trial_id) >= math.ceil(len(rung) / self.reduction_factor):
                return self.note_stop(trial_id, self._rung_name(b, k))
            break
        return Decision.CONTINUE

    def _pareto_promotion(self, trial_id: str, b: int, t: float, point: list[float]) -> Decision:
        if trial_id in self._paused_at:  # resumed without a promotion: the experiment's end
            return self.note_stop(
                trial_id, f"not promoted from {self._rung_name(b, self._paused_at[trial_id])}"
            )
        ms = self._milestones[b]
        while self._level[trial_id] < len(ms) and t >= ms[self._level[trial_id]]:
            k = self._level[trial_id]
            rung = self._pareto[b][k]
            rung.record(trial_id, point)
            self._logs["records"].append([b, k, trial_id, point])
            top = math.floor(len(rung) / self.reduction_factor)
            if trial_id in self._promoted_set[b][k] or rung.rank(trial_id) >= top:
                self._paused_at[trial_id] = k
                self._logs["pauses"].append([trial_id, k])
                return Decision.PAUSE
            self._promote(b, k, trial_id)  # in the top already: no pause needed
        return Decision.CONTINUE

    def _pareto_best_promotable(
        self, paused: Mapping[str, Trial], *, relaxed: bool
    ) -> Trial | None:
        for b, rungs in enumerate(self._pareto):
            for k in reversed(range(len(rungs))):
                n = len(rungs[k]) / self.reduction_factor
                top = math.ceil(n) if relaxed else math.floor(n)
                for trial_id in rungs[k].order()[:top] if top else ():
                    if (
                        self._paused_at.get(trial_id) == k
                        and trial_id in paused
                        and trial_id not in self._promoted_set[b][k]
                    ):
                        self._promote(b, k, trial_id)
                        return paused[trial_id]
        return None

    # -- state -----------------------------------------------------------------------------
    def _sign(self) -> float:
        return direction(type(self).__name__, self.metric, self.mode)

    def get_state(self) -> dict[str, Any]:
        """Constant-size head; the rungs, promotions, brackets and pauses are `StateLog`s
        of what happened, in order (a save writes only the new records)."""
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "metric": self.metric,
            "mode": self.mode,
            "rng": {**self._rng_origin, "draws": self._draws},
            **self._logs,
            # Not needed to restore (constructor arguments); read by the dashboard.
            "milestones": self._milestones,
            "time_attr": self.time_attr,
        }
        if self._objectives is not None:  # lists of metrics and modes, vectors in the rungs
            state["metric"] = [metric for metric, _ in self._objectives]
            state["mode"] = [mode for _, mode in self._objectives]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        name = type(self).__name__
        if state.get("version", 1) not in (1, STATE_VERSION):
            raise ValueError(
                f"{name} state version {state.get('version')!r} is not supported "
                f"(expected 1 or {STATE_VERSION})"
            )
        if "version" not in state:  # version 1: the rungs and dicts whole
            state = from_version_1(state)
        self.metric, self.mode = state["metric"], state["mode"]
        self._logs = {key: StateLog(state[key]) for key in LOGS}
        view = asha_view(state, self._milestones)
        self._rungs, self._promoted = view["rungs"], view["promoted"]
        self._bracket, self._level = view["bracket"], view["level"]
        self._paused_at = view["paused_at"]
        self._objectives = None
        self._pareto = [[ParetoRung() for _ in rungs] for rungs in self._rungs]
        if isinstance(self.metric, list):  # several objectives: vectors in the rungs
            self._objectives = check_objectives(name, self.metric, self.mode)
            self.metric = self.mode = None
            vectors: list[list[dict[str, Any]]] = view["rungs"]
            self._pareto = [[ParetoRung(r) for r in rungs] for rungs in vectors]
            self._rungs = [[{} for _ in rungs] for rungs in vectors]
        rng = state["rng"]
        self._rng_origin = {key: rng[key] for key in ("seed", "state") if key in rng}
        if "seed" in rng:
            self._rng = random.Random(rng["seed"])
        else:
            version, internal, gauss = rng["state"]
            self._rng.setstate((version, tuple(internal), gauss))
        for _ in range(rng["draws"]):
            self._rng.random()
        self._draws = rng["draws"]
        self._index()


ASHAScheduler = AsyncHyperBandScheduler
