"""Reading a metric out of a result: one rule for the controller, stoppers and results.

A metric name is a key of the result, or a "/"-joined path into nested dicts
("val/loss" reads ``result["val"]["loss"]``), as in Ray Tune. Numbers are ints and
floats, never bools; an int too large for a float counts as an infinity.

Also the one rule for the shapes results take on their way: `flatten` (nested dicts
to "a/b" keys, for tables, files and command lines), `python_scalar` /
`python_scalars` (numpy and torch scalars as Python numbers) and `json_data`
(anything as JSON types). numpy and torch are never imported: they are duck-typed.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

#: TuneConfig.metric / mode: one objective, or a list of them (several objectives)
MetricSpec = str | list[str] | None
ModeSpec = str | list[str] | None

MISSING: Final = object()
"""What `lookup` returns for a key the result does not have."""


def lookup(result: Mapping[str, Any], key: str) -> Any:
    """``result[key]``, or the nested value for ``"a/b"``; `MISSING` when absent."""
    if key in result:
        return result[key]
    node: Any = result
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def as_number(value: Any) -> float | None:
    """The value as a float, or None when it is not an int or float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return math.inf if value > 0 else -math.inf


def metric_value(result: Mapping[str, Any], metric: str) -> float | None:
    """The numeric value of `metric` in one result, or None (missing or not a number)."""
    return as_number(lookup(result, metric))


def objectives(metric: MetricSpec, mode: ModeSpec) -> list[tuple[str, str]]:
    """The (metric, mode) pairs to optimise: none, one, or several (multi-objective).

    The arguments were validated already (`TuneConfig.validate`); a single mode with
    several metrics applies to all of them.
    """
    if metric is None:
        return []
    if isinstance(metric, str):
        return [(metric, mode if isinstance(mode, str) else "min")]
    modes = [mode] * len(metric) if isinstance(mode, str) or mode is None else list(mode)
    return [(m, d or "min") for m, d in zip(metric, modes, strict=True)]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Pareto dominance of "higher is better" vectors: a >= b everywhere, > somewhere."""
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(
        x > y for x, y in zip(a, b, strict=True)
    )


def non_dominated_sort(points: Sequence[Sequence[float]]) -> list[list[int]]:
    """Fronts of indices (front 0 = the Pareto front) of "higher is better" vectors.

    Deb's fast non-dominated sort, O(M n^2): fine for the thousands of points of a
    rung or a results table.
    """
    n = len(points)
    dominated_by: list[list[int]] = [[] for _ in range(n)]
    count = [0] * n
    for i in range(n):
        for j in range(i + 1, n):
            if dominates(points[i], points[j]):
                dominated_by[i].append(j)
                count[j] += 1
            elif dominates(points[j], points[i]):
                dominated_by[j].append(i)
                count[i] += 1
    fronts: list[list[int]] = []
    current = [i for i in range(n) if count[i] == 0]
    while current:
        fronts.append(current)
        following: list[int] = []
        for i in current:
            for j in dominated_by[i]:
                count[j] -= 1
                if count[j] == 0:
                    following.append(j)
        current = sorted(following)
    return fronts


def crowding_distance(points: Sequence[Sequence[float]], front: Sequence[int]) -> dict[int, float]:
    """NSGA-II's crowding distance of each index of one front (inf at the extremes)."""
    distance = dict.fromkeys(front, 0.0)
    if len(front) <= 2:
        return dict.fromkeys(front, math.inf)
    for k in range(len(points[front[0]])):
        ordered = sorted(front, key=lambda i: points[i][k])
        low, high = points[ordered[0]][k], points[ordered[-1]][k]
        distance[ordered[0]] = distance[ordered[-1]] = math.inf
        if high == low:
            continue
        for before, i, after in zip(ordered, ordered[1:], ordered[2:], strict=False):
            distance[i] += (points[after][k] - points[before][k]) / (high - low)
    return distance


def one_objective(owner: str, metric: MetricSpec, mode: ModeSpec) -> bool:
    """False when the experiment has several objectives; raise if `owner` needs one.

    For algorithms that optimise one metric: True means "take the experiment's".
    """
    if not isinstance(metric, list) and not isinstance(mode, list):
        return True
    raise ValueError(
        f"{owner} optimises one metric, but TuneConfig.metric={metric!r} has several: "
        f"give {owner} its own metric= and mode=, or use an algorithm for several "
        "objectives (see docs/search.md)"
    )


def fill_objective(
    owner: str, own_metric: str | None, own_mode: str | None, metric: MetricSpec, mode: ModeSpec
) -> tuple[str | None, str | None]:
    """An algorithm's (metric, mode) for one objective: its own, each one it lacks taken
    from the experiment's `metric` and `mode` (`one_objective` refuses several)."""
    if own_metric is not None and own_mode is not None:
        return own_metric, own_mode
    one_objective(owner, metric, mode)
    assert not isinstance(metric, list) and not isinstance(mode, list)
    return (
        metric if own_metric is None else own_metric,
        mode if own_mode is None else own_mode,
    )


def pareto_front(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated "higher is better" vectors, in their order.

    Sorted by the objectives (best first), a point can only be dominated by one
    before it, so only the front found so far is checked: O(n log n + n * front).
    """
    order = sorted(range(len(points)), key=lambda i: tuple(-v for v in points[i]))
    front: list[int] = []
    for i in order:
        # a dominator sorts first; one off the front is dominated by a front member
        if not any(dominates(points[j], points[i]) for j in front):
            front.append(i)
    return sorted(front)


def objective_point(
    result: Mapping[str, Any], pairs: Sequence[tuple[str, str]]
) -> list[float] | None:
    """The result's objectives as a "higher is better" vector; None unless all finite."""
    point = []
    for metric, mode in pairs:
        value = metric_value(result, metric)
        if value is None or not math.isfinite(value):
            return None
        point.append(value if mode == "max" else -value)
    return point


def is_feasible(result: Mapping[str, Any], constraints: Sequence[str]) -> bool:
    """True when every constraint value is reported, a number, and <= 0."""
    for name in constraints:
        value = metric_value(result, name)
        if value is None or not value <= 0:  # NaN is not feasible
            return False
    return True


def flatten(data: Mapping[Any, Any], delimiter: str = "/", *, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level: ``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` (Ray's `flatten_dict`).

    Keys become text joined with `delimiter`, each behind `prefix`. Lists stay whole
    and an empty dict stays a value (``{"a": {}}`` -> ``{"a": {}}``): no key is lost.

    Example:
        >>> flatten({"lr": 0.1, "model": {"width": 64, "act": {}}}, prefix="config/")
        {'config/lr': 0.1, 'config/model/width': 64, 'config/model/act': {}}
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = prefix + str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, delimiter, prefix=name + delimiter))
        else:
            out[name] = value
    return out


PLAIN_SCALARS: Final = frozenset({type(None), bool, int, float, str})
_MAX_DEPTH: Final = 64  # deeper than any config; a container that holds itself stops here


def python_scalar(value: Any) -> Any:
    """The Python value a numpy or torch scalar holds (a 0-dim array or tensor too).

    ``np.float32(0.5)`` -> ``0.5``, ``torch.tensor(3)`` -> ``3``; anything else,
    arrays included, as it is.
    """
    if type(value) in PLAIN_SCALARS:
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return item()
    return value


def python_scalars(tree: Any) -> Any:
    """A copy of `tree` with `python_scalar` applied inside its dicts, lists and tuples.

    Keys, container types and everything else (arrays too) stay as they are; a dict is
    always a new dict, so the caller may add keys to it.
    """
    if type(tree) in PLAIN_SCALARS:
        return tree
    if isinstance(tree, dict):
        return {key: python_scalars(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [python_scalars(value) for value in tree]
    if isinstance(tree, tuple):
        items = [python_scalars(value) for value in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    return python_scalar(tree)


def json_data(value: Any, _depth: int = 0) -> Any:
    """`value` made only of JSON types (dict with text keys, list, str, int, float, bool,
    None); never raises.

    numpy and torch scalars become Python numbers, arrays and tensors lists, an enum
    its value, a set a sorted list, a tuple a list; anything else its ``str()``. NaN and
    the infinities stay floats (`json.dumps` writes them as ``NaN`` / ``Infinity``).
    """
    if type(value) in PLAIN_SCALARS:
        return value
    if _depth > _MAX_DEPTH:
        return _text(value)
    deeper = _depth + 1
    if isinstance(value, Mapping):
        return {_text(k): json_data(v, deeper) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_data(v, deeper) for v in value]
    if isinstance(value, (set, frozenset)):
        return [json_data(v, deeper) for v in sorted(value, key=_text)]
    if isinstance(value, enum.Enum):
        return json_data(value.value, deeper)
    try:
        if callable(getattr(value, "item", None)) and getattr(value, "ndim", None) == 0:
            return json_data(value.item(), deeper)
        if callable(getattr(value, "tolist", None)):
            return json_data(value.tolist(), deeper)
    except Exception:  # an array-like that cannot convert (e.g. a tensor with no data)
        pass
    for kind in (bool, int, float, str):  # subclasses of the JSON types, as the type
        if isinstance(value, kind):
            return kind(value)
    return _text(value)


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
