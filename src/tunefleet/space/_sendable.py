"""Whether every value of a search space can be sent to the trials' worker processes.

A trial's config travels to its worker pickled with cloudpickle (as Ray sends it), so
functions and classes defined in a script reach it by value; an open file, a lock, a
socket or a process cannot. The space is checked once, before any trial starts, by
pickling each of its values the same way: the rule is the pickler's, not a list of types.
"""

from __future__ import annotations

from typing import Any

from tunefleet._metrics import PLAIN_SCALARS
from tunefleet.space._domains import GRID_KEY, Categorical, Domain, _Category, format_path
from tunefleet.space._errors import SearchSpaceError


def check_sendable(space: Any, *, root: str = "param_space") -> None:
    """Refuse a value of `space` that cannot be pickled for a worker (`cloudpickle`).

    Domains are not sent (their samples are), but a choice's categories and a
    grid_search's values are checked one by one.

    Raises:
        SearchSpaceError: (a ValueError) naming the key path, the type and what to do.
    """
    _check(space, (), root)


def _check(node: Any, path: tuple[object, ...], root: str) -> None:
    if isinstance(node, Categorical):
        for i, category in enumerate(node.categories):
            _check(category, (*path, _Category(i)), root)
    elif isinstance(node, Domain):
        return  # sampled on the driver; what it gives is checked as the trial starts
    elif isinstance(node, dict):
        for key, value in node.items():
            _check(value, (*path, key), root)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _check(value, (*path, i), root)
    else:
        problem = pickling_problem(node)
        if problem is not None:
            raise SearchSpaceError(_message(format_path(path, root), node, problem, path))


def is_plain(value: Any, depth: int = 0) -> bool:
    """Whether `value` holds only the builtin types of data (str, int, float, bool,
    None, in dicts, lists and tuples): then the plain pickler sends it as cloudpickle
    would, at a third of the cost, and it can always be sent."""
    kind = type(value)
    if kind in PLAIN_SCALARS:
        return True
    if depth > 32:
        return False
    if kind is dict:
        return all(type(k) in PLAIN_SCALARS and is_plain(v, depth + 1) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(is_plain(v, depth + 1) for v in value)
    return False


def pickling_problem(value: Any) -> str | None:
    """Why `value` cannot be pickled for a worker, or None if it can."""
    import cloudpickle

    try:
        cloudpickle.dumps(value)
    except Exception as exc:  # pickling raises TypeError, PicklingError, AttributeError...
        return f"{type(exc).__name__}: {exc}"
    return None


def _message(where: str, value: Any, problem: str, path: tuple[object, ...]) -> str:
    kind = type(value)
    key = next((str(k) for k in reversed(path) if isinstance(k, str) and k != GRID_KEY), "obj")
    arg = key if key.isidentifier() else "obj"
    return (
        f"{where}: a {kind.__module__}.{kind.__qualname__} value cannot be sent to the "
        f"trials' worker processes ({problem}). Pass large or unpicklable objects with "
        f"tune.with_parameters(train, {arg}=...) and take them as an argument of the "
        f"trainable (def train(config, {arg}): ...), or create them inside the trainable"
    )
