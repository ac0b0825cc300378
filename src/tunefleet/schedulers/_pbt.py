"""Population Based Training (Jaderberg et al., 2017), asynchronous, with lineage.

Every `perturbation_interval` of `time_attr`, a trial in the bottom
`quantile_fraction` of the population (by its latest score) exploits a trial of
the top quantile: it is paused, gets a copy of that trial's latest checkpoint and
a perturbed copy of its config (explore), and runs on. The controller records
each step as an "exploit" event; `pbt_schedule` reads a trial's effective
schedule back from the store (e.g. its learning rate over time).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Mapping
from typing import Any

from tunefleet.schedulers._base import Decision, Exploit, SchedulerDecision, TrialScheduler
from tunefleet.space import Categorical, Domain, Float, Integer
from tunefleet.trial import Trial

_STATE_VERSION = 1


class PopulationBasedTraining(TrialScheduler):
    """PBT with Ray Tune's arguments (asynchronous; ``synch=True`` is not supported yet).

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
        synch: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        _check(perturbation_interval > 0, "perturbation_interval", perturbation_interval, "> 0")
        _check(burn_in_period >= 0, "burn_in_period", burn_in_period, ">= 0")
        _check(0 < quantile_fraction <= 0.5, "quantile_fraction", quantile_fraction, "in (0, 0.5]")
        _check(
            0 <= resample_probability <= 1,
            "resample_probability",
            resample_probability,
            "in [0, 1]",
        )
        _check(bool(perturbation_factors), "perturbation_factors", perturbation_factors, "given")
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                "PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn: "
                "otherwise exploring changes nothing"
            )
        if synch:
            raise ValueError(
                "PopulationBasedTraining(synch=True) is not supported yet; use synch=False "
                "(asynchronous PBT, Ray Tune's default)"
            )
        self.time_attr = time_attr
        self.interval = float(perturbation_interval)
        self.burn_in = float(burn_in_period)
        self.mutations = dict(hyperparam_mutations or {})
        self.quantile = float(quantile_fraction)
        self.resample_probability = float(resample_probability)
        self.factors = tuple(float(f) for f in perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self._seed = random.Random(seed).getrandbits(64)
        self._draws = 0  # decisions drawn so far: the generator is (seed, draws)
        self._scores: dict[str, float] = {}  # trial -> latest score, higher is better
        self._ranked: list[tuple[float, str]] = []  # (score, trial), kept sorted
        self._last_perturbation: dict[str, float] = {}
        self._configs: dict[str, dict[str, Any]] = {}  # the configs exploits copy from

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        super().set_search_properties(metric, mode, **spec)
        if self.metric is None or self.mode is None:
            raise ValueError(
                "PopulationBasedTraining needs metric and mode (give them to it or to TuneConfig)"
            )
        return True

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        if self.time_attr not in result:
            raise ValueError(
                f"PopulationBasedTraining: time_attr={self.time_attr!r} is not in the result "
                f"of trial {trial.trial_id} (keys: {sorted(result)})"
            )
        assert self.metric is not None
        now = float(result[self.time_attr])
        sign = 1.0 if self.mode == "max" else -1.0
        self._set_score(trial.trial_id, sign * float(result[self.metric]))
        last = self._last_perturbation.get(trial.trial_id, 0.0)
        if now < self.burn_in or now - last < self.interval:
            return Decision.CONTINUE
        self._last_perturbation[trial.trial_id] = now
        top = self._top_if_bottom(trial.trial_id)
        if not top:
            return Decision.CONTINUE
        rng = self._rng()
        source = rng.choice(top)
        return Exploit(source, self.explore(self._configs.get(source, {}), rng))

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
        size = min(math.ceil(n * self.quantile), n // 2)
        rank = bisect.bisect_left(self._ranked, (self._scores[trial_id], trial_id))
        if size == 0 or rank >= size:
            return []
        return [tid for _, tid in self._ranked[n - size :]]

    def _rng(self) -> random.Random:
        self._draws += 1
        return random.Random(f"{self._seed}:{self._draws}")

    # -- explore ---------------------------------------------------------------------------
    def explore(self, config: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """A perturbed copy of `config` (the mutations, then custom_explore_fn)."""
        new = _mutate(config, self.mutations, rng, self.resample_probability, self.factors)
        if self.custom_explore_fn is not None:
            new = self.custom_explore_fn(new)
        return new

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        self._drop_score(trial.trial_id)

    def on_trial_error(self, trial: Trial) -> None:
        self._drop_score(trial.trial_id)

    def on_trial_remove(self, trial: Trial) -> None:
        self._drop_score(trial.trial_id)

    # -- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "draws": self._draws,
            "scores": dict(self._scores),
            "last_perturbation": dict(self._last_perturbation),
            "configs": dict(self._configs),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"PopulationBasedTraining state version {state.get('version')!r}")
        self._seed, self._draws = int(state["seed"]), int(state["draws"])
        self._scores = {str(k): float(v) for k, v in state["scores"].items()}
        self._ranked = sorted((score, tid) for tid, score in self._scores.items())
        self._last_perturbation = {str(k): float(v) for k, v in state["last_perturbation"].items()}
        self._configs = dict(state["configs"])


def _check(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise ValueError(f"PopulationBasedTraining: {name}={value!r} must be {rule}")


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
