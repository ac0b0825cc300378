"""Search spaces: domains, sampling, validation and a JSON form.

The functions keep Ray Tune's names and semantics (`uniform`, `randint` with an
exclusive upper bound, `qrandint` with an inclusive one, `grid_search` as a plain
``{"grid_search": [...]}`` dict, `sample_from(lambda spec: spec.config.lr * 2)`).
Every domain samples from an injected `random.Random`, never the global one.

Differences from Ray, on purpose: quantized values are always multiples of ``q``
inside the bounds (Ray can round past a bound); a uniform quantized domain draws
each allowed multiple with equal probability; a bound that admits no multiple of
``q``, and a `grid_search` inside a `choice` category, are errors instead of
silent surprises.

Example:
    >>> import random
    >>> space = {"lr": loguniform(1e-4, 1e-1), "wd": sample_from(lambda s: s.config.lr / 10)}
    >>> config = resolve(space, random.Random(0))
    >>> abs(config["wd"] - config["lr"] / 10) < 1e-12
    True
"""

from __future__ import annotations

import inspect
import itertools
import math
import numbers
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Any, TypeAlias

PathKey: TypeAlias = str | int
Path: TypeAlias = tuple[str | int, ...]
GRID_KEY = "grid_search"
_MARKER = "__domain__"


class SearchSpaceError(ValueError):
    """An invalid search space; the message names the key path, value and rule."""


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

    @property
    @abstractmethod
    def name(self) -> str:
        """The public function that builds this domain, e.g. ``"loguniform"``."""

    @abstractmethod
    def sample(self, rng: random.Random) -> Any:
        """Draw one value using `rng` and nothing else."""

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


class Float(Domain):
    """A float between `lower` and `upper`, optionally log-scaled and/or quantized.

    Attributes:
        lower, upper: the bounds; `upper` can be drawn only when quantized.
        log: sample uniformly in log space (base: Ray's argument, the distribution
            does not depend on it). q: the quantum, or None.
    """

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

    def sample(self, rng: random.Random) -> float:
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


class Integer(Domain):
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

    def sample(self, rng: random.Random) -> int:
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

    def sample(self, rng: random.Random) -> float:
        value = rng.normalvariate(self.mean, self.sd)
        return value if self.q is None else _float_times(round(value / self.q), self.q)

    def args(self) -> dict[str, Any]:
        return {"mean": self.mean, "sd": self.sd, "q": self.q}


class Categorical(Domain):
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

    def sample(self, rng: random.Random) -> Any:
        """The chosen category, unresolved (`resolve` recurses into it)."""
        return self.categories[rng.randrange(len(self.categories))]

    def args(self) -> dict[str, Any]:
        return {"categories": [space_to_json(c) for c in self.categories]}

    def __repr__(self) -> str:
        return f"choice({self.categories!r})"


class Function(Domain):
    """A value computed from the rest of the config (`sample_from`).

    The function takes ``spec`` (``spec.config`` gives the config's other values, by
    attribute or item, nested; ``spec.rng`` is the config's random generator) or
    no argument at all.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func: Callable[..., Any] | None = func
        self.func_name = str(getattr(func, "__qualname__", None) or repr(func))
        self._check()
        try:
            self.source: str | None = inspect.getsource(func).strip()
        except (OSError, TypeError):
            self.source = None

    @classmethod
    def placeholder(cls, func_name: str, source: str | None = None) -> Function:
        """A stand-in for a function that was not stored (loaded from JSON)."""
        self = cls.__new__(cls)
        self.func, self.func_name, self.source = None, func_name, source
        return self

    @property
    def name(self) -> str:
        return "sample_from"

    def problem(self) -> str | None:
        if self.func is not None and not callable(self.func):
            return f"sample_from func={self.func!r} must be callable"
        if self.func is not None and len(_params(self.func, required=True)) > 1:
            return f"sample_from func={self.func_name} must take one argument (spec) or none"
        return None

    def call(self, spec: Any) -> Any:
        """Run the function with `spec`, or with no argument if it takes none."""
        if self.func is None:
            raise SearchSpaceError(
                f"sample_from function {self.func_name} was loaded from JSON and cannot be "
                "run; pass the original space: space_from_json(data, original=space)"
            )
        return self.func(spec) if _params(self.func, required=False) else self.func()

    def sample(self, rng: random.Random) -> Any:
        """Run the function alone (use `resolve` to see the rest of a config)."""
        return resolve({"value": self}, rng)["value"]

    def args(self) -> dict[str, Any]:
        return {"name": self.func_name, "source": self.source}

    def __repr__(self) -> str:
        return f"sample_from({self.func_name})"


def _params(func: Callable[..., Any], *, required: bool) -> list[inspect.Parameter]:
    """The positional parameters of `func` (only those without default if `required`)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # no signature (some builtins): assume it takes spec
        return [] if required else [inspect.Parameter("spec", kinds[0])]
    if required:
        return [p for p in params if p.kind in kinds and p.default is p.empty]
    return [p for p in params if p.kind in kinds or p.kind is inspect.Parameter.VAR_POSITIONAL]


def uniform(lower: float, upper: float) -> Float:
    """A float drawn uniformly from ``[lower, upper)``."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """A multiple of `q` in ``[lower, upper]`` (both inclusive), each equally likely."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float drawn uniformly in log space from ``[lower, upper)``; lower must be > 0."""
    return Float(lower, upper, log=True, base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """A log-uniform float rounded to a multiple of `q` inside ``[lower, upper]``."""
    return Float(lower, upper, log=True, base=base, q=q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A float drawn from a normal distribution."""
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """A normal float rounded to a multiple of `q`."""
    return Normal(mean, sd, q=q)


def randint(lower: int, upper: int) -> Integer:
    """An int in ``[lower, upper)`` (upper exclusive, like Ray and `range`)."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of `q` in ``[lower, upper]`` (upper inclusive, like Ray)."""
    return Integer(lower, upper, q=q, include_upper=True)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """A log-uniform int in ``[lower, upper)`` (upper exclusive); lower must be > 0."""
    return Integer(lower, upper, log=True, base=base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """A log-uniform multiple of `q` in ``[lower, upper]`` (upper inclusive)."""
    return Integer(lower, upper, log=True, base=base, q=q, include_upper=True)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of `categories`, equally likely; a category may be a dict of domains."""
    return Categorical(categories)


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed by ``func(spec)``, e.g. ``sample_from(lambda spec: spec.config.lr * 2)``."""
    return Function(func)


def grid_search(values: Iterable[Any]) -> dict[str, list[Any]]:
    """Try every one of `values`; returns ``{"grid_search": [...]}`` like Ray."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise SearchSpaceError(f"grid_search values={values!r} must be a list")
    listed = list(values)
    if not listed:
        raise SearchSpaceError("grid_search values=[] must not be empty")
    return {GRID_KEY: listed}


# ---------------------------------------------------------------- walking a space


def _is_grid(node: object) -> bool:
    return isinstance(node, dict) and GRID_KEY in node


def validate_space(space: Any, *, root: str = "param_space") -> None:
    """Check a whole (nested) space before anything runs.

    Raises:
        SearchSpaceError: naming the key path, the value and the rule, e.g.
            ``param_space["model"]["lr"]: loguniform lower=0.0 must be > 0 (log scale)``.
    """
    _validate(space, (), None, root)


def _validate(node: Any, path: tuple[object, ...], inside: str | None, root: str) -> None:
    where = format_path(path, root)
    if isinstance(node, Domain):
        if (bad := node.problem()) is not None:
            raise SearchSpaceError(f"{where}: {bad}")
        if isinstance(node, Categorical):
            for i, category in enumerate(node.categories):
                _validate(category, (*path, _Category(i)), "a choice category", root)
    elif _is_grid(node):
        values = node[GRID_KEY]
        if inside is not None:
            raise SearchSpaceError(f"{where}: grid_search inside {inside} is not supported")
        if len(node) != 1:
            others = sorted(str(k) for k in node if k != GRID_KEY)
            raise SearchSpaceError(f"{where}: a grid_search dict must have no other keys: {others}")
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
            raise SearchSpaceError(f"{where}: grid_search values={values!r} must be a list")
        if not values:
            raise SearchSpaceError(f"{where}: grid_search values=[] must not be empty")
        for i, value in enumerate(values):
            _validate(value, (*path, GRID_KEY, i), "a grid_search value", root)
    elif isinstance(node, dict):
        for key, value in node.items():
            _validate(value, (*path, key), inside, root)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _validate(value, (*path, i), inside, root)


def has_domains(space: Any) -> bool:
    """True if `space` contains any domain or grid_search (at any depth)."""
    if isinstance(space, Domain) or _is_grid(space):
        return True
    if isinstance(space, dict):
        return any(has_domains(v) for v in space.values())
    if isinstance(space, (list, tuple)):
        return any(has_domains(v) for v in space)
    return False


def _path_order(path: Path) -> tuple[tuple[int, str | int], ...]:
    return tuple((0, k) if isinstance(k, int) else (1, str(k)) for k in path)


def grid_axes(space: Any) -> list[tuple[Path, list[Any]]]:
    """The grid_search entries of `space` as ``(path, values)``, sorted by path like Ray."""
    axes: list[tuple[Path, list[Any]]] = []

    def collect(node: Any, path: Path) -> None:
        if _is_grid(node):
            axes.append((path, list(node[GRID_KEY])))
        elif isinstance(node, dict):
            for key, value in node.items():
                collect(value, (*path, key))
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                collect(value, (*path, i))

    collect(space, ())
    return sorted(axes, key=lambda axis: _path_order(axis[0]))


def grid_size(space: Any) -> int:
    """The number of grid points (1 when there is no grid_search)."""
    return math.prod(len(values) for _, values in grid_axes(space))


def grid_point(space: Any, index: int) -> dict[Path, Any]:
    """The `index`-th grid point (the first path varies fastest, as in Ray)."""
    point: dict[Path, Any] = {}
    for path, values in grid_axes(space):
        index, i = divmod(index, len(values))
        point[path] = values[i]
    return point


def grid_points(space: Any) -> list[dict[Path, Any]]:
    """Every combination of grid_search values, as ``{path: value}``, in Ray's order."""
    axes = grid_axes(space)
    combos = itertools.product(*(values for _, values in reversed(axes)))
    return [{path: v for (path, _), v in zip(axes, reversed(c), strict=True)} for c in combos]


def flatten(config: Mapping[str, Any], delimiter: str = "/") -> dict[str, Any]:
    """Flatten nested dicts to ``{"a/b": value}`` (Ray's `flatten_dict`); lists stay whole."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            for sub, sub_value in flatten(value, delimiter).items():
                out[f"{key}{delimiter}{sub}"] = sub_value
        else:
            out[str(key)] = value
    return out


# ---------------------------------------------------------------- resolving


class _Pending:
    """A sample_from value not computed yet."""

    def __init__(self, domain: Function, path: Path) -> None:
        self.domain, self.path = domain, path
        self.done, self.value = False, None


class _TupleBuild(list[Any]):
    """A tuple under construction (it may hold pending values)."""


class _Spec:
    """What a sample_from function receives: ``spec.config`` and ``spec.rng``."""

    def __init__(self, config: _ConfigView, rng: random.Random) -> None:
        self.config, self.rng = config, rng

    def __getitem__(self, key: str) -> Any:
        if key == "config":
            return self.config
        raise KeyError(key)


class _ConfigView(Mapping[Any, Any]):
    """Read access to a config being resolved; pending values are computed on access."""

    def __init__(self, data: dict[Any, Any], path: Path, resolver: _Resolver) -> None:
        self._data, self._path, self._resolver = data, path, resolver

    def __getitem__(self, key: Any) -> Any:
        if key not in self._data:
            raise _MissingKeyError(self._resolver.missing((*self._path, key)))
        return self._resolver.wrap(self._data[key], (*self._path, key))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # private and dunder names are never config keys here
            raise AttributeError(name)
        return self[name]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"config view of {format_path(self._path, 'config')}"


class _Resolver:
    def __init__(self, tree: dict[str, Any], rng: random.Random, root: str) -> None:
        self.tree, self.rng, self.root = tree, rng, root
        self.stack: list[_Pending] = []

    def missing(self, path: Path) -> str:
        ref = format_path(path, "config")
        if not self.stack:
            return f"{ref} is not in the config"
        current = self.stack[-1]
        return (
            f"{format_path(current.path, self.root)}: sample_from function "
            f"{current.domain.func_name} refers to {ref}, which is not in the config"
        )

    def wrap(self, raw: Any, path: Path) -> Any:
        if isinstance(raw, _Pending):
            raw = self.value(raw)
        if isinstance(raw, dict):
            return _ConfigView(raw, path, self)
        return self.materialize(raw) if isinstance(raw, list) else raw

    def value(self, pending: _Pending) -> Any:
        if pending.done:
            return pending.value
        where = format_path(pending.path, self.root)
        if pending in self.stack:
            chain = [*self.stack[self.stack.index(pending) :], pending]
            cycle = " -> ".join(format_path(p.path, "config") for p in chain)
            raise SearchSpaceError(f"{where}: sample_from functions depend on each other: {cycle}")
        if pending.domain.func is None:
            raise SearchSpaceError(
                f"{where}: sample_from function {pending.domain.func_name} was loaded from JSON "
                "and cannot be run; pass the original space: space_from_json(data, original=space)"
            )
        self.stack.append(pending)
        try:
            raw = pending.domain.call(_Spec(_ConfigView(self.tree, (), self), self.rng))
        except _MissingKeyError as exc:
            # Plain SearchSpaceError from here on, so no outer `.get()` can swallow it.
            raise SearchSpaceError(str(exc)) from None
        except SearchSpaceError:
            raise
        except Exception as exc:
            name = pending.domain.func_name
            raise SearchSpaceError(
                f"{where}: sample_from function {name} raised {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            self.stack.pop()
        pending.value, pending.done = self.materialize(raw), True
        return pending.value

    def materialize(self, value: Any) -> Any:
        if isinstance(value, (_ConfigView, dict)):
            return {k: self.materialize(value[k]) for k in value}
        if isinstance(value, (_TupleBuild, tuple)):
            return tuple(self.materialize(v) for v in value)
        if isinstance(value, list):
            return [self.materialize(v) for v in value]
        if isinstance(value, _Pending):
            return self.value(value)
        return value


#: `resolve`'s hook for model-based searchers: ``(name, domain) -> value``. `name` is
#: the domain's key path, with "[i]" after a choice when inside its i-th category (so
#: each branch of a conditional space has its own names); for a `Categorical` it
#: returns one of ``domain.categories`` (a sub-space is then resolved in turn).
Chooser = Callable[[str, "Domain"], Any]


def parameter_name(path: Sequence[object]) -> str:
    """A flat, stable parameter name for a key path: ``"opt/[1]/lr"`` style."""
    return "/".join(f"[{k.index}]" if isinstance(k, _Category) else str(k) for k in path)


def resolve(
    space: Mapping[str, Any],
    rng: random.Random,
    grid_point: Mapping[Path, Any] | None = None,
    chooser: Chooser | None = None,
) -> dict[str, Any]:
    """A concrete config: every domain sampled, grid values applied, sample_from computed.

    Recurses into nested dicts, lists and tuples, and into the chosen category of a
    `choice` whose categories are sub-spaces. sample_from functions may refer to each
    other in any order; a cycle or a missing key raises `SearchSpaceError`.

    Args:
        space: the search space (a dict).
        rng: the only source of randomness (sample_from functions get it too).
        grid_point: ``{path: value}`` for every grid_search in `space` (see `grid_points`).
        chooser: when given, picks every domain's value instead of `rng` (a searcher's
            model: Optuna's define-by-run trial, say); see `Chooser`.
    """
    if not isinstance(space, Mapping):
        raise SearchSpaceError(f"param_space must be a dict, got {type(space).__name__}")
    pending: list[_Pending] = []
    used: set[Path] = set()

    def build(node: Any, path: Path, name: tuple[object, ...] = ()) -> Any:
        # `name`: `path` with the chosen category of each choice on the way
        if isinstance(node, Function):
            pending.append(_Pending(node, path))
            return pending[-1]
        if isinstance(node, Categorical):
            if chooser is None:
                return build(node.sample(rng), path, name)
            picked = chooser(parameter_name(name), node)
            index = _index_of(node.categories, picked)
            return build(node.categories[index], path, (*name, _Category(index)))
        if isinstance(node, Domain):
            return node.sample(rng) if chooser is None else chooser(parameter_name(name), node)
        if _is_grid(node):
            if grid_point is None or path not in grid_point:
                raise SearchSpaceError(
                    f"{format_path(path)}: no grid point value given for this grid_search "
                    "(resolve needs one of grid_points(space); grid_search is not supported "
                    "inside choice categories)"
                )
            used.add(path)
            return build(grid_point[path], path)
        if isinstance(node, dict):
            return {k: build(v, (*path, k), (*name, k)) for k, v in node.items()}
        if isinstance(node, tuple):
            return _TupleBuild(build(v, (*path, i), (*name, i)) for i, v in enumerate(node))
        if isinstance(node, list):
            return [build(v, (*path, i), (*name, i)) for i, v in enumerate(node)]
        return node

    tree = build(dict(space), ())
    unused = set(grid_point or ()) - used
    if unused:
        names = ", ".join(sorted(format_path(p) for p in unused))
        raise SearchSpaceError(f"grid point sets {names}, which is not a grid_search of the space")
    resolver = _Resolver(tree, rng, "param_space")
    for item in pending:
        resolver.value(item)
    result: dict[str, Any] = _freeze(tree)
    return result


def _index_of(categories: Sequence[Any], picked: Any) -> int:
    """The index of the category a chooser picked (identity first: sub-spaces are dicts)."""
    for i, category in enumerate(categories):
        if category is picked:
            return i
    for i, category in enumerate(categories):
        if type(category) is type(picked) and category == picked:
            return i
    raise SearchSpaceError(f"the chooser picked {picked!r}, which is not one of {categories!r}")


def _freeze(node: Any) -> Any:
    if isinstance(node, _Pending):
        return node.value
    if isinstance(node, dict):
        return {k: _freeze(v) for k, v in node.items()}
    if isinstance(node, _TupleBuild):
        return tuple(_freeze(v) for v in node)
    if isinstance(node, list):
        return [_freeze(v) for v in node]
    return node


# ---------------------------------------------------------------- JSON form


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


def space_from_json(data: Any, original: Any = None) -> Any:
    """Rebuild a space from `space_to_json` output.

    sample_from functions cannot be stored: each comes back as a placeholder that
    raises `SearchSpaceError` when sampled, unless `original` (the space the JSON was
    made from) holds a sample_from at the same path, which is then reused.
    """
    return _from_json(data, original, ())


def _child(original: Any, key: PathKey) -> Any:
    if isinstance(original, dict) and not isinstance(key, int):
        return original.get(key)
    if isinstance(original, (list, tuple)) and isinstance(key, int) and key < len(original):
        return original[key]
    return None


def _from_json(node: Any, original: Any, path: tuple[object, ...]) -> Any:
    if isinstance(node, (list, tuple)):
        return type(node)(
            _from_json(v, _child(original, i), (*path, i)) for i, v in enumerate(node)
        )
    if not isinstance(node, dict):
        return node
    kind = node.get(_MARKER)
    if kind is None:
        return {k: _from_json(v, _child(original, k), (*path, k)) for k, v in node.items()}
    if kind == "dict":
        return {k: _from_json(v, _child(original, k), (*path, k)) for k, v in node["value"].items()}
    try:
        return _domain_from_json(kind, node, original, path)
    except (KeyError, TypeError) as exc:
        raise SearchSpaceError(f"{format_path(path)}: malformed {kind} domain {node!r}") from exc
    except SearchSpaceError as exc:
        raise SearchSpaceError(f"{format_path(path)}: {exc}") from None


def _domain_from_json(kind: str, d: dict[str, Any], original: Any, path: tuple[object, ...]) -> Any:
    base = d.get("base") or 10
    if kind in ("uniform", "quniform", "loguniform", "qloguniform"):
        return Float(d["lower"], d["upper"], log="log" in kind, base=base, q=d.get("q"))
    if kind in ("randint", "qrandint", "lograndint", "qlograndint"):
        log, inclusive = "log" in kind, kind.startswith("q")
        return Integer(
            d["lower"], d["upper"], log=log, base=base, q=d["q"], include_upper=inclusive
        )
    if kind in ("randn", "qrandn"):
        return Normal(d["mean"], d["sd"], q=d.get("q"))
    if kind == "choice":
        cats = original.categories if isinstance(original, Categorical) else None
        items = enumerate(d["categories"])
        return Categorical(
            [_from_json(c, _child(cats, i), (*path, _Category(i))) for i, c in items]
        )
    if kind == "sample_from":
        if isinstance(original, Function) and original.func is not None:
            return original
        return Function.placeholder(str(d["name"]), d.get("source"))
    raise SearchSpaceError(f"unknown domain type {kind!r}")
