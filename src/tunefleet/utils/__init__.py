"""Ray Tune's ``ray.tune.utils`` names: dict helpers, and the example trainable Ray's
examples use (`tunefleet.utils.mock_trainable.MyTrainableClass`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunefleet._metrics import flatten

__all__ = ["flatten_dict", "unflatten_dict"]


def flatten_dict(
    dt: Mapping[Any, Any], delimiter: str = "/", prevent_delimiter: bool = False
) -> dict[str, Any]:
    """Nested dicts as one level, keys joined with `delimiter` (Ray's ``flatten_dict``).

    Args:
        dt: the nested dict.
        delimiter: what joins the keys.
        prevent_delimiter: raise if a key already holds `delimiter` (it could not be
            told apart after flattening).

    Example:
        >>> flatten_dict({"a": {"b": 1}, "c": 2})
        {'a/b': 1, 'c': 2}
    """
    if not isinstance(dt, Mapping):
        raise TypeError(f"flatten_dict: dt must be a dict, not {type(dt).__name__}")
    if prevent_delimiter:
        _check_keys(dt, delimiter, ())
    return flatten(dt, delimiter)


def unflatten_dict(dt: Mapping[str, Any], delimiter: str = "/") -> dict[str, Any]:
    """Undo `flatten_dict`: ``{"a/b": 1}`` -> ``{"a": {"b": 1}}``.

    Raises:
        ValueError: a key is both a value and a parent (``{"a": 1, "a/b": 2}``).
    """
    out: dict[str, Any] = {}
    for key, value in dt.items():
        parts = str(key).split(delimiter)
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = delimiter.join(parts[: depth + 1])
                raise ValueError(f"unflatten_dict: {where!r} is a value and a parent of {key!r}")
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise ValueError(f"unflatten_dict: {key!r} is a value and a parent of other keys")
        node[parts[-1]] = value
    return out


def _check_keys(dt: Mapping[Any, Any], delimiter: str, path: tuple[str, ...]) -> None:
    for key, value in dt.items():
        if delimiter in str(key):
            where = delimiter.join((*path, str(key)))
            raise ValueError(
                f"flatten_dict: key {where!r} holds the delimiter {delimiter!r} "
                "(prevent_delimiter=True)"
            )
        if isinstance(value, Mapping):
            _check_keys(value, delimiter, (*path, str(key)))
