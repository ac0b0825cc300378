"""What the searchers share: checks of points_to_evaluate and evaluated_rewards, the
searcher's own space, the parameters of a space, matching a point's value to a
category, importing an optional library with the extra to install (and Optuna's
distributions in the index form that BayesOptSearch and TuneBOHB model).

`owner` is the searcher's class name, for the messages. Nothing here imports an
optional library before it is called, so `import tunefleet.search` stays light.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math
import random
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tunefleet._metrics import MISSING, MetricSpec, ModeSpec
from tunefleet.space import (
    GRID_KEY,
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    SearchSpaceError,
    flatten,
    format_path,
    has_domains,
    resolve,
    validate_space,
)
from tunefleet.space._domains import _float_times

# ---------------------------------------------------------------- arguments and state


def check_points(owner: str, points: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """`points_to_evaluate` checked: a list (or tuple) of dicts, copied; None: none."""
    points = [] if points is None else points
    if not isinstance(points, (list, tuple)):
        raise TypeError(
            f"{owner}: points_to_evaluate must be a list of dicts, not {type(points).__name__}"
        )
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            raise TypeError(
                f"{owner}: points_to_evaluate[{i}]={point!r} must be a dict, "
                f"not {type(point).__name__}"
            )
    return [dict(p) for p in points]


def check_rewards(
    owner: str, rewards: Sequence[Any] | None, count: int, *, numbers: bool = True
) -> list[Any] | None:
    """`evaluated_rewards` checked: one per point of `points_to_evaluate`, each a finite
    number (`numbers=False`: the caller checks the values, e.g. a list per point)."""
    if rewards is None:
        return None
    values = list(rewards)
    if len(values) != count:
        raise ValueError(
            f"{owner}: evaluated_rewards has {len(values)} values for {count} "
            "points_to_evaluate: give one per point"
        )
    for i, reward in enumerate(values if numbers else []):
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError(f"{owner}: evaluated_rewards[{i}]={reward!r} must be a number")
        if not math.isfinite(reward):
            raise ValueError(f"{owner}: evaluated_rewards[{i}]={reward!r} must be finite")
    return values


def require_metric(owner: str, metric: MetricSpec, mode: ModeSpec) -> None:
    """Raise unless both are set (a model-based searcher cannot work without them)."""
    if metric is None or mode is None:
        raise ValueError(
            f"{owner} needs a metric and a mode (got metric={metric!r}, mode={mode!r}): "
            f"pass {owner}(metric=..., mode=...) or TuneConfig(metric=..., mode=...)"
        )


def check_state_version(owner: str, state: dict[str, Any], expected: int) -> None:
    """Raise unless `state` (from `get_state`) has the version this code writes."""
    if state.get("version") != expected:
        raise ValueError(
            f"{owner} state version {state.get('version')!r} is not supported (expected {expected})"
        )


# ---------------------------------------------------------------- the search space


def split_space(
    owner: str, own: dict[str, Any] | None, config: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The space to search and the constants beside it: ``(config, {})``, or with the
    searcher's own `space`, ``(own, config)`` once `config` is found to hold no domain."""
    if not isinstance(config, dict):
        raise TypeError(f"param_space must be a dict, not {type(config).__name__}")
    if own is None:
        return config, {}
    if has_domains(config):
        raise ValueError(
            f"{owner} was given its own space= and param_space has search domains too: "
            "give the search space once (usually as the Tuner's param_space)"
        )
    return own, config


def effective_space(
    owner: str, own: dict[str, Any] | None, config: dict[str, Any]
) -> dict[str, Any]:
    """The searcher's own `space` (with the constants of `config`), else `config`; checked."""
    space, constants = split_space(owner, own, config)
    if own is None:
        validate_space(space)
        return space
    merged = {**constants, **space}
    validate_space(merged, root=f"{owner}(space=...)")
    return merged


def parameters(owner: str, space: dict[str, Any]) -> list[tuple[str, Domain, str]]:
    """Every domain of `space`: the name `resolve` gives it when choosing, the domain,
    and its key path for messages, in order.

    Inside a choice, each category's domains are listed (under ``name/[i]/...``), so
    every branch of a conditional space has its own parameters. sample_from values
    are left to `resolve`; a grid_search is refused (it is not sampled).
    """
    found: list[tuple[str, Domain, str]] = []

    def walk(node: Any, name: tuple[str, ...], where: str) -> None:
        if isinstance(node, Function):
            return
        if isinstance(node, Domain):
            found.append(("/".join(name), node, where))
            if isinstance(node, Categorical):
                for i, category in enumerate(node.categories):
                    walk(category, (*name, f"[{i}]"), f"{where}.categories[{i}]")
        elif isinstance(node, dict) and GRID_KEY in node:
            raise grid_refused(owner, where)
        else:
            for key, value in children(node):
                walk(value, (*name, str(key)), f"{where}[{key!r}]")

    walk(space, (), "param_space")
    return found


def children(node: Any) -> Iterable[tuple[Any, Any]]:
    """The (key, value) pairs inside a dict, list or tuple; none inside anything else."""
    if isinstance(node, dict):
        return node.items()
    if isinstance(node, (list, tuple)):
        return enumerate(node)
    return ()


def grid_refused(owner: str, where: str) -> SearchSpaceError:
    """The error for a grid_search in the space of a searcher that samples (`where`: its path)."""
    return SearchSpaceError(
        f"{owner}: {where} is a grid_search, which {owner} cannot sample; use "
        "tune.choice([...]) instead (or BasicVariantGenerator for grids)"
    )


def claim_name(
    owner: str, name: str, path: tuple[Any, ...], paths: dict[str, tuple[Any, ...]]
) -> None:
    """Record `path` as the key path of parameter `name`, refusing a second domain of the
    same name (a key "a/b" beside a nested a -> b)."""
    if name in paths:
        raise ValueError(
            f"{owner}: {format_path(path)} and {format_path(paths[name])} have the same "
            f"parameter name {name!r}; rename one of the keys"
        )
    paths[name] = path


def merge_point(space: dict[str, Any], point: dict[str, Any], where: str) -> dict[str, Any]:
    """The space with the point's values set (a deep update, as in Ray)."""
    merged = dict(space)
    for key, value in point.items():
        if key not in space and isinstance(key, str) and "/" in key:
            head, rest = key.split("/", 1)
            value, key = {rest: value}, head
        if key not in space:
            keys = ", ".join(repr(k) for k in space)
            raise SearchSpaceError(
                f"{where}: key {key!r} is not in the search space (its keys there: {keys})"
            )
        inner = merged[key]
        if isinstance(value, dict) and isinstance(inner, dict) and GRID_KEY not in inner:
            merged[key] = merge_point(inner, value, f"{where}{format_path([key], '')}")
        else:
            merged[key] = value
    return merged


def point_spaces(space: dict[str, Any], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The space updated by each point of `points_to_evaluate` (`merge_point`), checked."""
    spaces = []
    for i, point in enumerate(points):
        merged = merge_point(space, point, f"points_to_evaluate[{i}]")
        validate_space(merged, root=f"param_space updated by points_to_evaluate[{i}]")
        spaces.append(merged)
    return spaces


# ---------------------------------------------------------------- a point's values


def point_value(point: Any, path: tuple[Any, ...]) -> Any:
    """The point's value at `path`, from nested dicts or a flat "a/b" key; else `MISSING`."""
    node = point
    for i, key in enumerate(path):
        flat = "/".join(str(k) for k in path[i:])
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, dict) and flat in node:
            return node[flat]
        elif isinstance(node, (list, tuple)) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return MISSING
    return node


def same(a: Any, b: Any) -> bool:
    """The same value: the very object, or equal and of the same type (1 is not True)."""
    return a is b or (type(a) is type(b) and bool(a == b))


def fits(category: Any, value: Any, *, partial: bool = False) -> bool:
    """Whether `value` could come from `category` (a constant or a sub-space);
    `partial`: a dict may leave keys out (a point that sets only some values)."""
    if isinstance(category, Domain):
        return True
    if isinstance(category, dict) and isinstance(value, dict):
        keys = set(value) <= set(category) if partial else value.keys() == category.keys()
        return keys and all(fits(category[k], value[k], partial=partial) for k in value)
    if isinstance(category, (list, tuple)) and isinstance(value, (list, tuple)):
        return len(category) == len(value) and all(
            fits(c, v, partial=partial) for c, v in zip(category, value, strict=True)
        )
    return same(category, value)


def category_index(categories: Sequence[Any], value: Any, *, partial: bool = False) -> int | None:
    """The index of the category `value` is, else of the first it fits (`fits`); None."""
    for i, category in enumerate(categories):
        if same(category, value):
            return i
    for i, category in enumerate(categories):
        if fits(category, value, partial=partial):
            return i
    return None


def point_params(
    space: dict[str, Any],
    point: dict[str, Any],
    paths: dict[str, tuple[Any, ...]],
    rng: random.Random,
    where: str,
    encode: Callable[[str, Domain, Any], tuple[Any, Any] | None],
) -> dict[str, Any]:
    """A point of `points_to_evaluate` as a model's parameters, by `resolve`'s names.

    The space is resolved with the point's values (found by the key paths `paths`;
    the values it leaves out are drawn from `rng`): a choice becomes the index of
    the category the value matches, a number what ``encode(name, domain, value)``
    gives as ``(parameter, value in the config)``, or None when the domain cannot
    take it. Keys of the point that are not in the space are refused.
    """
    params: dict[str, Any] = {}

    def chooser(name: str, domain: Domain) -> Any:
        given = point_value(point, paths[name])
        at = f"{where}: {format_path(paths[name])}"
        if isinstance(domain, Categorical):
            if given is MISSING:
                params[name] = rng.randrange(len(domain.categories))
            else:
                index = category_index(domain.categories, given, partial=True)
                if index is None:
                    raise ValueError(f"{at}={given!r} is not one of {domain.categories!r}")
                params[name] = index
            return domain.categories[params[name]]
        value = domain.sample(rng) if given is MISSING else given
        encoded = encode(name, domain, value)
        if encoded is None:
            raise ValueError(f"{at}={value!r} is not a value {domain!r} can take")
        params[name], chosen = encoded
        return chosen

    config = resolve(space, rng, chooser=chooser)
    unknown = sorted(set(flatten(point)) - set(flatten(config)))
    if unknown:
        raise ValueError(f"{where} sets {unknown}, which are not keys of the search space")
    return params


# ---------------------------------------------------------------- index form (Optuna)


def index_distribution(domain: Domain) -> Any:
    """The Optuna distribution of a bounded domain in index form: a choice as the index
    of its category; a quantized float or an int as the index k of its multiple k * q
    (an int, log-scaled with the domain), so every value the model picks is exact."""
    from optuna import distributions

    if isinstance(domain, Categorical):
        return distributions.CategoricalDistribution(list(range(len(domain.categories))))
    assert isinstance(domain, (Float, Integer))  # the callers refuse unbounded domains
    if isinstance(domain, Integer) or domain.q is not None:
        k_lo, k_hi = domain._multiples()
        return distributions.IntDistribution(k_lo, k_hi, log=domain.log)
    return distributions.FloatDistribution(domain.lower, domain.upper, log=domain.log)


def suggest_index(trial: Any, name: str, dist: Any) -> Any:
    """An Optuna trial's value for a parameter in index form (`index_distribution`)."""
    if hasattr(dist, "choices"):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist.low, int):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, log=dist.log)


def index_value(domain: Domain, index: Any) -> Any:
    """The domain's value for a parameter in index form (category, multiple, or float)."""
    if isinstance(domain, Categorical):
        return domain.categories[int(index)]
    if isinstance(domain, Integer):
        return int(index) * domain.q
    assert isinstance(domain, Float)
    if domain.q is not None:
        return _float_times(int(index), domain.q)
    return min(max(float(index), domain.lower), domain.upper)


def number_index(domain: Domain, dist: Any, value: Any) -> Any:
    """The parameter in index form for a value of a numeric domain; None when the value
    is not a number inside the distribution."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    assert isinstance(domain, (Float, Integer))
    index: int | float = float(value) if domain.q is None else round(value / domain.q)
    return index if dist.low <= index <= dist.high else None


# ---------------------------------------------------------------- optional libraries


def import_optional(*modules: str, owner: str, extra: str, needs: str) -> Any:
    """The first of `modules`, imported with the others (needed when it runs); a missing
    one raises an ImportError that names the extra to install."""
    try:
        loaded = [importlib.import_module(name) for name in modules]
    except ImportError as exc:
        raise ImportError(f"{owner} needs {needs}: pip install 'tunefleet[{extra}]'") from exc
    return loaded[0]


def quiet_optuna() -> contextlib.AbstractContextManager[None]:
    """Optuna's INFO lines dropped (no line per study or trial) and its experimental
    notes ignored, inside the context only: Optuna's verbosity and the warnings filters
    are as the user left them, in and after it.

    Entered at every tell, so it costs little: no change of Optuna's verbosity (which
    clears the cache of every logger of the process); a filter, added once to Optuna's
    loggers, drops their records below WARNING while a context is open; the warnings
    filters are copied only when the outermost context opens."""
    return _QuietOptuna()


def tell_pruned(
    study: Any, number: int, value: float | None = None, step: int | None = None
) -> None:
    """Tell an Optuna `study` that its trial `number` was stopped early, its `value` (a
    single objective's) at `step` as the trial's intermediate value: Optuna's TPE ranks
    pruned trials after the complete ones, by the step reached, then by that value
    (GP and the others leave them out of their model). Without a value it is told
    pruned with no value, which every sampler leaves out."""
    from optuna.trial import TrialState

    with quiet_optuna():
        if value is not None and step is not None and math.isfinite(value):
            storage = study._storage
            internal = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
            storage.set_trial_intermediate_value(internal, max(0, int(step)), float(value))
        study.tell(number, state=TrialState.PRUNED)


class _OptunaInfo(logging.Filter):
    """On Optuna's loggers: drops their records below WARNING while `depth` > 0."""

    def __init__(self) -> None:
        super().__init__("optuna")
        self.depth = 0
        self.loggers = -1  # the number of the process's loggers when last added

    def filter(self, record: logging.LogRecord) -> bool:
        return self.depth == 0 or record.levelno >= logging.WARNING

    def add(self) -> None:
        """On each of Optuna's loggers (again when the process made new loggers)."""
        known = logging.Logger.manager.loggerDict
        if len(known) == self.loggers:
            return
        for name, log in list(known.items()):
            if isinstance(log, logging.Logger) and (name + ".").startswith("optuna."):
                log.addFilter(self)  # once: addFilter skips a filter it has
        self.loggers = len(known)


_OPTUNA_INFO = _OptunaInfo()


class _QuietOptuna:
    __slots__ = ("_warnings",)

    def __enter__(self) -> None:
        _OPTUNA_INFO.add()
        _OPTUNA_INFO.depth += 1
        self._warnings: warnings.catch_warnings[None] | None = None
        if _OPTUNA_INFO.depth > 1:  # an outer context ignores them already
            return
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()  # the filters now a copy, restored on exit
        filters: Any = warnings.filters  # the list, which typeshed calls a Sequence
        filters[:0] = _optuna_notes()  # as simplefilter/filterwarnings put them

    def __exit__(self, *exc: object) -> None:
        _OPTUNA_INFO.depth -= 1
        if self._warnings is not None:
            self._warnings.__exit__(None, None, None)


@functools.cache
def _optuna_notes() -> list[tuple[Any, ...]]:
    """The warnings filters that ignore Optuna's experimental notes, and the deprecation
    of constraints_func (Optuna 5 deprecates it, Optuna 4 needs it)."""
    import optuna

    return [
        ("ignore", re.compile(".*constraints_func", re.I), FutureWarning, None, 0),
        ("ignore", None, optuna.exceptions.ExperimentalWarning, None, 0),
    ]
