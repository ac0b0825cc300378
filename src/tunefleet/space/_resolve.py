"""Operations over a whole search space: validation, grid expansion and resolution.

`validate_space` checks a nested space before anything runs, the `grid_*` functions
expand its grid_search entries in Ray's order, and `resolve` turns it into one
concrete config (sampling every domain and running sample_from functions in
dependency order). `sample_from`'s domain, `Function`, lives here too: sampling it
is resolution. `tunefleet.space` re-exports every public name; import them from there.

Example:
    >>> import random
    >>> from tunefleet.space import loguniform
    >>> space = {"lr": loguniform(1e-4, 1e-1), "wd": sample_from(lambda s: s.config.lr / 10)}
    >>> config = resolve(space, random.Random(0))
    >>> abs(config["wd"] - config["lr"] / 10) < 1e-12
    True
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tunefleet.space._domains import (
    GRID_KEY,
    Categorical,
    Domain,
    Path,
    _Category,
    _MissingKeyError,
    format_path,
)
from tunefleet.space._errors import RecursiveDependencyError, SearchSpaceError

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
            raise RecursiveDependencyError(
                f"{where}: `{pending.path[-1]}` recursively depends on itself: "
                f"sample_from functions depend on each other: {cycle}"
            )
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
                return build(node.draw(rng), path, name)
            picked = chooser(parameter_name(name), node)
            index = _index_of(node.categories, picked)
            return build(node.categories[index], path, (*name, _Category(index)))
        if isinstance(node, Domain):
            return node.draw(rng) if chooser is None else chooser(parameter_name(name), node)
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

    def is_function(self) -> bool:
        return True

    def draw(self, rng: random.Random) -> Any:
        """Run the function alone (use `resolve` to see the rest of a config)."""
        return resolve({"value": self}, rng)["value"]

    def _sample_for(self, config: Any, rng: random.Random, is_spec: bool) -> Any:
        # Ray's standalone form: `spec=` is what the function gets; a `config=` is tried
        # as the argument first, then as `spec.config` (both read by key or attribute).
        if config is None:
            return self.draw(rng)
        if self.func is None or not _params(self.func, required=False):
            return self.call(None)
        if is_spec:
            return self.call(_AttrView(config, rng))
        try:
            return self.call(_AttrView(config, rng))
        except (AttributeError, KeyError):
            return self.call(_AttrView({"config": config}, rng))

    def args(self) -> dict[str, Any]:
        return {"name": self.func_name, "source": self.source}

    def __repr__(self) -> str:
        return f"sample_from({self.func_name})"


class _AttrView(Mapping[Any, Any]):
    """A dict read by key or by attribute (``spec.config.lr``), nested; ``.rng`` too."""

    def __init__(self, data: Any, rng: random.Random) -> None:
        self._data, self._rng = data, rng

    def __getitem__(self, key: Any) -> Any:
        value = self._data[key]
        return _AttrView(value, self._rng) if isinstance(value, Mapping) else value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "rng" and "rng" not in self._data:
            return self._rng
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{name!r} is not in {dict(self._data)!r}") from None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


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


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed by ``func(spec)``, e.g. ``sample_from(lambda spec: spec.config.lr * 2)``."""
    return Function(func)
