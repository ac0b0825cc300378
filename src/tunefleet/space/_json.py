"""Reading a search space back from its JSON form (`space_to_json`, in `_domains`).

Re-exported by `tunefleet.space`; import it from there.
"""

from __future__ import annotations

from typing import Any

from tunefleet.space._domains import (
    _MARKER,
    Categorical,
    Float,
    Integer,
    Normal,
    PathKey,
    _Category,
    format_path,
)
from tunefleet.space._errors import SearchSpaceError
from tunefleet.space._resolve import Function


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
