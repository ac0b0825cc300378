"""BOHB's model (Falkner et al. 2018) on Optuna's multivariate TPE: `TuneBOHB`.

BOHB keeps the observations of every budget (the HyperBand milestone a result was
reported at) and fits a multivariate density model, TPE style, on the largest
budget that has enough of them: the best `top_n_percent` form the "good" density
l(x), the rest the "bad" one g(x), and the next config maximises l/g over
candidates drawn from l. A `random_fraction` of the configs is drawn at random.

The density model is Optuna's `TPESampler(multivariate=True, group=True)`: for
each suggestion a fresh in-memory study gets the observations of the chosen budget
(`add_trial`) and is asked once. Trials still running are not given to it (as in
BOHB): the suggestions of a batch differ by their random candidates, and an exact
duplicate of a config already suggested is replaced by a random one. The state is
the observations, the seed and the counters: a restored searcher rebuilds the same
studies and suggests the same configs. Each suggestion, observation and trial end is
a row of a StateLog, written once: the head is the seed and the counters, however
many trials ran or wait paused.
"""

from __future__ import annotations

import functools
import math
import random
import warnings
from collections.abc import Callable
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value
from tunefleet._redact import get_logger
from tunefleet._state_log import StateLog
from tunefleet.search._base import SpaceSearcher
from tunefleet.search._shared import (
    category_index,
    check_points,
    check_state_version,
    effective_space,
    import_optional,
    index_distribution,
    index_value,
    number_index,
    parameters,
    point_spaces,
    quiet_optuna,
    require_metric,
    suggest_index,
)
from tunefleet.space import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    resolve,
)

logger = get_logger(__name__)

# 3: the suggestions and the events (observations, ends) in StateLogs, the head counters
# (2: finished trials in a StateLog, the running ones in the head; 1: all in the head)
_STATE_VERSION = 3
_DEFAULTS: dict[str, Any] = {
    "min_points_in_model": None,
    "top_n_percent": 15,
    "num_samples": 64,
    "random_fraction": 1 / 3,
    "bandwidth_factor": 3,
    "min_bandwidth": 1e-3,
}


class TuneBOHB(SpaceSearcher):
    """BOHB's model-based search; use it with `tunefleet.schedulers.HyperBandForBOHB`.

    Args:
        space: the search space, if not given as the Tuner's ``param_space``.
        bohb_config: BOHB's settings (hpbandster's names, as in Ray):
            ``min_points_in_model`` (None: number of parameters + 1; the least size
            of the good set, TPE's ``n_startup_trials``), ``top_n_percent`` (15: the
            good set's share, TPE's ``gamma``), ``num_samples`` (64 candidates per
            suggestion, TPE's ``n_ei_candidates``), ``random_fraction`` (1/3 of the
            configs drawn at random). ``bandwidth_factor`` and ``min_bandwidth``
            are accepted at their defaults only: Optuna's TPE sets its own bandwidths.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first (each may set only some keys).
        seed: an int; None draws one (kept in the state).
        max_concurrent: at most this many unfinished trials; 0 means no limit.

    Example:
        >>> from tunefleet import space as tune
        >>> bohb = TuneBOHB(metric="loss", mode="min", seed=0)
        >>> bohb.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> 0 <= bohb.suggest("t0")["x"] < 1
        True
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        bohb_config: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        seed: int | None = None,
        max_concurrent: int = 0,
    ) -> None:
        optuna = import_optional("optuna", owner="TuneBOHB", extra="optuna", needs="Optuna")
        super().__init__(metric=metric, mode=mode)
        self._optuna = optuna
        self.bohb_config = _check_config(bohb_config)
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise TypeError(f"TuneBOHB: max_concurrent={max_concurrent!r} must be an int")
        if max_concurrent < 0:
            raise ValueError(f"TuneBOHB: max_concurrent={max_concurrent!r} must be >= 0")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"TuneBOHB: seed={seed!r} must be an int or None")
        self.max_concurrent = max_concurrent
        self._seed = random.Random().getrandbits(63) if seed is None else seed
        self._own_space = space
        self._points = check_points("TuneBOHB", points_to_evaluate)
        self._space: dict[str, Any] | None = None
        self._point_spaces: list[dict[str, Any]] = []
        self._params: dict[str, _Param] = {}
        self._min_points = 1
        # trial id -> {"params": {name: Optuna value}, "obs": {budget: loss}, "live": bool,
        # "seq": its suggestion's number}, in the order of the suggestions
        self._trials: dict[str, dict[str, Any]] = {}
        self._live: dict[str, dict[str, Any]] = {}  # the running ones of _trials
        self._taken: dict[str, int] = {}  # _key(params) -> how many of _trials have them
        self._budgets: dict[float, int] = {}  # budget -> how many of _trials observed it
        self._suggested = StateLog()  # [seq, trial id, params] of each suggestion
        self._events = StateLog()  # [seq, budget, loss] (an observation) or [seq] (its end)
        self._count = 0  # suggestions made: each has its own generator
        self._points_done = 0
        self._warned_budget = False

    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Receive the metric, mode and search space; refuse what TPE cannot model."""
        self._fill_objective(metric, mode, strict=True)
        require_metric("TuneBOHB", self.metric, self.mode)
        if spec.get("constraints"):
            logger.warning(
                "TuneBOHB does not model constraints: it suggests configs as if %s "
                "were not constrained (the results still record them)",
                spec["constraints"],
            )
        space = effective_space("TuneBOHB", self._own_space, config)
        self._params = {name: _Param(d, where) for name, d, where in parameters("TuneBOHB", space)}
        self._space = space
        given = self.bohb_config["min_points_in_model"]
        self._min_points = len(self._params) + 1 if given is None else given
        self._point_spaces = point_spaces(space, self._points)
        self._took(space)

    @staticmethod
    def convert_search_space(spec: dict[str, Any]) -> dict[str, Any]:
        """The space as TuneBOHB models it (Ray's method returns a ConfigSpace; tunefleet's
        TuneBOHB runs Optuna's TPE): Optuna distributions by parameter name, a choice
        as the index of its category and a quantized value as the index of its multiple."""
        import_optional("optuna", owner="TuneBOHB", extra="optuna", needs="Optuna")
        if not isinstance(spec, dict):
            raise TypeError(f"TuneBOHB.convert_search_space: spec must be a dict, not {spec!r}")
        space = effective_space("TuneBOHB", None, spec)
        return {name: _Param(d, where).dist for name, d, where in parameters("TuneBOHB", space)}

    # -- suggestions ----------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """A point of `points_to_evaluate`, a random config, or the model's."""
        self._ready()
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        seq = self._count
        rng = random.Random(f"{self._seed}:{seq}")
        self._count += 1
        if self._points_done < len(self._point_spaces):
            index = self._points_done
            self._points_done += 1
            config = resolve(self._point_spaces[index], rng)
            params = self._params_of(config, f"points_to_evaluate[{index}]")
        else:
            config, params = self._sample(rng)
        self._add(trial_id, {"params": params, "obs": {}, "live": True, "seq": seq})
        self._suggested.append([seq, trial_id, params])
        return config

    def _add(self, trial_id: str, record: dict[str, Any]) -> None:
        self._trials[trial_id] = record
        if record["live"]:
            self._live[trial_id] = record
        key = _key(record["params"])
        self._taken[key] = self._taken.get(key, 0) + 1
        for budget in record["obs"]:
            self._budgets[budget] = self._budgets.get(budget, 0) + 1

    def _sample(self, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
        budget = self._model_budget()
        use_model = budget is not None and rng.random() >= self.bohb_config["random_fraction"]
        taken = self._taken
        for _ in range(20):  # a duplicate (possible in small discrete spaces) is redrawn
            if use_model:
                assert budget is not None
                config, params = self._from_model(budget, rng.getrandbits(32))
                use_model = False  # a duplicate is redrawn at random
            else:
                config, params = self._from_prior(rng)
            if _key(params) not in taken:
                break
        return config, params

    def _from_prior(self, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
        assert self._space is not None
        params: dict[str, Any] = {}

        def choose(name: str, domain: Domain) -> Any:
            value = domain.sample(rng)
            params[name] = self._params[name].to_param(value)
            return value

        return resolve(self._space, rng, chooser=choose), params

    def _from_model(self, budget: float, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
        assert self._space is not None
        study = self._study(budget, seed)
        trial = study.ask()
        params: dict[str, Any] = {}

        def choose(name: str, domain: Domain) -> Any:
            params[name] = suggest_index(trial, name, self._params[name].dist)
            return index_value(domain, params[name])

        return resolve(self._space, random.Random(seed), chooser=choose), params

    def _study(self, budget: float, seed: int) -> Any:
        """A fresh study holding the observations at `budget`."""
        optuna = self._optuna
        cfg = self.bohb_config
        with quiet_optuna(), warnings.catch_warnings():
            # `gamma` (and `warn_independent_sampling`) are deprecated since Optuna 4.9 and
            # `group` is experimental (quiet_optuna): BOHB's good-set size and conditional
            # spaces need them
            warnings.simplefilter("ignore", FutureWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed,
                multivariate=True,
                group=True,
                constant_liar=False,
                warn_independent_sampling=False,  # a branch never observed yet is normal
                n_startup_trials=self._min_points,
                n_ei_candidates=cfg["num_samples"],
                gamma=functools.partial(_n_good, self._min_points, cfg["top_n_percent"]),
            )
            study = optuna.create_study(sampler=sampler, direction="minimize")
        for record in self._trials.values():
            loss = record["obs"].get(budget)
            if loss is None:
                continue
            dists = {n: self._params[n].dist for n in record["params"] if n in self._params}
            params = {n: v for n, v in record["params"].items() if n in dists}
            study.add_trial(
                optuna.trial.create_trial(value=loss, params=params, distributions=dists)
            )
        return study

    def _model_budget(self) -> float | None:
        """The largest budget whose good and bad sets both hold more points than there
        are parameters (hpbandster's rule; Ray's BOHB): None while no budget has."""
        counts = self._budgets
        d = len(self._params)
        enough = [b for b, n in counts.items() if min(self._n_good(n), n - self._n_good(n)) > d]
        return max(enough) if enough else None

    def _n_good(self, n: int) -> int:
        return _n_good(self._min_points, self.bohb_config["top_n_percent"], n)

    def _params_of(self, config: dict[str, Any], where: str) -> dict[str, Any]:
        """The Optuna values of a resolved config (for a point of points_to_evaluate)."""
        assert self._space is not None
        params: dict[str, Any] = {}

        def walk(node: Any, value: Any, name: tuple[str, ...]) -> None:
            if isinstance(node, Function):
                return
            if isinstance(node, Domain):
                param = self._params["/".join(name)]
                params["/".join(name)] = param.to_param(value, where)
                if isinstance(node, Categorical):
                    index = params["/".join(name)]
                    walk(node.categories[index], value, (*name, f"[{index}]"))
            elif isinstance(node, dict) and isinstance(value, dict):
                for key, sub in node.items():
                    if key in value:
                        walk(sub, value[key], (*name, str(key)))
            elif isinstance(node, (list, tuple)) and isinstance(value, (list, tuple)):
                for i, (sub, item) in enumerate(zip(node, value, strict=False)):
                    walk(sub, item, (*name, str(i)))

        walk(self._space, config, ())
        return params

    # -- events ---------------------------------------------------------------------------
    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Record the result as the trial's observation at its budget."""
        self._observe(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """The trial is no longer pending; its observations stay (failed ones too)."""
        record = self._trials.get(trial_id)
        if record is None or not record["live"]:  # not its trial, or told already
            return
        if result is not None and not error:
            self._observe(trial_id, result)
        record["live"] = False
        del self._live[trial_id]
        self._events.append([record["seq"]])
        if not record["obs"]:
            del self._trials[trial_id]  # nothing learnt from it
            key = _key(record["params"])
            self._taken[key] -= 1
            if not self._taken[key]:
                del self._taken[key]

    def _observe(self, trial_id: str, result: dict[str, Any]) -> None:
        record = self._live.get(trial_id)  # a finished trial's observations are saved
        if record is None or self.metric is None:
            return
        value = metric_value(result, self.metric)
        if value is None or not math.isfinite(value):
            return
        info = result.get("hyperband_info")
        budget = info.get("budget") if isinstance(info, dict) else None
        if budget is None:
            if not self._warned_budget:
                self._warned_budget = True
                logger.warning(
                    "TuneBOHB: a result has no hyperband_info (is the scheduler "
                    "HyperBandForBOHB?); its training_iteration is used as its budget"
                )
            budget = result.get("training_iteration", 0)
        if isinstance(budget, bool) or not isinstance(budget, (int, float)):
            return
        budget = float(budget)
        if budget not in record["obs"]:
            self._budgets[budget] = self._budgets.get(budget, 0) + 1
        loss = value if self.mode == "min" else -value
        record["obs"][budget] = loss
        self._events.append([record["seq"], budget, loss])

    # -- state ----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Seed, counters, and in StateLogs (each row saved once) the suggestions
        (Optuna values) and the events: each observation (budget, loss) and each end."""
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "count": self._count,
            "points_done": self._points_done,
            "suggested": self._suggested,
            "events": self._events,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned: the next suggestions are the same."""
        if state.get("version") in (1, 2):
            suggested, events = _old_rows(state)
        else:
            check_state_version("TuneBOHB", state, _STATE_VERSION)
            suggested, events = state["suggested"], state["events"]
        _check_rows(suggested, events)
        self._seed = int(state["seed"])
        self._count = int(state["count"])
        self._points_done = int(state["points_done"])
        records = {
            seq: (str(tid), {"params": dict(params), "obs": {}, "live": True, "seq": seq})
            for seq, tid, params in suggested
        }
        for seq, *observed in events:  # replayed as they happened
            record = records[seq][1]
            if not record["live"]:
                continue
            if observed:
                record["obs"][float(observed[0])] = float(observed[1])
            else:
                record["live"] = False
        self._trials, self._live, self._taken, self._budgets = {}, {}, {}, {}
        for tid, record in records.values():  # in the order of the suggestions
            if record["live"] or record["obs"]:  # else it ended with nothing learnt
                self._add(tid, record)
        # the store's StateLogs themselves, to go on appending to (new ones from an old state)
        self._suggested = suggested if isinstance(suggested, StateLog) else StateLog(suggested)
        self._events = events if isinstance(events, StateLog) else StateLog(events)


def _old_rows(state: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The suggestions and events of a state of version 1 or 2."""
    if state["version"] == 1:  # [tid, params, obs, live] in the order of the suggestions
        rows = state.get("trials")
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 4 for r in rows):
            raise ValueError(
                "TuneBOHB state: trials must be a list of [trial_id, params, obs, live]"
            )
        old = [[i, *row] for i, row in enumerate(rows)]
        state = {"done": [r[:4] for r in old if not r[4]], "trials": [r[:4] for r in old if r[4]]}
    done: Any = state.get("done")  # the finished trials
    running: Any = state.get("trials")  # the running ones
    for key, rows in (("done", done), ("trials", running)):
        if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == 4 and _is_int(r[0]) for r in rows
        ):
            raise ValueError(
                f"TuneBOHB state: {key} must be a list of [seq, trial_id, params, obs]"
            )
    suggested, events = StateLog(), StateLog()
    for seq, tid, params, obs in sorted([*done, *running], key=lambda row: int(row[0])):
        suggested.append([seq, tid, params])
        events.extend([seq, budget, loss] for budget, loss in obs)
    events.extend([seq] for seq, *_ in done)
    return suggested, events


def _check_rows(suggested: Any, events: Any) -> None:
    """Refuse a state whose rows are not what `get_state` writes."""
    if not isinstance(suggested, list) or not all(
        isinstance(r, list) and len(r) == 3 and _is_int(r[0]) for r in suggested
    ):
        raise ValueError("TuneBOHB state: suggested must be a list of [seq, trial_id, params]")
    seqs = {r[0] for r in suggested}
    if not isinstance(events, list) or not all(
        isinstance(r, list) and len(r) in (1, 3) and _is_int(r[0]) and r[0] in seqs for r in events
    ):
        raise ValueError(
            "TuneBOHB state: events must be a list of [seq, budget, loss] or [seq], "
            "each seq one of suggested"
        )


def _n_good(min_points: int, top_n_percent: float, n: int) -> int:
    """BOHB's size of the good set (TPE's gamma): max(N_min, top_n_percent of n)."""
    return max(min_points, int(top_n_percent * n // 100))


def _key(params: dict[str, Any]) -> str:
    return repr(sorted(params.items()))


def _check_config(given: dict[str, Any] | None) -> dict[str, Any]:
    config = dict(_DEFAULTS)
    given = {} if given is None else given
    if isinstance(given, str):
        raise TypeError(
            f"TuneBOHB: bohb_config={given!r} must be a dict: TuneBOHB's second argument is "
            "bohb_config (Ray's order: space, bohb_config, metric, mode); pass metric= "
            "and mode= by keyword"
        )
    if not isinstance(given, dict):
        raise TypeError(f"TuneBOHB: bohb_config must be a dict, not {type(given).__name__}")
    unknown = sorted(set(given) - set(_DEFAULTS))
    if unknown:
        raise ValueError(
            f"TuneBOHB: bohb_config keys {unknown} are not known; the keys are {list(_DEFAULTS)}"
        )
    config.update(given)
    for key in ("bandwidth_factor", "min_bandwidth"):
        if config[key] != _DEFAULTS[key]:
            raise ValueError(
                f"TuneBOHB: bohb_config {key}={config[key]!r} is not supported: Optuna's TPE "
                f"sets its bandwidths itself (leave it at {_DEFAULTS[key]!r})"
            )
    checks: list[tuple[str, Callable[[Any], bool], str]] = [
        ("min_points_in_model", lambda v: v is None or (_is_int(v) and v >= 1), "an int >= 1"),
        ("top_n_percent", lambda v: _is_number(v) and 0 < v < 100, "a number in (0, 100)"),
        ("num_samples", lambda v: _is_int(v) and v >= 1, "an int >= 1"),
        ("random_fraction", lambda v: _is_number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    ]
    for key, ok, rule in checks:
        if not ok(config[key]):
            raise ValueError(f"TuneBOHB: bohb_config {key}={config[key]!r} must be {rule}")
    return config


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _Param:
    """One parameter: its Optuna distribution in index form (`index_distribution`), and
    a value's parameter (for the points of `points_to_evaluate`)."""

    def __init__(self, domain: Domain, where: str) -> None:
        if not isinstance(domain, (Categorical, Float, Integer)):
            raise ValueError(
                f"TuneBOHB: {where} is a {domain.name} (unbounded): TuneBOHB handles "
                "bounded ranges and choices only; use tune.uniform/loguniform/choice"
            )
        self.domain: Categorical | Float | Integer = domain
        self.where = where
        self.dist: Any = index_distribution(domain)

    def to_param(self, value: Any, where: str = "") -> Any:
        """The Optuna value of one of the domain's values (`where`: for the message)."""
        domain = self.domain
        if isinstance(domain, Categorical):
            param = category_index(domain.categories, value)
        else:
            param = number_index(domain, self.dist, value)
        if param is None:
            raise ValueError(
                f"TuneBOHB: {where + ' sets ' if where else ''}{self.where}={value!r}, "
                f"which {domain!r} cannot produce"
            )
        return param
