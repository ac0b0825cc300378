"""HyperOpt's Tree-structured Parzen Estimator as a searcher (Ray Tune's `HyperOptSearch`).

The searcher drives HyperOpt the way `fmin` does inside, one trial at a time: a
`Trials` object holds every suggestion, `tpe.suggest(new_ids, domain, trials,
seed)` asks for the next one, and trials still running stay in `Trials` with no
loss, which TPE counts as bad, so a batch asked before any result spreads out.

A tunefleet space is translated to a flat dict of HyperOpt labels (the names
`resolve`'s chooser uses, so each branch of a conditional choice has its own).
Configs are built by `resolve(space, rng, chooser=...)` fed with the values TPE
picked: ints come back as ints, quantized values as exact multiples of q,
categories as the very category objects, and sample_from functions run on the
finished config as with random search.

State is the observations as JSON (each trial's HyperOpt values, state and
loss), the seed and the counters; `set_state` rebuilds `Trials` by replay. The
seed of each TPE call is derived from (seed, call number), so a restored
searcher makes the same next suggestions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from functools import partial
from typing import Any

from tunefleet._metrics import (
    MISSING,
    MetricSpec,
    ModeSpec,
    metric_value,
    python_scalar,
    python_scalars,
)
from tunefleet._state_log import StateLog
from tunefleet.search._base import SpaceSearcher
from tunefleet.search._hyperopt_space import _exact, _native, _translate
from tunefleet.search._shared import (
    check_points,
    check_rewards,
    check_state_version,
    children,
    import_optional,
    point_params,
    require_metric,
    split_space,
)
from tunefleet.space import (
    GRID_KEY,
    Categorical,
    Domain,
    resolve,
    validate_space,
)

_STATE_VERSION = 2  # 2: finished trials in a StateLog, the head the running; 1 loads
_TPE_TRIES, _RANDOM_TRIES = 10, 20  # draws to avoid a duplicate before accepting one
_RUNNING, _DONE, _ERROR = 1, 2, 3  # hyperopt.base.JOB_STATE_*


class HyperOptSearch(SpaceSearcher):
    """Tree-structured Parzen Estimator search with HyperOpt (Ray Tune's `HyperOptSearch`).

    Args:
        space: a search space for this searcher alone, either tunefleet domains or a
            native HyperOpt space (``{"x": hp.uniform("x", 0, 1)}``); the Tuner's
            `param_space` then holds only constants. None: use `param_space`.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first (nested dicts or "a/b" keys; values
            left out are drawn at random). For a native space: ``{label: value}``.
        evaluated_rewards: the metric values of `points_to_evaluate`, already known:
            those points are told to TPE and not run again.
        n_initial_points: random suggestions before TPE models the results.
        random_state_seed: seed of every random choice (None: a fresh one).
        gamma: the fraction of trials TPE counts as good.

    Example:
        >>> import tunefleet as tune
        >>> search = HyperOptSearch(metric="loss", mode="min", random_state_seed=0)
        >>> search.set_search_properties(None, None, {"lr": tune.loguniform(1e-4, 1e-1)})
        True
        >>> 1e-4 <= search.suggest("t1")["lr"] < 1e-1
        True
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        n_initial_points: int = 20,
        random_state_seed: int | None = None,
        gamma: float = 0.25,
        *,
        evaluated_rewards: list[float] | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self._hp = import_optional(
            "hyperopt", owner="HyperOptSearch", extra="hyperopt", needs="the hyperopt package"
        )
        if space is not None and not isinstance(space, dict):
            raise TypeError(f"space must be a dict, not {type(space).__name__}")
        points = check_points("HyperOptSearch", points_to_evaluate)
        rewards = check_rewards("HyperOptSearch", evaluated_rewards, len(points))
        if isinstance(n_initial_points, bool) or not isinstance(n_initial_points, int):
            raise TypeError(f"n_initial_points={n_initial_points!r} must be an int")
        if n_initial_points < 0:
            raise ValueError(f"n_initial_points={n_initial_points!r} must be >= 0")
        if not 0 < gamma < 1:
            raise ValueError(f"gamma={gamma!r} must be between 0 and 1")
        if random_state_seed is not None and (
            isinstance(random_state_seed, bool) or not isinstance(random_state_seed, int)
        ):
            raise TypeError(f"random_state_seed={random_state_seed!r} must be an int or None")
        self._own_space = space
        self._points, self._rewards = points, rewards
        self._algo = partial(
            self._hp.tpe.suggest, n_startup_jobs=n_initial_points, gamma=gamma, verbose=False
        )
        seed = random.Random().getrandbits(32) if random_state_seed is None else random_state_seed
        self._seed = seed % 2**32
        self._space: dict[str, Any] | None = None  # the tunefleet space; None: native
        self._params: dict[str, Domain] = {}  # label -> domain (tunefleet spaces)
        self._paths: dict[str, tuple[Any, ...]] = {}  # label -> key path in the config
        self._constants: dict[str, Any] = {}  # the Tuner's param_space under an own space
        self._domain: Any = None
        self._trials: Any = None
        self._live: dict[str, int] = {}  # trial_id -> HyperOpt tid
        self._running: dict[int, dict[str, Any]] = {}  # tid -> its doc in Trials
        self._done = StateLog()  # the finished trials' data (`_data`), each saved once
        self._queue: list[dict[str, list[Any]]] = []  # values of points still to run
        self._calls = 0  # TPE calls so far (each one's seed derives from it)
        self._next_tid = 0
        self._constraints: list[str] = []

    # ------------------------------------------------------------------ setup

    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Take the metric, mode and search space (or check `param_space` holds only
        constants when the searcher was given its own `space`)."""
        self._fill_objective(metric, mode, strict=True)
        require_metric("HyperOptSearch", self.metric, self.mode)
        self._constraints = list(spec.get("constraints") or [])
        space, self._constants = split_space("HyperOptSearch", self._own_space, config)
        if _is_native(space, self._hp.pyll.Apply):
            self._space, expr = None, space
        else:
            validate_space(space)
            self._space = space
            self._params, self._paths = {}, {}
            expr = _translate(self._hp.hp, space, (), (), self._params, self._paths)
        if not expr:
            raise ValueError(
                "HyperOptSearch: the search space has no parameter to search (only "
                "constants and sample_from); use the default BasicVariantGenerator"
            )
        self._domain = self._hp.Domain(lambda s: s, expr)
        self._trials = self._hp.Trials()
        self._live, self._queue, self._calls, self._next_tid = {}, [], 0, 0
        self._running, self._done = {}, StateLog()
        for i, point in enumerate(self._points):
            vals = self._point_vals(point, f"points_to_evaluate[{i}]")
            if self._space is None:
                self._check_native_point(vals, point, f"points_to_evaluate[{i}]")
            if self._rewards is None:
                self._queue.append(vals)
            else:
                self._insert(self._new_tid(), vals, _DONE, self._result(self._rewards[i]))
        self._took(self._space)

    @staticmethod
    def convert_search_space(spec: dict[str, Any]) -> dict[str, Any]:
        """A tunefleet search space as a HyperOpt space (Ray's method): the same nested
        dict with ``hp.*`` expressions for the domains (labelled by key path, "a/b"),
        which `hyperopt.pyll.stochastic.sample` and `HyperOptSearch(space=...)` take."""
        hp = import_optional(
            "hyperopt", owner="HyperOptSearch", extra="hyperopt", needs="the hyperopt package"
        )
        if not isinstance(spec, dict):
            raise TypeError(
                f"HyperOptSearch.convert_search_space: spec must be a dict, not {spec!r}"
            )
        validate_space(spec)
        native: dict[str, Any] = _native(hp, spec, ())
        return native

    # ------------------------------------------------------------------ events

    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: float,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None:
        """Tell TPE a config evaluated elsewhere (Ray's names); pruned counts its value."""
        self._ready()
        vals = self._point_vals(parameters, "parameters")
        if self._space is None:
            self._check_native_point(vals, parameters, "parameters")
        if error:
            self._insert(self._new_tid(), vals, _ERROR, {"status": "fail"})  # not kept
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"HyperOptSearch: value={value!r} must be a number")
        if math.isfinite(value):  # a non-finite value is dropped, as a result's is
            self._insert(self._new_tid(), vals, _DONE, self._result(value))
            self._done.append(_data(self._trials.trials[-1]))
        self._trials.refresh()

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next config: the next of `points_to_evaluate`, then TPE's."""
        self._ready()
        tid = self._new_tid()
        vals = self._queue.pop(0) if self._queue else self._ask(tid)
        self._insert(tid, vals, _RUNNING, {"status": "new"})
        self._live[trial_id] = tid
        return self._config(tid, vals)

    def on_trial_stopped_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Left out of TPE's model, as a failed trial: its loss before the full budget
        is not a final one."""
        self.on_trial_complete(trial_id, None, error=True)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell TPE the trial's loss; a failed trial (or one with no metric) is dropped."""
        tid = self._live.pop(trial_id, None)
        if tid is None:
            return
        doc = self._running.pop(tid, None)
        if doc is None:
            return
        value = None if error or result is None else metric_value(result, str(self.metric))
        if value is None or not math.isfinite(value):
            doc["state"] = _ERROR
        else:
            doc["state"] = _DONE
            infeasible = any(
                (c := metric_value(result or {}, name)) is None or c > 0
                for name in self._constraints
            )
            # an infeasible trial counts as a failure: no loss, which TPE takes as +inf
            doc["result"] = {"status": "fail"} if infeasible else self._result(value)
        self._trials.refresh()
        if doc["state"] == _DONE:  # Trials keeps no failed trial: neither does the state
            self._done.append(_data(doc))

    # ------------------------------------------------------------------ state

    def get_state(self) -> dict[str, Any]:
        """The seed, the counters, the running trials (HyperOpt values, state) and the
        finished ones (and their loss) in a StateLog, each saved once."""
        self._ready()
        trials = [_data(doc) for doc in self._running.values()]
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "calls": self._calls,
            "next_tid": self._next_tid,
            "points_left": len(self._queue),
            "live": dict(self._live),
            "done": self._done,
            "trials": trials,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Rebuild `Trials` from the observations; the next suggestions are the ones
        the saved searcher would have made."""
        if state.get("version") == 1:  # every trial in "trials", in tid order
            done = [d for d in state["trials"] if int(d["state"]) != _RUNNING]
            running = [d for d in state["trials"] if int(d["state"]) == _RUNNING]
        else:
            check_state_version("HyperOptSearch", state, _STATE_VERSION)
            done, running = state["done"], state["trials"]
        for key, docs in (("done", done), ("trials", running)):
            if not isinstance(docs, list) or not all(
                isinstance(d, dict) and isinstance(d.get("tid"), int) for d in docs
            ):
                raise ValueError(f"HyperOptSearch state: {key} must be a list of trials with a tid")
        self._ready()
        self._seed, self._calls = int(state["seed"]), int(state["calls"])
        self._next_tid = int(state["next_tid"])
        left = int(state["points_left"])
        self._queue = self._queue[len(self._queue) - left :] if left else []
        self._live = {str(k): int(v) for k, v in state["live"].items()}
        self._trials, self._running = self._hp.Trials(), {}
        for doc in sorted([*done, *running], key=lambda d: int(d["tid"])):  # inserted so
            self._insert(int(doc["tid"]), doc["vals"], int(doc["state"]), dict(doc["result"]))
        # the store's StateLog itself, to go on appending to
        self._done = done if isinstance(done, StateLog) else StateLog(done)

    # ------------------------------------------------------------------ HyperOpt

    def _new_tid(self) -> int:
        self._next_tid += 1
        return self._next_tid - 1

    def _result(self, value: float) -> dict[str, Any]:
        return {"status": "ok", "loss": float(value) if self.mode == "min" else -float(value)}

    def _ask(self, tid: int) -> dict[str, list[Any]]:
        """TPE's next values; a draw equal to a running or finished trial is redrawn,
        by TPE first, then at random (a small discrete space where TPE insists)."""
        import numpy as np

        seen = {self._key(d["misc"]["vals"]) for d in self._trials.trials}
        for attempt in range(_TPE_TRIES + _RANDOM_TRIES):
            seed = int(np.random.SeedSequence([self._seed, self._calls]).generate_state(1)[0])
            self._calls += 1
            algo = self._algo if attempt < _TPE_TRIES else self._hp.rand.suggest
            [doc] = algo([tid], self._domain, self._trials, seed)
            drawn = doc["misc"]["vals"].items()
            vals = {label: [python_scalar(v) for v in vs] for label, vs in drawn}
            if self._key(vals) not in seen:
                break
        return vals  # a duplicate only when the space is (nearly) used up

    def _insert(
        self, tid: int, vals: dict[str, list[Any]], state: int, result: dict[str, Any]
    ) -> None:
        misc = {
            "tid": tid,
            "cmd": self._domain.cmd,
            "workdir": self._domain.workdir,
            "idxs": {label: [tid] * len(vs) for label, vs in vals.items()},
            "vals": {label: list(vs) for label, vs in vals.items()},
        }
        [doc] = self._trials.new_trial_docs([tid], [None], [result], [misc])
        doc["state"] = state
        self._trials.insert_trial_docs([doc])
        self._trials.refresh()
        if state == _RUNNING:
            self._running[tid] = self._trials.trials[-1]  # Trials keeps a copy

    def _key(self, vals: Mapping[str, list[Any]]) -> tuple[tuple[str, Any], ...]:
        """What makes two suggestions the same config (exact values, category indices)."""
        items = []
        for label, vs in sorted(vals.items()):
            if not vs:
                continue  # a parameter of a branch not chosen
            domain = self._params.get(label)  # None: a native space, its values as they are
            if domain is None or isinstance(domain, Categorical):
                items.append((label, vs[0]))
            else:
                items.append((label, _exact(domain, vs[0])))
        return tuple(items)

    def _config(self, tid: int, vals: dict[str, list[Any]]) -> dict[str, Any]:
        if self._space is None:  # native HyperOpt space: evaluate it as HyperOpt does
            picked = {label: vs[0] for label, vs in vals.items() if vs}
            memo = self._domain.memo_from_config(picked)
            config = self._hp.pyll.rec_eval(self._domain.expr, memo=memo)
            return {**self._constants, **python_scalars(config)}

        def chooser(name: str, domain: Domain) -> Any:
            value = vals[name][0]
            if isinstance(domain, Categorical):
                return domain.categories[int(value)]
            return _exact(domain, value)

        rng = random.Random(f"{self._seed}:{tid}")  # for sample_from functions
        return {**self._constants, **resolve(self._space, rng, chooser=chooser)}

    def _point_vals(self, point: dict[str, Any], where: str) -> dict[str, list[Any]]:
        """HyperOpt's values for a config of `points_to_evaluate`."""
        labels = list(self._domain.params)
        if self._space is None:
            return {
                label: [self._native_value(label, point, where)] if label in point else []
                for label in labels
            }
        rng = random.Random(f"{self._seed}:{where}")  # for values the point leaves out

        def encode(name: str, domain: Domain, value: Any) -> tuple[float, Any] | None:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or _exact(domain, float(value)) != value:
                return None
            return float(value), _exact(domain, float(value))

        params = point_params(self._space, point, self._paths, rng, where, encode)
        return {label: [params[label]] if label in params else [] for label in labels}

    def _check_native_point(self, vals: dict[str, list[Any]], point: Any, where: str) -> None:
        try:
            self._config(-1, vals)
        except Exception as exc:  # HyperOpt fails deep inside pyll on a missing label
            raise ValueError(
                f"{where}={point!r} does not give every label the native HyperOpt space "
                f"needs (its labels: {sorted(self._domain.params)}): {exc!r}"
            ) from None

    def _native_value(self, label: str, point: dict[str, Any], where: str) -> Any:
        """A point's value for a native label: a choice's option is given by value."""
        value = point[label]
        for apply in self._hp.pyll.dfs(self._domain.expr):
            chosen = apply.pos_args[0] if apply.name == "switch" else None
            if chosen is not None and chosen.arg["label"].obj == label:
                options = [getattr(o, "obj", MISSING) for o in apply.pos_args[1:]]
                if value in options:
                    return options.index(value)
                raise ValueError(f"{where}[{label!r}]={value!r} is not one of {options!r}")
        return value


# ---------------------------------------------------------------------- helpers


def _data(doc: dict[str, Any]) -> dict[str, Any]:
    """A HyperOpt trial as saved: its tid, values, state and result."""
    return {
        "tid": doc["tid"],
        "vals": doc["misc"]["vals"],
        "state": doc["state"],
        "result": doc["result"],
    }


def _is_native(space: Any, apply: type) -> bool:
    """True if the space holds HyperOpt expressions (refused when mixed with domains)."""
    found: list[bool] = []

    def walk(node: Any) -> None:
        if isinstance(node, apply):
            found.append(True)
        elif isinstance(node, Domain) or (isinstance(node, dict) and GRID_KEY in node):
            found.append(False)
        else:
            for _, value in children(node):
                walk(value)

    walk(space)
    if any(found) and not all(found):
        raise ValueError(
            "HyperOptSearch: the space mixes HyperOpt expressions (hp.*) with tunefleet "
            "domains; write it with one or the other"
        )
    return any(found)
