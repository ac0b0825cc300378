"""HyperOptSearch's search spaces: tunefleet domains as HyperOpt expressions, and
HyperOpt's numbers back as the domains' exact values."""

from __future__ import annotations

import math
from typing import Any

from tunefleet.search._shared import children, claim_name, grid_refused
from tunefleet.space import (
    GRID_KEY,
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    Normal,
    format_path,
    parameter_name,
)
from tunefleet.space._domains import _Category, _float_times


def _translate(
    hp: Any,
    node: Any,
    path: tuple[Any, ...],
    name: tuple[Any, ...],
    params: dict[str, Domain],
    paths: dict[str, tuple[Any, ...]],
) -> dict[str, Any]:
    """The HyperOpt expressions ``{label: hp...}`` for the domains under `node`.

    `name` is `path` with a `_Category` after each choice, as `resolve` names them;
    a choice's sub-spaces become the options of an ``hp.choice``, so TPE sees their
    parameters only in the branch that is chosen.
    """
    if isinstance(node, Function):
        return {}  # computed from the config by resolve
    if isinstance(node, Domain):
        label = parameter_name(name)
        claim_name("HyperOptSearch", label, path, paths)
        params[label] = node
        if isinstance(node, Categorical):
            options = [
                _translate(hp, c, path, (*name, _Category(i)), params, paths)
                for i, c in enumerate(node.categories)
            ]
            return {label: hp.choice(label, options)}
        return {label: _expression(hp, label, node)}
    if isinstance(node, dict) and GRID_KEY in node:
        raise grid_refused("HyperOptSearch", format_path(path))
    found: dict[str, Any] = {}
    for key, value in children(node):
        found.update(_translate(hp, value, (*path, key), (*name, key), params, paths))
    return found


def _expression(hp: Any, label: str, domain: Domain) -> Any:
    """The HyperOpt distribution of one numeric domain.

    A quantized domain spans half a step past its extreme multiples, so HyperOpt's
    ``round(x / q) * q`` gives each allowed value the same prior mass; `_exact`
    then turns HyperOpt's float into the domain's exact value.
    """
    if isinstance(domain, Normal):
        if domain.q is None:
            return hp.normal(label, domain.mean, domain.sd)
        return hp.qnormal(label, domain.mean, domain.sd, domain.q)
    assert isinstance(domain, (Float, Integer))  # Categorical and Function are handled
    q = domain.q
    if q is None:
        if domain.log:
            return hp.loguniform(label, math.log(domain.lower), math.log(domain.upper))
        return hp.uniform(label, domain.lower, domain.upper)
    low, high = domain.min_value - q / 2, domain.max_value + q / 2
    if domain.log:  # min_value >= q > 0 here, so low >= q/2 > 0
        return hp.qloguniform(label, math.log(low), math.log(high), q)
    return hp.quniform(label, low, high, q)


def _native(hp: Any, node: Any, path: tuple[Any, ...]) -> Any:
    """`node` with each domain replaced by the HyperOpt expression sampling its values."""
    label = "/".join(str(k) for k in path)
    if isinstance(node, Function):
        raise ValueError(
            f"HyperOptSearch.convert_search_space: {format_path(path)} is a sample_from "
            "function, which a HyperOpt space cannot hold: give this space as the Tuner's "
            "param_space (HyperOptSearch computes it there)"
        )
    if isinstance(node, Categorical):
        options = [_native(hp, c, (*path, i)) for i, c in enumerate(node.categories)]
        return hp.hp.choice(label, options)
    if isinstance(node, Integer):
        return hp.pyll.scope.int(_expression(hp.hp, label, node))
    if isinstance(node, Domain):
        return _expression(hp.hp, label, node)
    if isinstance(node, dict) and GRID_KEY in node:
        raise grid_refused("HyperOptSearch", format_path(path))
    if isinstance(node, dict):
        return {k: _native(hp, v, (*path, k)) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(_native(hp, v, (*path, i)) for i, v in enumerate(node))
    return node


def _exact(domain: Domain, value: Any) -> Any:
    """The domain's value for HyperOpt's number: an int, an exact multiple of q, in bounds."""
    if isinstance(domain, Normal):
        return float(value) if domain.q is None else _float_times(round(value / domain.q), domain.q)
    if isinstance(domain, Integer):
        k_lo, k_hi = domain._multiples()
        return min(max(round(value / domain.q), k_lo), k_hi) * domain.q
    assert isinstance(domain, Float)
    if domain.q is None:
        return min(max(float(value), domain.lower), domain.upper)
    k_lo, k_hi = domain._multiples()
    return _float_times(min(max(round(value / domain.q), k_lo), k_hi), domain.q)
