"""Population Based Training (Jaderberg et al., 2017), asynchronous or synchronous.

Every `perturbation_interval` of `time_attr`, a trial in the bottom
`quantile_fraction` of the population (by its latest score) exploits a trial of
the top quantile: it is paused, gets a copy of that trial's latest checkpoint and
a perturbed copy of its config (explore), and runs on. The controller records
each step as an "exploit" event; `pbt_schedule` reads a trial's effective
schedule back from the store (e.g. its learning rate over time).

With ``synch=True`` (Ray Tune's synchronous PBT) every trial pauses at each
perturbation boundary until the whole population has reached it (or ended); then
the bottom quantile exploits the top one all at once, and the paused trials run
again, those that exploit first (`exploit_on_resume`), so that each copies its
source's checkpoint from the boundary.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value
from tunefleet.schedulers._base import Decision, Exploit, SchedulerDecision, TrialScheduler
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._common import result_time
from tunefleet.space import Categorical, Domain, Float, Integer
from tunefleet.trial import Trial

_STATE_VERSION = 2  # 2 added the synchronous mode (a version 1 state still loads)


class PopulationBasedTraining(TrialScheduler):
    """PBT with Ray Tune's arguments, asynchronous (default) or synchronous.

    Args:
        time_attr: the result key that measures progress (e.g. "training_iteration").
        metric, mode: what to optimise (default: the experiment's).
        perturbation_interval: exploit/explore every this much of `time_attr`.
        burn_in_period: no exploit before this much of `time_attr`.
        hyperparam_mutations: per config key, how to explore: a search-space domain
            (resampled, or its value times a perturbation factor), a list (resampled,
            or moved to a neighbouring entry), a function returning a new value, or a
            dict of those for nested keys.
        quantile_fraction: the bottom and top fractions of the population (<= 0.5).
        resample_probability: chance to resample instead of perturbing.
        perturbation_factors: the factors a numeric value is multiplied by.
        custom_explore_fn: applied to each new config after the mutations.
        log_config: accepted for Ray Tune compatibility; the lineage is always
            recorded (the "exploit" events, read by `pbt_schedule`).
        require_attrs: a result without `time_attr` or the metric is an error; with
            False it is ignored (the trial continues).
        synch: synchronous PBT: trials wait for each other at every boundary (the
            first one is ``max(perturbation_interval, burn_in_period)``, the next
            ones `perturbation_interval` later). The population is every trial of
            the experiment, so give `num_samples` (a finite number).
        seed: the random generator's seed (decisions are reproducible).

    Example:
        >>> pbt = PopulationBasedTraining(time_attr="training_iteration",
        ...     perturbation_interval=4, hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1)})
    """

    needs_sync_decisions = True  # an exploit pauses the trial right after its result

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: Mapping[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, float] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        name = type(self).__name__
        _check(
            name, perturbation_interval > 0, "perturbation_interval", perturbation_interval, "> 0"
        )
        _check(name, burn_in_period >= 0, "burn_in_period", burn_in_period, ">= 0")
        _check(
            name,
            0 < quantile_fraction <= 0.5,
            "quantile_fraction",
            quantile_fraction,
            "in (0, 0.5]",
        )
        _check(
            name,
            0 <= resample_probability <= 1,
            "resample_probability",
            resample_probability,
            "in [0, 1]",
        )
        _check(
            name, bool(perturbation_factors), "perturbation_factors", perturbation_factors, "given"
        )
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                f"{name} needs hyperparam_mutations or custom_explore_fn: "
                "otherwise exploring changes nothing"
            )
        self.time_attr = time_attr
        self.interval = float(perturbation_interval)
        self.burn_in = float(burn_in_period)
        self.mutations = dict(hyperparam_mutations or {})
        self.quantile = float(quantile_fraction)
        self.resample_probability = float(resample_probability)
        self.factors = tuple(float(f) for f in perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self.log_config = log_config
        self.require_attrs = require_attrs
        self.synch = bool(synch)
        self._seed = random.Random(seed).getrandbits(64)
        self._draws = 0  # decisions drawn so far: the generator is (seed, draws)
        self._scores: dict[str, float] = {}  # trial -> latest score, higher is better
        self._ranked: list[tuple[float, str]] = []  # (score, trial), kept sorted
        self._last_perturbation: dict[str, float] = {}
        self._configs: dict[str, dict[str, Any]] = {}  # the configs exploits copy from
        # synchronous mode: the next boundary, who waits there (and since when), who
        # runs again after it (the exploiting ones first) and their exploits
        self._boundary = max(self.interval, self.burn_in)
        self._barrier: dict[str, float] = {}
        self._released: list[str] = []
        self._planned: dict[str, tuple[str, dict[str, Any]]] = {}

    def set_search_properties(self, metric: MetricSpec, mode: ModeSpec, **spec: Any) -> bool:
        if not super().set_search_properties(metric, mode, **spec):
            return False
        if self.metric is None or self.mode is None:
            raise ValueError(
                f"{type(self).__name__} needs metric and mode (give them to it or to TuneConfig)"
            )
        return True

    # -- results ---------------------------------------------------------------------------
    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        measured = self._measure(trial, result)
        if measured is None:
            return Decision.CONTINUE
        now, score = measured
        tid = trial.trial_id
        self._set_score(tid, score)
        self._configs[tid] = trial.config  # the current one (an exploit replaced it)
        if self.synch:
            return self._synch_result(trial, now, score)
        last = self._last_perturbation.get(tid, 0.0)
        if now < self.burn_in or now - last < self.interval:
            self._observe(trial, now, score, boundary=False)
            return Decision.CONTINUE
        self._last_perturbation[tid] = now
        self._observe(trial, now, score, boundary=True)
        top = self._top_if_bottom(tid)
        if not top:
            return Decision.CONTINUE
        rng = self._rng()
        source = rng.choice(top)
        return Exploit(source, self._explore_for(tid, source, rng))

    def _measure(self, trial: Trial, result: dict[str, Any]) -> tuple[float, float] | None:
        """(time, score as "higher is better"), or None for a result to ignore."""
        assert self.metric is not None
        now = result_time(result, self.time_attr)
        value = metric_value(result, self.metric)
        for key, found in (
            (f"time_attr={self.time_attr!r}", now),
            (f"metric={self.metric!r}", value),
        ):
            if found is None:
                if not self.require_attrs:
                    return None
                raise ValueError(
                    f"{type(self).__name__}: {key} is missing or not a number in the result of "
                    f"trial {trial.trial_id} (keys: {sorted(result)}); pass "
                    "require_attrs=False to ignore such results"
                )
        assert now is not None and value is not None
        if not math.isfinite(now):
            return None  # NaN-safe: a NaN time would hold every boundary forever
        sign = 1.0 if self.mode == "max" else -1.0
        score = sign * value
        return now, (score if math.isfinite(score) else -math.inf)  # NaN ranks last

    def _observe(self, trial: Trial, now: float, score: float, *, boundary: bool) -> None:
        """Every scored result (`boundary`: at a perturbation step); PB2 learns from them."""

    def _explore_for(self, trial_id: str, source: str, rng: random.Random) -> dict[str, Any]:
        """The new config of `trial_id`, which exploits `source`."""
        return self.explore(self._configs.get(source, {}), rng)

    def complete_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Sample each mutated key the config lacks, as Ray's PBT does when a trial is
        added (so `hyperparam_mutations` alone can define those keys)."""
        if not _lacks(config, self.mutations):
            return config
        return _fill(config, self.mutations, self._rng())

    def on_trial_add(self, trial: Trial) -> None:
        self._configs[trial.trial_id] = trial.config

    def _set_score(self, trial_id: str, score: float) -> None:
        """Keep `_ranked` sorted as scores change: O(log n) search, no re-sort."""
        self._drop_score(trial_id)
        self._scores[trial_id] = score
        bisect.insort(self._ranked, (score, trial_id))

    def _drop_score(self, trial_id: str) -> None:
        old = self._scores.pop(trial_id, None)
        if old is not None:
            del self._ranked[bisect.bisect_left(self._ranked, (old, trial_id))]

    def _top_if_bottom(self, trial_id: str) -> list[str]:
        """The top quantile's trials if `trial_id` is in the bottom quantile, else []."""
        n = len(self._ranked)
        size = self._quantile_size(n)
        rank = bisect.bisect_left(self._ranked, (self._scores[trial_id], trial_id))
        if size == 0 or rank >= size:
            return []
        return [tid for _, tid in self._ranked[n - size :]]

    def _quantile_size(self, n: int) -> int:
        return min(math.ceil(n * self.quantile), n // 2)

    def _rng(self) -> random.Random:
        self._draws += 1
        return random.Random(f"{self._seed}:{self._draws}")

    # -- synchronous mode ------------------------------------------------------------------
    def _synch_result(self, trial: Trial, now: float, score: float) -> Decision:
        tid = trial.trial_id
        if tid not in self._barrier:
            if now < self._boundary:
                self._observe(trial, now, score, boundary=False)
                return Decision.CONTINUE
            self._barrier[tid] = now
            self._observe(trial, now, score, boundary=True)
        return Decision.PAUSE  # waits for the rest of the population

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """Synchronous mode: trials that lag behind (interrupted, pending), then the ones
        released from a complete barrier, those that exploit first; None while the
        barrier waits (the searcher may add a new member). The barrier is complete
        once no trial runs and no new one comes (`candidates.starved`)."""
        pool = Candidates.of(candidates)
        if not self.synch:
            return pool.first_pending() or pool.first_paused()
        for tid, trial in pool.interrupted.items():  # Ctrl-C or a driver restart
            if tid not in self._barrier and tid not in self._planned:
                if tid in self._released:
                    self._released.remove(tid)
                return trial
        pending = pool.first_pending()
        if pending is not None:
            return pending
        if self._barrier and not self._released and pool.starved:
            self._release()
        chosen = self._next_released(pool.paused)
        if chosen is None and pool.starved and not self._released:
            for tid, trial in pool.paused.items():  # paused, but not by this barrier
                if tid not in self._barrier:
                    return trial
        return chosen

    def _release(self) -> None:
        """The barrier is complete: plan the exploits, open the next boundary."""
        ranked = sorted((self._scores.get(tid, -math.inf), tid) for tid in self._barrier)
        size = self._quantile_size(len(ranked))
        top = [tid for _, tid in ranked[len(ranked) - size :]]
        bottom = [tid for _, tid in ranked[:size]]
        self._planned = {}
        for tid in bottom:
            rng = self._rng()
            source = rng.choice(top)
            self._planned[tid] = (source, self._explore_for(tid, source, rng))
        self._released = bottom + [tid for _, tid in reversed(ranked[size:])]
        self._boundary = max(self._boundary + self.interval, max(self._barrier.values()))
        self._barrier = {}

    def _next_released(self, paused: Mapping[str, Trial]) -> Trial | None:
        for i, tid in enumerate(self._released):
            if tid in paused:
                del self._released[i]
                return paused[tid]
            if tid in self._planned:
                return None  # no source runs on before every exploit copied its checkpoint
        return None

    def exploit_on_resume(self, trial: Trial) -> Exploit | None:
        planned = self._planned.pop(trial.trial_id, None)
        return None if planned is None else Exploit(planned[0], planned[1])

    # -- explore ---------------------------------------------------------------------------
    def explore(self, config: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """A perturbed copy of `config` (the mutations, then custom_explore_fn)."""
        new = _mutate(config, self.mutations, rng, self.resample_probability, self.factors)
        if self.custom_explore_fn is not None:
            new = self.custom_explore_fn(new)
        return new

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        self._leave(trial.trial_id)

    def on_trial_error(self, trial: Trial) -> None:
        self._leave(trial.trial_id)

    def on_trial_remove(self, trial: Trial) -> None:
        self._leave(trial.trial_id)

    def _leave(self, trial_id: str) -> None:
        """The trial ended: it neither ranks nor holds up a barrier any more, and leaves
        the state (no exploit copies from it): the saved state holds the live trials."""
        self._drop_score(trial_id)
        self._configs.pop(trial_id, None)
        self._last_perturbation.pop(trial_id, None)
        self._barrier.pop(trial_id, None)
        self._planned.pop(trial_id, None)
        if trial_id in self._released:
            self._released.remove(trial_id)

    # -- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "draws": self._draws,
            "scores": dict(self._scores),
            "last_perturbation": dict(self._last_perturbation),
            "configs": dict(self._configs),
            "boundary": self._boundary,
            "barrier": dict(self._barrier),
            "released": list(self._released),
            "planned": {tid: [src, cfg] for tid, (src, cfg) in self._planned.items()},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("version") not in (1, _STATE_VERSION):
            raise ValueError(f"{type(self).__name__} state version {state.get('version')!r}")
        self._seed, self._draws = int(state["seed"]), int(state["draws"])
        self._scores = {str(k): float(v) for k, v in state["scores"].items()}
        self._ranked = sorted((score, tid) for tid, score in self._scores.items())
        self._last_perturbation = {str(k): float(v) for k, v in state["last_perturbation"].items()}
        self._configs = dict(state["configs"])
        self._boundary = float(state.get("boundary", max(self.interval, self.burn_in)))
        self._barrier = {str(k): float(v) for k, v in state.get("barrier", {}).items()}
        self._released = list(state.get("released", []))
        self._planned = {tid: (src, cfg) for tid, (src, cfg) in state.get("planned", {}).items()}


def _check(owner: str, ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise ValueError(f"{owner}: {name}={value!r} must be {rule}")


def _mutate(
    config: dict[str, Any],
    mutations: Mapping[str, Any],
    rng: random.Random,
    resample: float,
    factors: tuple[float, ...],
) -> dict[str, Any]:
    new = dict(config)
    for key, spec in mutations.items():
        old = config.get(key)
        if isinstance(spec, Mapping) and not isinstance(spec, Domain):
            inner = old if isinstance(old, dict) else {}
            new[key] = _mutate(inner, spec, rng, resample, factors)
        elif callable(spec) and not isinstance(spec, Domain):
            new[key] = spec()
        elif isinstance(spec, (list, tuple)):
            new[key] = _from_list(list(spec), old, rng, resample)
        elif isinstance(spec, Categorical):
            new[key] = _from_list(spec.categories, old, rng, resample)
        elif isinstance(spec, Domain):
            new[key] = _from_domain(spec, old, rng, resample, factors)
        else:
            raise ValueError(
                f"hyperparam_mutations[{key!r}]={spec!r} must be a search-space domain, a "
                "list, a function or a dict of those"
            )
    return new


def _lacks(config: dict[str, Any], mutations: Mapping[str, Any]) -> bool:
    for key, spec in mutations.items():
        if key not in config:
            return True
        if isinstance(spec, Mapping) and not isinstance(spec, Domain):
            inner = config[key]
            if not isinstance(inner, dict) or _lacks(inner, spec):
                return True
    return False


def _fill(
    config: dict[str, Any], mutations: Mapping[str, Any], rng: random.Random
) -> dict[str, Any]:
    new = dict(config)
    for key, spec in mutations.items():
        if isinstance(spec, Mapping) and not isinstance(spec, Domain):
            inner = config.get(key)
            new[key] = _fill(inner if isinstance(inner, dict) else {}, spec, rng)
        elif key not in config:  # a fresh draw: resample with probability 1
            new[key] = _mutate({}, {key: spec}, rng, 1.0, (1.0,))[key]
    return new


def _from_list(values: list[Any], old: Any, rng: random.Random, resample: float) -> Any:
    if old not in values or rng.random() < resample:
        return rng.choice(values)
    i = values.index(old) + rng.choice((-1, 1))  # a neighbouring entry, as Ray does
    return values[min(max(i, 0), len(values) - 1)]


def _from_domain(
    domain: Domain, old: Any, rng: random.Random, resample: float, factors: tuple[float, ...]
) -> Any:
    numeric = isinstance(old, (int, float)) and not isinstance(old, bool)
    if not numeric or rng.random() < resample or not isinstance(domain, (Float, Integer)):
        return domain.sample(rng)
    value = old * rng.choice(factors)
    low, high = float(domain.lower), float(domain.upper)
    if isinstance(domain, Integer):
        top = high if domain.include_upper else high - 1
        return int(min(max(round(value), low), top))
    return min(max(value, low), high)
