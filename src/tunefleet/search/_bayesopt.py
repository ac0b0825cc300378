"""Gaussian-process Bayesian optimisation (Ray Tune's `BayesOptSearch`), on Optuna's GPSampler.

Ray wraps the `bayesian-optimization` package; this searcher keeps Ray's name and
arguments but runs Optuna's `GPSampler`, which did much better in a comparison
on three test functions (see docs/search.md) and handles what bayes_opt cannot
or does poorly: log scales, ints, categories, constraints, and trials still
running (q-batch log expected improvement, so a batch spreads out).

Each suggestion is an Optuna trial asked from an in-memory study; `resolve(space,
rng, chooser=...)` asks it for every domain's value in an exact form (quantized
values as their multiple k of q, categories as indices), so values come back
with exact types. A fresh GPSampler seeded from (random_state, call number)
makes each suggestion: nothing carries over between calls but the observations,
so `set_state`, which replays them into a new study, gives the same next
suggestions.
"""

from __future__ import annotations

import collections
import json
import math
import random
from typing import TYPE_CHECKING, Any

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value
from tunefleet._state_log import StateLog
from tunefleet.search._base import FINISHED, SpaceSearcher
from tunefleet.search._bayesopt_acqf import check_constraints, gp_sampler, parse_utility
from tunefleet.search._optuna_state import TrialTracker
from tunefleet.search._shared import (
    check_points,
    check_rewards,
    check_state_version,
    children,
    claim_name,
    grid_refused,
    import_optional,
    index_distribution,
    index_value,
    number_index,
    point_params,
    quiet_optuna,
    require_metric,
    split_space,
    suggest_index,
    tell_pruned,
)
from tunefleet.space import (
    GRID_KEY,
    Categorical,
    Domain,
    Float,
    Function,
    Normal,
    flatten,
    format_path,
    grid_axes,
    parameter_name,
    resolve,
    uniform,
    validate_space,
)
from tunefleet.space._domains import _Category

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

_STATE_VERSION = 2  # 2: finished trials and the asks in StateLogs; 1 loads
_RANDOM_TRIES = 10  # random draws replacing a duplicate before giving up (None)


class BayesOptSearch(SpaceSearcher):
    """Gaussian-process Bayesian optimisation (Ray Tune's `BayesOptSearch`).

    Runs Optuna's GPSampler (Matern 5/2 kernel, log expected improvement; its
    q-batch form while trials are running, its constrained form with
    `TuneConfig.constraints`). Floats (log-scaled or not), ints and quantized
    values are modelled as such, categories natively; parameters inside a
    choice's sub-spaces are drawn at random (only the parameters every trial has
    are modelled).

    Args:
        space: a search space for this searcher alone: tunefleet domains, or Ray's
            ``{"x": (lower, upper)}`` bounds (uniform floats); the Tuner's
            `param_space` then holds only constants. None: use `param_space`.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first (nested dicts or "a/b" keys; values
            left out are drawn at random).
        evaluated_rewards: the metric values of `points_to_evaluate`, already known:
            those points are told to the model and not run again.
        utility_kwargs: Ray's acquisition settings for bayes_opt, honoured: ``"ucb"``
            (mean + kappa * std), ``"ei"`` or ``"poi"`` over the best value + `xi` (in
            the metric's units); missing keys take bayes_opt's defaults. None: GPSampler's
            log expected improvement (``{"kind": "ei", "xi": 0.0}``; Ray's None is UCB).
        random_state: the seed of every random choice.
        random_search_steps: random suggestions before the Gaussian process is used
            (counted in finished trials).
        verbose: accepted for Ray compatibility; ignored (tunefleet reports progress).
        patience: stop the search (FINISHED) once one config was suggested more than
            this many times: the model has converged.
        skip_duplicate: a suggestion equal to an earlier one is not run (`suggest`
            returns None and asks again later); False runs it again.
        analysis: an earlier experiment (`ExperimentAnalysis` or `ResultGrid`) whose
            trials are told to the model when the searcher is set up (`register_analysis`).

    Example:
        >>> import tunefleet as tune
        >>> search = BayesOptSearch(metric="loss", mode="min", random_state=0)
        >>> search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> 0 <= search.suggest("t1")["x"] < 1
        True
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        utility_kwargs: dict[str, Any] | None = None,
        random_state: int = 42,
        random_search_steps: int = 10,
        verbose: int = 0,
        patience: int = 5,
        skip_duplicate: bool = True,
        analysis: Any = None,
        *,
        evaluated_rewards: list[float] | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        # GPSampler needs scipy and torch too, and says so only when sampling
        self._optuna = import_optional(
            "optuna",
            "scipy",
            "torch",
            owner="BayesOptSearch",
            extra="bayesopt",
            needs="optuna, scipy and torch (it runs Optuna's GPSampler)",
        )
        self._acquisition = parse_utility(utility_kwargs, self._optuna)
        self.utility_kwargs = None if utility_kwargs is None else dict(utility_kwargs)
        if space is not None and not isinstance(space, dict):
            raise TypeError(f"space must be a dict, not {type(space).__name__}")
        points = check_points("BayesOptSearch", points_to_evaluate)
        rewards = check_rewards("BayesOptSearch", evaluated_rewards, len(points))
        for name, value, low in (
            ("random_state", random_state, 0),
            ("random_search_steps", random_search_steps, 0),
            ("patience", patience, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}={value!r} must be an int")
            if value < low:
                raise ValueError(f"{name}={value!r} must be >= {low}")
        self._own_space = None if space is None else _bounds_to_domains(space)
        self._points, self._rewards = points, rewards
        self._analysis = analysis
        self._seed, self.random_search_steps = random_state, random_search_steps
        self.patience, self.skip_duplicate = patience, bool(skip_duplicate)
        self._space: dict[str, Any] = {}
        self._constants: dict[str, Any] = {}  # the Tuner's param_space under an own space
        self._dists: dict[str, BaseDistribution] = {}  # parameter name -> distribution
        self._paths: dict[str, tuple[Any, ...]] = {}  # parameter name -> key path
        self._constraints: list[str] = []
        self._study: optuna.Study | None = None
        self._live: dict[str, optuna.Trial] = {}  # trial_id -> its Optuna trial
        self._queue: list[dict[str, Any]] = []  # parameters of points still to run
        self._repeats: dict[str, int] = {}  # config key -> times suggested (patience)
        self._asks = StateLog()  # the key of each suggestion (`_repeats` counts them)
        self._tracker: TrialTracker  # the trials as saved state, finished ones logged once
        self._calls = 0  # suggestions asked of the GP sampler (each one's seed)

    # ------------------------------------------------------------------ setup

    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Take the metric, mode and search space (or check `param_space` holds only
        constants when the searcher was given its own `space`)."""
        self._fill_objective(metric, mode, strict=True)
        require_metric("BayesOptSearch", self.metric, self.mode)
        self._constraints = list(spec.get("constraints") or [])
        if self._constraints and not hasattr(self._optuna.Trial, "set_constraint"):
            raise ValueError(
                "BayesOptSearch with TuneConfig.constraints needs optuna>=5.0 (constraint "
                f"values told to GPSampler); optuna {self._optuna.__version__} is installed"
            )
        check_constraints(self._acquisition, self._constraints)
        space, self._constants = split_space("BayesOptSearch", self._own_space, config)
        validate_space(space)
        self._dists, self._paths = {}, {}
        _translate(space, (), (), self._dists, self._paths)
        if not self._dists:
            raise ValueError(
                "BayesOptSearch: the search space has no parameter to search (only "
                "constants and sample_from); use the default BasicVariantGenerator"
            )
        self._space = space
        self._reset()
        self._queue = []
        for i, point in enumerate(self._points):
            params = self._point_params(point, f"points_to_evaluate[{i}]")
            if self._rewards is None:
                self._queue.append(params)
            else:
                self._add_finished(params, "COMPLETE", self._rewards[i], None)
        self._took(self._space)
        if self._analysis is not None:
            self.add_evaluated_trials(self._analysis, str(self.metric))

    def register_analysis(self, analysis: Any) -> None:
        """Tell the model the trials of an earlier experiment (an `ExperimentAnalysis`
        or `ResultGrid`) that reported this searcher's metric (Ray's method)."""
        self._ready()
        self.add_evaluated_trials(analysis, str(self.metric))

    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: float,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None:
        """Tell the model about a config evaluated elsewhere (Ray's names); a failed
        one is recorded as failed. A pruned one counts with its value, as in bayes_opt."""
        if self._study is None:  # (during setup, `analysis=` is told with the study made)
            self._ready()
        params = self._point_params(parameters, "parameters")
        if error:
            self._add_finished(params, "FAIL", None, None)
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"BayesOptSearch: value={value!r} must be a number")
        if not math.isfinite(value):
            return  # filtered out, as the searcher does with results
        constraints = dict.fromkeys(self._constraints, 0.0)  # counted as feasible
        self._add_finished(params, "COMPLETE", float(value), constraints)

    @staticmethod
    def convert_search_space(spec: dict[str, Any], join: bool = False) -> dict[str, Any]:
        """A tunefleet search space as bayes_opt bounds (Ray's method): ``{"a/b":
        (lower, upper)}`` for every uniform float; `join` keeps the other keys of
        `spec` too (flattened). Other domains are refused, as in Ray: give such a
        space as the Tuner's param_space, which BayesOptSearch searches as it is."""
        return _to_bounds(spec, join)

    def _reset(self) -> None:
        direction = "minimize" if self.mode == "min" else "maximize"
        storage = self._optuna.storages.InMemoryStorage()
        with quiet_optuna():
            self._study = self._optuna.create_study(storage=storage, direction=direction)
        study_id = storage.get_study_id_from_name(self._study.study_name)
        self._tracker = TrialTracker(storage, study_id, _data, "BayesOptSearch")
        self._live, self._repeats, self._calls, self._asks = {}, {}, 0, StateLog()

    # ------------------------------------------------------------------ events

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next config: the next of `points_to_evaluate`, then the GP's.

        A config suggested before is replaced by a random one (`skip_duplicate`; None
        if 10 random draws are all seen); FINISHED once one config has been suggested
        more than `patience` times (the model has converged).
        """
        self._ready()
        study = self._study
        assert study is not None
        point = bool(self._queue)
        if point:
            study.enqueue_trial(self._queue.pop(0))
        for attempt in range(1 + _RANDOM_TRIES):
            study.sampler = self._sampler(gp=attempt == 0 and not point)
            trial = study.ask()
            config = self._config(trial)
            key = _key(trial.params)
            self._repeats[key] = count = self._repeats.get(key, 0) + 1
            self._asks.append(key)
            if count > self.patience:
                study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
                return FINISHED
            if count == 1 or not self.skip_duplicate:
                self._live[trial_id] = trial
                return config
            study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        return None

    def on_trial_stopped_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Left out of the GP (told as pruned): a value before the full budget."""
        trial = self._live.pop(trial_id, None)
        if trial is not None and self._study is not None:
            tell_pruned(self._study, trial.number)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell the model the trial's value (and constraint values); a failed trial, or
        one with no metric or a missing constraint value, is told as failed."""
        trial = self._live.pop(trial_id, None)
        if trial is None or self._study is None:
            return
        value = None if error or result is None else metric_value(result, str(self.metric))
        constraints = [metric_value(result or {}, name) for name in self._constraints]
        ok = value is not None and math.isfinite(value)
        if not ok or any(c is None or not math.isfinite(c) for c in constraints):
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
            return
        for name, c in zip(self._constraints, constraints, strict=True):
            trial.set_constraint(name, float(c or 0.0))
        self._study.tell(trial, value)

    # ------------------------------------------------------------------ state

    def get_state(self) -> dict[str, Any]:
        """The observations (parameters, state, value, constraint values) of the
        running trials, and of the finished ones in a StateLog (each saved once), the
        suggestions' keys in another, the seed and the counters, as JSON-able data."""
        self._ready()
        self._tracker.track()
        live = {trial_id: trial.number for trial_id, trial in self._live.items()}
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "calls": self._calls,
            "points_left": len(self._queue),
            "asks": self._asks,
            "live": live,
            "done": self._tracker.finished,
            "trials": self._tracker.unfinished(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Replay the observations into a new study; the next suggestions are the
        ones the saved searcher would have made."""
        if state.get("version") != 1:  # the previous format loads too
            check_state_version("BayesOptSearch", state, _STATE_VERSION)
        self._ready()
        self._reset()
        if state.get("version") == 1:  # every trial in "trials"; "repeats" counted
            old = [{"number": i, **saved} for i, saved in enumerate(state["trials"])]
            repeats = {str(k): int(v) for k, v in state["repeats"].items()}
            asks: Any = [key for key, count in repeats.items() for _ in range(count)]
            done = [saved for saved in old if saved["state"] != "RUNNING"]
            trials = self._tracker.restored(done, [t for t in old if t["state"] == "RUNNING"])
        else:
            asks = state["asks"]
            if not isinstance(asks, list) or not all(isinstance(k, str) for k in asks):
                raise ValueError("BayesOptSearch state: asks must be a list of config keys")
            trials = self._tracker.restored(state["done"], state["trials"])
        live = {int(number): str(trial_id) for trial_id, number in state["live"].items()}
        for saved in trials:  # in number order: the same numbers
            number = saved["number"]
            if saved["state"] == "RUNNING":
                trial = self._ask_fixed(saved["params"])
                if number in live:
                    self._live[live[number]] = trial
            else:
                self._add_finished(
                    saved["params"], saved["state"], saved["value"], saved["constraints"]
                )
        self._seed, self._calls = int(state["seed"]), int(state["calls"])
        left = int(state["points_left"])
        self._queue = self._queue[len(self._queue) - left :] if left else []
        self._asks = asks if isinstance(asks, StateLog) else StateLog(asks)
        self._repeats = dict(collections.Counter(self._asks))

    # ------------------------------------------------------------------ Optuna

    def _sampler(self, gp: bool = True) -> Any:
        """A fresh sampler seeded from (random_state, call number): the GP, or random."""
        import numpy as np

        seed = int(np.random.SeedSequence([self._seed, self._calls]).generate_state(1)[0])
        self._calls += 1
        samplers = self._optuna.samplers
        if not gp:
            return samplers.RandomSampler(seed=seed)
        return gp_sampler(
            self._acquisition,
            seed=seed,
            independent_sampler=samplers.RandomSampler(seed=seed),
            n_startup_trials=self.random_search_steps,
            warn_independent_sampling=False,
        )

    def _ask_fixed(self, params: dict[str, Any]) -> optuna.Trial:
        """A running trial with these parameters (replayed, or a point to evaluate)."""
        assert self._study is not None
        self._study.enqueue_trial(params)
        self._study.sampler = self._optuna.samplers.RandomSampler(seed=0)  # nothing to draw
        trial = self._study.ask()
        self._config(trial)  # records the parameters in the trial
        return trial

    def _add_finished(
        self,
        params: dict[str, Any],
        state: str,
        value: float | None,
        constraints: dict[str, float] | None,
    ) -> None:
        assert self._study is not None
        extra = {"constraints": constraints} if constraints else {}  # optuna>=5.0 only
        trial = self._optuna.trial.create_trial(
            state=self._optuna.trial.TrialState[state],
            value=None if state != "COMPLETE" else value,
            params=params,
            distributions={name: self._dists[name] for name in params},
            **extra,
        )
        self._study.add_trial(trial)

    def _config(self, trial: optuna.Trial) -> dict[str, Any]:
        def chooser(name: str, domain: Domain) -> Any:
            return index_value(domain, suggest_index(trial, name, self._dists[name]))

        rng = random.Random(f"{self._seed}:{trial.number}")  # for sample_from functions
        config = resolve(self._space, rng, chooser=chooser)
        return {**self._constants, **config} if self._constants else config

    def _point_params(self, point: dict[str, Any], where: str) -> dict[str, Any]:
        """The Optuna parameters of a config of `points_to_evaluate`."""
        rng = random.Random(f"{self._seed}:{where}")  # for values the point leaves out

        def encode(name: str, domain: Domain, value: Any) -> tuple[Any, Any] | None:
            internal = number_index(domain, self._dists[name], value)
            if internal is None or index_value(domain, internal) != value:
                return None
            return internal, value

        return point_params(self._space, point, self._paths, rng, where, encode)


# ---------------------------------------------------------------------- translation


def _translate(
    node: Any,
    path: tuple[Any, ...],
    name: tuple[Any, ...],
    dists: dict[str, Any],
    paths: dict[str, tuple[Any, ...]],
) -> None:
    """Fill `dists` with the Optuna distribution (index form) of every domain under
    `node`, by the names `resolve`'s chooser uses (each branch of a choice has its own)."""
    if isinstance(node, Function):
        return  # computed from the config by resolve
    if isinstance(node, Normal):
        raise ValueError(
            f"BayesOptSearch: {format_path(path)} is {node!r}, which has no bounds: a "
            "Gaussian process needs bounded parameters; use tune.uniform(...) or "
            "HyperOptSearch, which handles randn"
        )
    if isinstance(node, Domain):
        label = parameter_name(name)
        claim_name("BayesOptSearch", label, path, paths)
        dists[label] = index_distribution(node)
        if isinstance(node, Categorical):
            for i, category in enumerate(node.categories):
                _translate(category, path, (*name, _Category(i)), dists, paths)
        return
    if isinstance(node, dict) and GRID_KEY in node:
        raise grid_refused("BayesOptSearch", format_path(path))
    for key, value in children(node):
        _translate(value, (*path, key), (*name, key), dists, paths)


def _bounds_to_domains(space: Any) -> Any:
    """Ray's bayes_opt form ``{"x": (lower, upper)}``: the bounds become uniform floats."""
    if (
        isinstance(space, tuple)
        and len(space) == 2
        and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in space)
    ):
        return uniform(*space)
    if isinstance(space, dict) and GRID_KEY not in space:
        return {k: _bounds_to_domains(v) for k, v in space.items()}
    return space


def _data(trial: FrozenTrial) -> dict[str, Any]:
    return {
        "params": trial.params,
        "state": trial.state.name,
        "value": trial.value,
        "constraints": getattr(trial, "constraints", None) or None,
    }


def _key(params: dict[str, Any]) -> str:
    """A suggestion's identity for `skip_duplicate` and `patience` (floats to 6 digits)."""
    rounded = {k: float(f"{v:.6g}") if isinstance(v, float) else v for k, v in params.items()}
    return json.dumps(rounded, sort_keys=True)


def _to_bounds(spec: dict[str, Any], join: bool) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise TypeError(f"BayesOptSearch.convert_search_space: spec must be a dict, not {spec!r}")
    validate_space(spec)
    axes = grid_axes(spec)
    if axes:
        raise grid_refused("BayesOptSearch", format_path(axes[0][0]))
    bounds: dict[str, Any] = {}
    for key, value in flatten(spec).items():
        where = f"BayesOptSearch.convert_search_space: {key}"
        if isinstance(value, Float) and not value.log and value.q is None:
            bounds[key] = (value.lower, value.upper)
        elif isinstance(value, Domain):
            raise ValueError(
                f"{where} is {value!r}: bayes_opt bounds hold uniform floats only; give "
                "this space as the Tuner's param_space (BayesOptSearch models ints, log "
                "scales and choices there)"
            )
        elif join:
            bounds[key] = value
    return bounds
