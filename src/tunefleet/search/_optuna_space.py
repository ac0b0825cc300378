"""Translation between tunefleet search spaces and Optuna distributions (OptunaSearch).

Walks a space's domains (choices before the domains inside their categories), maps
each domain to an Optuna distribution and a suggested value back to the domain's own,
and checks points against the space. Optuna is imported only inside the functions.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tunefleet._metrics import MISSING, lookup
from tunefleet.search._shared import children, fits, grid_refused, same
from tunefleet.space import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    flatten,
    format_path,
    grid_axes,
    parameter_name,
    validate_space,
)
from tunefleet.space._domains import _Category, _float_times

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import Trial

_Key = tuple[object, ...]  # a key path; `_Category(i)` means "inside category i"


class DefineByRunError(TypeError, ValueError):
    """A call that needs the space's distributions, on a define-by-run space: Ray raises
    TypeError there; it is a ValueError too, as tunefleet's other bad-input errors."""


def _checked_space(space: dict[str, Any]) -> dict[str, Any]:
    validate_space(space)
    axes = grid_axes(space)
    if axes:
        raise grid_refused("OptunaSearch", format_path(axes[0][0]))
    for path, domain in _walk(space, ()):
        if not isinstance(domain, (Float, Integer, Categorical, Function)):
            raise ValueError(
                f"OptunaSearch: {format_path(path)} is {domain!r}, a distribution without "
                "bounds, which Optuna cannot represent: use uniform(...) or loguniform(...)"
            )
    return space


def _walk(node: Any, path: _Key) -> Iterator[tuple[_Key, Domain]]:
    """Every domain of a space, choices before the domains inside their categories."""
    if isinstance(node, Domain):
        yield path, node
        if isinstance(node, Categorical):
            for i, category in enumerate(node.categories):
                yield from _walk(category, (*path, _Category(i)))
    else:
        for key, value in children(node):
            yield from _walk(value, (*path, key))


def _is_conditional(space: dict[str, Any] | None) -> bool:
    return any(_Category in map(type, path) for path, _ in _walk(space or {}, ()))


def _active(path: _Key, chosen: dict[_Key, int]) -> bool | None:
    """False if `path` is in a category other than the one chosen; None if not chosen."""
    known = True
    for i, key in enumerate(path):
        if isinstance(key, _Category):
            index = chosen.get(path[:i])
            if index is None:
                known = False
            elif index != key.index:
                return False
    return True if known else None


def _by_value(domain: Categorical) -> bool:
    """True when Optuna can hold the categories themselves (else their indices)."""
    cats = domain.categories
    kind = type(cats[0])
    if kind not in (str, int, float, bool) or any(type(c) is not kind for c in cats):
        return False
    return len(set(cats)) == len(cats)  # no duplicates, nor 0.0 beside -0.0


def _category_of(domain: Categorical, value: Any) -> int | None:
    """The index of `value` among the categories; a dict may name one sub-space by
    some of its values (None when it fits several: the choice is left open)."""
    for i, category in enumerate(domain.categories):
        if same(category, value):
            return i
    if not isinstance(value, dict):
        return None
    found = [
        i
        for i, c in enumerate(domain.categories)
        if isinstance(c, dict) and fits(c, value, partial=True)
    ]
    return found[0] if len(found) == 1 else None


def _distribution(domain: Domain) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(domain, Categorical):
        cats = domain.categories
        return CategoricalDistribution(cats if _by_value(domain) else list(range(len(cats))))
    if isinstance(domain, Float):
        if domain.q is None:
            return FloatDistribution(domain.lower, domain.upper, log=domain.log)
        # Optuna takes a step or a log scale, not both: a log one is rounded afterwards
        step = None if domain.log else domain.q
        return FloatDistribution(domain.min_value, domain.max_value, log=domain.log, step=step)
    assert isinstance(domain, Integer)
    step = 1 if domain.log else domain.q
    return IntDistribution(domain.min_value, domain.max_value, log=domain.log, step=step)


def _suggest(trial: Trial, name: str, domain: Domain) -> Any:
    """`resolve`'s chooser: one ``trial.suggest_*`` call, mapped back to the domain's value."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    dist = _distribution(domain)
    if isinstance(dist, CategoricalDistribution):
        assert isinstance(domain, Categorical)
        picked = trial.suggest_categorical(name, dist.choices)
        if _by_value(domain):
            return next(c for c in domain.categories if same(c, picked))
        return domain.categories[int(picked)]  # type: ignore[arg-type]
    if isinstance(dist, FloatDistribution):
        value: float = trial.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)
    else:
        assert isinstance(dist, IntDistribution)
        value = trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
    return _on_grid(domain, value)


def _on_grid(domain: Domain, value: float) -> float | int:
    """The domain's own value for what Optuna suggested: exact type, a multiple of q."""
    if isinstance(domain, Float):
        if domain.q is None:
            return float(value)
        q = domain.q
        k_lo, k_hi = round(domain.min_value / q), round(domain.max_value / q)
        return _float_times(min(max(round(value / q), k_lo), k_hi), q)
    assert isinstance(domain, Integer)
    q, number = domain.q, int(value)
    if q == 1 or not domain.log:
        return number
    nearest = (2 * number + q) // (2 * q)  # as Integer.sample rounds: half up, in ints
    return min(max(nearest, domain.min_value // q), domain.max_value // q) * q


def _on_grid_checked(domain: Domain, value: Any, where: str) -> float | int:
    """A point's value for a numeric domain, refused unless the domain can produce it."""
    assert isinstance(domain, (Float, Integer))
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"OptunaSearch: {where}={value!r} must be a finite number")
    number = float(value)
    if isinstance(domain, Integer):
        ok = isinstance(value, numbers.Integral) and int(value) % domain.q == 0
    else:
        ok = domain.q is None or math.isclose(_on_grid(domain, number), number)
    if not ok or not domain.min_value <= number <= domain.max_value:
        raise ValueError(f"OptunaSearch: {where}={value!r} is not a value of {domain!r}")
    return _on_grid(domain, number)


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node, *parents, last = [out, *key.split("/")]
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"OptunaSearch: parameter {key!r} is inside a value")
        node[last] = value
    return out


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        inner = merged.get(key)
        both = isinstance(inner, dict) and isinstance(value, dict)
        merged[key] = _merge(inner, value) if both else value  # type: ignore[arg-type]
    return merged


def point_params(
    space: dict[str, Any] | None,
    fixed: dict[str, BaseDistribution] | None,
    point: dict[str, Any],
    where: str,
    *,
    complete: bool,
) -> tuple[dict[str, Any], dict[str, BaseDistribution]]:
    """A point (``points_to_evaluate``, an evaluated point) as Optuna parameters and their
    distributions; `space` is the tunefleet space, or None with `fixed`, the distributions
    of Optuna's own space (None for a define-by-run function)."""
    if space is None:
        flat = flatten(point)
        if fixed is None:
            if complete:
                raise DefineByRunError(
                    f"OptunaSearch: {where} cannot be added as evaluated with a "
                    "define-by-run space (its distributions are not known)"
                )
            return flat, {}
        missing = set(fixed) - set(flat) if complete else set()
        unknown = set(flat) - set(fixed)
        if missing or unknown:
            raise ValueError(
                f"OptunaSearch: {where} must set the parameters {sorted(fixed)} "
                f"(missing: {sorted(missing)}, unknown: {sorted(unknown)})"
            )
        return flat, {k: fixed[k] for k in flat}
    params: dict[str, Any] = {}
    dists: dict[str, BaseDistribution] = {}
    chosen: dict[_Key, int] = {}
    covered: list[str] = []
    for path, domain in _walk(space, ()):
        active = _active(path, chosen)
        if active is False or isinstance(domain, Function):  # sample_from: computed
            continue
        key = "/".join(str(k) for k in path if not isinstance(k, _Category))
        value = lookup(point, key)
        if value is MISSING:
            if complete:
                raise ValueError(
                    f"OptunaSearch: {where} does not set {key!r}; an evaluated point "
                    "must set every parameter"
                )
            continue
        name, dist = parameter_name(path), _distribution(domain)
        if isinstance(domain, Categorical):
            index = _category_of(domain, value)
            if index is None:
                if complete or not isinstance(value, dict):
                    raise ValueError(
                        f"OptunaSearch: {where}[{key!r}]={value!r} is not one of "
                        f"{domain.categories!r}"
                    )
                continue  # fixes values inside branches only
            chosen[path] = index
            params[name] = domain.categories[index] if _by_value(domain) else index
        else:
            try:
                params[name] = _on_grid_checked(domain, value, f"{where}[{key!r}]")
            except ValueError:
                if active is None:
                    continue  # a branch not chosen by the point: its value may not fit
                raise
        dists[name] = dist
        covered.append(key)
    for key in flatten(point):
        if not any(key == c or key.startswith(c + "/") for c in covered):
            raise ValueError(
                f"OptunaSearch: {where} sets {key!r}, which is not a parameter of the search space"
            )
    return params, dists


def to_distributions(spec: dict[str, Any]) -> dict[str, BaseDistribution]:
    """`OptunaSearch.convert_search_space`: every sampled domain of `spec` as an Optuna
    distribution, by its "a/b" key path (sample_from values are left out)."""
    if not isinstance(spec, dict):
        raise TypeError(f"OptunaSearch.convert_search_space: spec must be a dict, not {spec!r}")
    found: dict[str, BaseDistribution] = {}
    for path, domain in _walk(_checked_space(spec), ()):
        if isinstance(domain, Function):
            continue
        where = format_path(path)
        if any(isinstance(k, _Category) for k in path):
            raise ValueError(
                f"OptunaSearch.convert_search_space: {where} is inside a choice's category, "
                "which a flat dict of distributions cannot hold: pass this space as the "
                "Tuner's param_space (OptunaSearch searches it as it is)"
            )
        if isinstance(domain, Categorical) and not _by_value(domain):
            raise ValueError(
                f"OptunaSearch.convert_search_space: {where} has categories "
                f"{domain.categories!r}; an Optuna CategoricalDistribution takes None, bool, "
                "int, float and str only: pass this space as the Tuner's param_space"
            )
        found["/".join(str(k) for k in path)] = _distribution(domain)
    return found
