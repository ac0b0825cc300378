"""Search spaces: the domains and the functions that build them.

The functions keep Ray Tune's names and semantics (`uniform`, `randint` with an
exclusive upper bound, `qrandint` with an inclusive one, `grid_search` as a plain
``{"grid_search": [...]}`` dict, `sample_from(lambda spec: spec.config.lr * 2)`).
Every domain samples from an injected `random.Random`, never the global one.

Differences from Ray, on purpose: quantized values are always multiples of ``q``
inside the bounds (Ray can round past a bound); a uniform quantized domain draws
each allowed multiple with equal probability; a bound that admits no multiple of
``q``, and a `grid_search` inside a `choice` category, are errors instead of
silent surprises.

`sample_from` (a value computed from the rest of a config) lives with resolution in
`_resolve`, reading a space back from JSON in `_json`; `tunefleet.space` re-exports
every public name of the three.
"""

from __future__ import annotations

import math
import numbers
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Any, TypeAlias

from tunefleet.space._builders import SamplerChoice
from tunefleet.space._errors import SearchSpaceError
from tunefleet.space._sampling import sampling_inputs

PathKey: TypeAlias = str | int
Path: TypeAlias = tuple[str | int, ...]
GRID_KEY = "grid_search"
_MARKER = "__domain__"


class _MissingKeyError(SearchSpaceError, KeyError, AttributeError):
    # A KeyError/AttributeError too, so `spec.config.get(k, d)` and `hasattr` work.
    def __str__(self) -> str:
        return str(self.args[0])


class _Category:
    """A path element meaning "inside the i-th category of a choice"."""

    def __init__(self, index: int) -> None:
        self.index = index


def format_path(path: Sequence[object], root: str = "param_space") -> str:
    """Format a key path the way it is written in Python: ``param_space["a"][0]``."""
    parts = [root]
    for key in path:
        if isinstance(key, _Category):
            parts.append(f".categories[{key.index}]")
        elif isinstance(key, str):
            parts.append(f'["{key}"]')
        else:
            parts.append(f"[{key!r}]")
    return "".join(parts)


# ---------------------------------------------------------------- number checks


def _real_problem(fn: str, name: str, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"{fn} {name}={value!r} must be a number"
    if not math.isfinite(value):
        return f"{fn} {name}={value!r} must be finite (not NaN or inf)"
    return None


def _int_problem(fn: str, name: str, value: object) -> str | None:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return None
    return _real_problem(fn, name, value) or f"{fn} {name}={value!r} must be an integer"


def _dec(value: float) -> Decimal:
    return Decimal(repr(float(value)))


def _float_multiples(lower: float, upper: float, q: float) -> tuple[int, int]:
    """The range of k with lower <= k*q <= upper (empty when first > second)."""
    with localcontext() as ctx:
        ctx.prec = 60
        lo, hi, dq = _dec(lower), _dec(upper), _dec(q)
        k_lo = int((lo / dq).to_integral_value(rounding=ROUND_CEILING))
        k_hi = int((hi / dq).to_integral_value(rounding=ROUND_FLOOR))
        while k_lo * dq < lo:
            k_lo += 1
        while k_hi * dq > hi:
            k_hi -= 1
    return k_lo, k_hi


def _float_times(k: int, q: float) -> float:
    # Decimal product, so 3 * 0.1 gives 0.3 rather than 0.30000000000000004.
    with localcontext() as ctx:
        ctx.prec = 60
        return float(k * _dec(q))


# ---------------------------------------------------------------- domains


class Domain(ABC):
    """A distribution over the values of one hyperparameter."""

    sampler_chosen = False  # see `SamplerChoice`

    @property
    @abstractmethod
    def name(self) -> str:
        """The public function that builds this domain, e.g. ``"loguniform"``."""

    @abstractmethod
    def draw(self, rng: random.Random) -> Any:
        """Draw one value using `rng` and nothing else."""

    def sample(
        self,
        config: Any = None,
        size: int = 1,
        random_state: Any = None,
        *,
        spec: Any = None,
    ) -> Any:
        """Draw values as Ray Tune's ``Domain.sample`` does.

        Args:
            config: the config a `sample_from` function sees (others ignore it); a list
                gives the i-th draw the i-th config. A `random.Random` here is
                tunefleet's own form ``sample(rng)``: one value drawn with it.
            size: how many values; 1 returns the value itself, more a list.
            random_state: None (numpy's global generator when numpy is installed,
                as in Ray), an int seed, a `random.Random`, or a numpy Generator or
                RandomState.
            spec: Ray's older name for `config`, for `sample_from` functions that read
                ``spec.config``.

        Example:
            >>> values = uniform(0, 1).sample(size=3, random_state=0)
            >>> len(values), all(0 <= v < 1 for v in values)
            (3, True)
        """
        if isinstance(config, random.Random):
            return self.draw(config)
        rng, configs, is_spec = sampling_inputs(self.name, config, size, random_state, spec)
        values = [self._sample_for(c, rng, is_spec) for c in configs]
        return values[0] if size == 1 else values

    def is_grid(self) -> bool:
        """Always False: a grid is ``grid_search([...])``, a dict, never a domain."""
        return False

    def is_function(self) -> bool:
        """Whether this is a `sample_from` function."""
        return False

    def _sample_for(self, config: Any, rng: random.Random, is_spec: bool) -> Any:
        """One draw for `sample`; only `sample_from` reads the config."""
        return self.draw(rng)

    @abstractmethod
    def problem(self) -> str | None:
        """What is wrong with the arguments (without the key path), or None."""

    @abstractmethod
    def args(self) -> dict[str, Any]:
        """The arguments by name, as JSON-able values (None: not applicable)."""

    def to_json(self) -> dict[str, Any]:
        """``{"__domain__": name, **args}``; see `space_to_json`."""
        return {_MARKER: self.name, **self.args()}

    def _check(self) -> None:
        if (problem := self.problem()) is not None:
            raise SearchSpaceError(problem)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.args().items() if v is not None)
        return f"{self.name}({shown})"


def _range_problem(
    d: Float | Integer, number: Callable[[str, str, object], str | None]
) -> str | None:
    """The rules Float and Integer share; `number` checks each bound's type."""
    fn = d.name
    for key in ("lower", "upper", "q"):
        value = getattr(d, key)
        if (key != "q" or value is not None) and (bad := number(fn, key, value)) is not None:
            return bad
    if d.q is not None and d.q <= 0:
        return f"{fn} q={d.q!r} must be > 0"
    if d.log:
        if (bad := _real_problem(fn, "base", d.base)) is not None:
            return bad
        if d.base <= 0 or d.base == 1:
            return f"{fn} base={d.base!r} must be > 0 and != 1"
        if d.lower <= 0:
            return f"{fn} lower={d.lower!r} must be > 0 (log scale)"
    if d.include_upper and d.lower > d.upper:
        return f"{fn} lower={d.lower!r} must be <= upper={d.upper!r} (upper is inclusive)"
    if not d.include_upper and d.lower >= d.upper:
        return f"{fn} lower={d.lower!r} must be < upper={d.upper!r} (upper is exclusive)"
    k_lo, k_hi = d._multiples()
    if k_lo > k_hi:
        return f"{fn} range [{d.lower!r}, {d.upper!r}] holds no multiple of q={d.q!r}"
    return None


class Float(SamplerChoice, Domain):
    """A float between `lower` and `upper`, optionally log-scaled and/or quantized.

    Attributes:
        lower, upper: the bounds; `upper` can be drawn only when quantized.
        log: sample uniformly in log space (base: Ray's argument, the distribution
            does not depend on it). q: the quantum, or None.
    """

    def __new__(cls, lower: float | None = 0.0, upper: float | None = 1.0, **_: Any) -> Float:
        # Ray's ``Float(None, None).normal()``: a float without bounds, only for normal()
        unbounded = cls is Float and lower is None and upper is None
        return super().__new__(_UnboundedFloat if unbounded else cls)

    def __init__(
        self,
        lower: float,
        upper: float,
        *,
        log: bool = False,
        base: float = 10,
        q: float | None = None,
    ) -> None:
        self.lower, self.upper, self.log, self.base, self.q = lower, upper, log, base, q
        self._check()
        self.lower, self.upper, self.base = float(lower), float(upper), float(base)
        self.q = None if q is None else float(q)

    @property
    def name(self) -> str:
        return ("q" if self.q is not None else "") + ("loguniform" if self.log else "uniform")

    @property
    def include_upper(self) -> bool:
        """Whether `upper` itself can be drawn (only when quantized, as in Ray)."""
        return self.q is not None

    def problem(self) -> str | None:
        return _range_problem(self, _real_problem)

    def _multiples(self) -> tuple[int, int]:
        return (0, 0) if self.q is None else _float_multiples(self.lower, self.upper, self.q)

    @property
    def min_value(self) -> float:
        """The smallest value that can be drawn."""
        return self.lower if self.q is None else _float_times(self._multiples()[0], self.q)

    @property
    def max_value(self) -> float:
        """The largest value that can be drawn."""
        return self.upper if self.q is None else _float_times(self._multiples()[1], self.q)

    def draw(self, rng: random.Random) -> float:
        k_lo, k_hi = self._multiples()
        if self.q is not None and not self.log:
            return _float_times(rng.randint(k_lo, k_hi), self.q)
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value: float = self.base ** rng.uniform(lo, hi)
        else:
            value = rng.uniform(self.lower, self.upper)
        if self.q is not None:
            return _float_times(min(max(round(value / self.q), k_lo), k_hi), self.q)
        return min(max(value, self.lower), self.upper)

    def args(self) -> dict[str, Any]:
        base = self.base if self.log else None
        return {"lower": self.lower, "upper": self.upper, "q": self.q, "base": base}

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> Normal:
        """Ray's normal sampler: only for ``Float(None, None)`` (Ray asserts when sampling)."""
        raise SearchSpaceError(
            f"{self!r}.normal(): normal sampling is for a float without bounds, "
            f"Float(None, None).normal(mean, sd), or tune.randn(mean, sd)"
        )


class _UnboundedFloat(Float):
    """``Float(None, None)``: no value of its own until `.normal(mean, sd)` is called."""

    def __init__(self, lower: None = None, upper: None = None, **_: Any) -> None:
        self.lower, self.upper, self.log, self.base, self.q = -math.inf, math.inf, False, 10.0, None

    def problem(self) -> str | None:
        return "Float(None, None) has no bounds: call .normal(mean, sd) on it"

    def draw(self, rng: random.Random) -> float:
        raise SearchSpaceError(str(self.problem()))

    def _copy(self, **changes: Any) -> Any:
        raise SearchSpaceError(f"{self.problem()} (uniform, log-uniform and q need bounds)")

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> Normal:
        new = Normal(mean, sd)
        new.sampler_chosen = True
        return new

    def __repr__(self) -> str:
        return "Float(None, None)"


class Integer(SamplerChoice, Domain):
    """An int in ``[lower, upper)``, or ``[lower, upper]`` if `include_upper`; a multiple of q.

    Attributes:
        lower, upper: the bounds as given (Ray's meaning). include_upper: whether
            `upper` can be drawn. log, base: log-scaled sampling. q: the quantum (int).
    """

    def __init__(
        self,
        lower: int,
        upper: int,
        *,
        log: bool = False,
        base: float = 10,
        q: int = 1,
        include_upper: bool = False,
    ) -> None:
        self.lower, self.upper, self.log, self.base, self.q = lower, upper, log, base, q
        self.include_upper = include_upper
        self._check()
        self.lower, self.upper, self.q, self.base = int(lower), int(upper), int(q), float(base)

    @property
    def name(self) -> str:
        return ("q" if self.include_upper else "") + ("lograndint" if self.log else "randint")

    def problem(self) -> str | None:
        return _range_problem(self, _int_problem)

    @property
    def high(self) -> int:
        """The largest int the bounds allow (``upper - 1`` when upper is exclusive)."""
        return int(self.upper) if self.include_upper else int(self.upper) - 1

    def _multiples(self) -> tuple[int, int]:
        q = int(self.q)
        return -(-int(self.lower) // q), self.high // q

    @property
    def min_value(self) -> int:
        """The smallest value that can be drawn."""
        return self._multiples()[0] * self.q

    @property
    def max_value(self) -> int:
        """The largest value that can be drawn."""
        return self._multiples()[1] * self.q

    def draw(self, rng: random.Random) -> int:
        k_lo, k_hi = self._multiples()
        if not self.log:
            return rng.randint(k_lo, k_hi) * self.q
        lo, hi = math.log(self.lower, self.base), math.log(self.high + 1, self.base)
        drawn: float = self.base ** rng.uniform(lo, hi)
        value = min(max(math.floor(drawn), self.lower), self.high)
        nearest = (2 * value + self.q) // (2 * self.q)  # round half up, in ints
        return min(max(nearest, k_lo), k_hi) * self.q

    def args(self) -> dict[str, Any]:
        base = self.base if self.log else None
        return {"lower": self.lower, "upper": self.upper, "q": self.q, "base": base}


class Normal(Domain):
    """A normally distributed float (`randn`), optionally rounded to a multiple of q.

    Not a `Float`: it has no bounds, so a searcher has to handle it on purpose.
    """

    def __init__(self, mean: float = 0.0, sd: float = 1.0, *, q: float | None = None) -> None:
        self.mean, self.sd, self.q = mean, sd, q
        self._check()
        self.mean, self.sd, self.q = float(mean), float(sd), None if q is None else float(q)

    @property
    def name(self) -> str:
        return "qrandn" if self.q is not None else "randn"

    def problem(self) -> str | None:
        for key in ("mean", "sd") + (("q",) if self.q is not None else ()):
            if (bad := _real_problem(self.name, key, getattr(self, key))) is not None:
                return bad
        if self.sd <= 0:
            return f"{self.name} sd={self.sd!r} must be > 0"
        if self.q is not None and self.q <= 0:
            return f"{self.name} q={self.q!r} must be > 0"
        return None

    def draw(self, rng: random.Random) -> float:
        value = rng.normalvariate(self.mean, self.sd)
        return value if self.q is None else _float_times(round(value / self.q), self.q)

    def args(self) -> dict[str, Any]:
        return {"mean": self.mean, "sd": self.sd, "q": self.q}


class Categorical(SamplerChoice, Domain):
    """One of `categories`, equally likely; a category may be a nested sub-space."""

    def __init__(self, categories: Sequence[Any]) -> None:
        self.categories: list[Any] = categories  # type: ignore[assignment]  # checked next
        self._check()
        self.categories = list(categories)

    @property
    def name(self) -> str:
        return "choice"

    def problem(self) -> str | None:
        cats = self.categories
        if isinstance(cats, (str, bytes, Mapping)) or not isinstance(cats, Sequence):
            return f"choice categories={cats!r} must be a list, not {type(cats).__name__}"
        return None if cats else "choice categories=[] must not be empty"

    def draw(self, rng: random.Random) -> Any:
        """The chosen category, unresolved (`resolve` recurses into it)."""
        return self.categories[rng.randrange(len(self.categories))]

    def args(self) -> dict[str, Any]:
        return {"categories": [space_to_json(c) for c in self.categories]}

    def __repr__(self) -> str:
        return f"choice({self.categories!r})"


def space_to_json(space: Any) -> Any:
    """The space as JSON-able data; constants pass through unchanged.

    A domain becomes ``{"__domain__": "<function name>", <its arguments>}``;
    a sample_from function is stored by qualified name and source text only.
    """
    if isinstance(space, Domain):
        return space.to_json()
    if isinstance(space, dict):
        converted = {k: space_to_json(v) for k, v in space.items()}
        return {_MARKER: "dict", "value": converted} if _MARKER in space else converted
    if isinstance(space, (list, tuple)):
        return type(space)(space_to_json(v) for v in space)
    return space
