"""The functions that build domains, as Ray Tune names them (`tune.uniform` & co.).

Each returns a domain whose sampler is chosen (Ray's builder methods such as
``.uniform()`` then refuse a second one). Re-exported by `tunefleet.space`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tunefleet.space._domains import GRID_KEY, Categorical, Domain, Float, Integer, Normal
from tunefleet.space._errors import SearchSpaceError

_T = TypeVar("_T", bound=Domain)


def _chosen(domain: _T) -> _T:
    domain.sampler_chosen = True
    return domain


def uniform(lower: float, upper: float) -> Float:
    """A float drawn uniformly from ``[lower, upper)``."""
    return _chosen(Float(lower, upper))


def quniform(lower: float, upper: float, q: float) -> Float:
    """A multiple of `q` in ``[lower, upper]`` (both inclusive), each equally likely."""
    return _chosen(Float(lower, upper, q=q))


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float drawn uniformly in log space from ``[lower, upper)``; lower must be > 0."""
    return _chosen(Float(lower, upper, log=True, base=base))


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """A log-uniform float rounded to a multiple of `q` inside ``[lower, upper]``."""
    return _chosen(Float(lower, upper, log=True, base=base, q=q))


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A float drawn from a normal distribution."""
    return _chosen(Normal(mean, sd))


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """A normal float rounded to a multiple of `q`."""
    return _chosen(Normal(mean, sd, q=q))


def randint(lower: int, upper: int) -> Integer:
    """An int in ``[lower, upper)`` (upper exclusive, like Ray and `range`)."""
    return _chosen(Integer(lower, upper))


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of `q` in ``[lower, upper]`` (upper inclusive, like Ray)."""
    return _chosen(Integer(lower, upper, q=q, include_upper=True))


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """A log-uniform int in ``[lower, upper)`` (upper exclusive); lower must be > 0."""
    return _chosen(Integer(lower, upper, log=True, base=base))


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """A log-uniform multiple of `q` in ``[lower, upper]`` (upper inclusive)."""
    return _chosen(Integer(lower, upper, log=True, base=base, q=q, include_upper=True))


def choice(categories: Sequence[Any]) -> Categorical:
    """One of `categories`, equally likely; a category may be a dict of domains."""
    return _chosen(Categorical(categories))


def grid_search(values: Iterable[Any]) -> dict[str, list[Any]]:
    """Try every one of `values`; returns ``{"grid_search": [...]}`` like Ray."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise SearchSpaceError(f"grid_search values={values!r} must be a list")
    listed = list(values)
    if not listed:
        raise SearchSpaceError("grid_search values=[] must not be empty")
    return {GRID_KEY: listed}
