"""Ranking rung entries by several objectives: NSGA-II's order, as MO-ASHA does.

MO-ASHA (Schmucker et al. 2021) ranks a rung by non-dominated sorting, then by
crowding distance inside each front (Deb et al. 2002). Vectors are "higher is
better" (`tunefleet._metrics.objective_point`). Deb's sort is O(M n^2), about 1.5 s
for a rung of 1,000 in Python, so the fronts are found as in ENS-BS (Zhang et al.
2015): in lexicographic order, each point joins the first front without a point
that dominates it (binary search: the fronts that dominate a point are a prefix).
With two objectives only a front's latest point needs checking, O(n log n); with
more, each point's dominators are a bit set (an int), so a check is one AND.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from tunefleet._metrics import crowding_distance

_MODES = ("min", "max")


def check_objectives(owner: str, metric: object, mode: object) -> list[tuple[str, str]]:
    """The (metric, mode) pairs of a list of metrics; a loud error when they do not fit.

    `mode` is one mode for every metric, or a list with one per metric.
    """
    if not isinstance(metric, (list, tuple)):
        raise ValueError(
            f"{owner}: mode={mode!r} is a list but metric={metric!r} is not: give a list "
            "of metrics of the same length for several objectives"
        )
    if not metric:
        raise ValueError(f"{owner}: metric=[] is not valid: give at least one name")
    for i, name in enumerate(metric):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{owner}: metric[{i}]={name!r} is not valid: it must be a name")
    if len(set(metric)) != len(metric):
        raise ValueError(f"{owner}: metric={metric!r} names a metric twice")
    if mode is None:
        raise ValueError(
            f"{owner}: metric={metric!r} needs mode= as well: one mode for all, or one per "
            "metric, e.g. mode=['min', 'max']"
        )
    modes = [mode] * len(metric) if isinstance(mode, str) else mode
    if not isinstance(modes, (list, tuple)) or len(modes) != len(metric):
        raise ValueError(
            f"{owner}: mode={mode!r} does not match metric={metric!r}: give one mode per "
            "metric, e.g. mode=['min', 'max']"
        )
    for i, m in enumerate(modes):
        if m not in _MODES:
            where = "mode" if isinstance(mode, str) else f"mode[{i}]"
            raise ValueError(f"{owner}: {where}={m!r} is not valid: it must be 'min' or 'max'")
    return [(str(name), str(m)) for name, m in zip(metric, modes, strict=True)]


def fronts(points: Sequence[Sequence[float]]) -> list[list[int]]:
    """The same fronts as `tunefleet._metrics.non_dominated_sort`, each sorted, faster."""
    # a point's dominators come before it in lexicographic order (best first)
    order = sorted(range(len(points)), key=lambda i: tuple(points[i]), reverse=True)
    if points and len(points[0]) == 2:
        return [sorted(front) for front in _fronts_of_two(points, order)]
    dominators = _dominators(points)
    members: list[list[int]] = []  # each front, in the order its points joined
    masks: list[int] = []  # the same as bit sets
    for i in order:
        low, high = 0, len(members)
        while low < high:
            mid = (low + high) // 2
            if dominators[i] & masks[mid]:
                low = mid + 1
            else:
                high = mid
        if low == len(members):
            members.append([])
            masks.append(0)
        members[low].append(i)
        masks[low] |= 1 << i
    return [sorted(front) for front in members]


def _fronts_of_two(points: Sequence[Sequence[float]], order: list[int]) -> list[list[int]]:
    """Two objectives: a front's latest point has its highest second objective, and a
    front dominates p when that is >= p's (unless it is p's twin): one bisect."""
    members: list[list[int]] = []
    latest: list[float] = []  # minus each front's latest second objective, ascending
    for i in order:
        p = points[i]
        front = bisect.bisect_right(latest, -p[1])
        if front and points[members[front - 1][-1]][0] == p[0] and latest[front - 1] == -p[1]:
            front -= 1  # equal points share a front (and come one after the other)
        if front == len(members):
            members.append([])
            latest.append(0.0)
        members[front].append(i)
        latest[front] = -p[1]
    return members


def _dominators(points: Sequence[Sequence[float]]) -> list[int]:
    """For each point, the bit set of the points that dominate it: O(M n^2 / 64)."""
    n = len(points)
    weakly = [-1] * n  # at least as good everywhere (the point itself included)
    for k in range(len(points[0]) if points else 0):
        order = sorted(range(n), key=lambda i: points[i][k], reverse=True)
        at_least, start = 0, 0
        while start < n:  # a group of equal values: each is "at least" the others
            end, value = start, points[order[start]][k]
            while end < n and points[order[end]][k] == value:
                at_least |= 1 << order[end]
                end += 1
            for i in order[start:end]:
                weakly[i] &= at_least
            start = end
    equal: dict[tuple[float, ...], int] = {}
    for i, p in enumerate(points):
        equal[tuple(p)] = equal.get(tuple(p), 0) | 1 << i
    return [w & ~equal[tuple(p)] for w, p in zip(weakly, points, strict=True)]


def nsga_keys(points: Sequence[Sequence[float]]) -> list[tuple[int, float]]:
    """Each point's (front, -crowding distance): the smaller, the better."""
    keys = [(0, 0.0)] * len(points)
    for rank, front in enumerate(fronts(points)):
        for i, distance in crowding_distance(points, front).items():
            # NaN only when a gap overflows (inf / inf): count it as the widest
            keys[i] = (rank, -distance if distance == distance else -math.inf)
    return keys


class ParetoRung:
    """One rung's objective vectors by trial (arrival order), ranked NSGA-II's way.

    The ranking is computed when asked and kept until the rung changes.
    """

    def __init__(self, points: Mapping[str, Sequence[float]] | None = None) -> None:
        self.points: dict[str, list[float]] = {i: list(p) for i, p in (points or {}).items()}
        self._keys: dict[str, tuple[int, float]] | None = None
        self._order: list[str] | None = None
        self._rank: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.points)

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self.points

    def record(self, trial_id: str, point: list[float]) -> None:
        """A rewritten trial keeps its place in the arrival order (as a dict does)."""
        self.points[trial_id] = point
        self._keys = self._order = None

    def discard(self, trial_id: str) -> None:
        if self.points.pop(trial_id, None) is not None:
            self._keys = self._order = None

    def keys(self) -> dict[str, tuple[int, float]]:
        if self._keys is None:
            self._keys = dict(zip(self.points, nsga_keys(list(self.points.values())), strict=True))
        return self._keys

    def ahead(self, trial_id: str) -> int:
        """How many trials rank strictly before `trial_id` (ties count in its favour)."""
        keys = self.keys()
        mine = keys[trial_id]
        return sum(1 for key in keys.values() if key < mine)

    def order(self) -> list[str]:
        """The trials best first; ties go to the earlier arrival."""
        if self._order is None:
            keys = self.keys()
            seq = {trial_id: n for n, trial_id in enumerate(keys)}
            self._order = sorted(keys, key=lambda i: (keys[i], seq[i]))
            self._rank = {trial_id: n for n, trial_id in enumerate(self._order)}
        return self._order

    def rank(self, trial_id: str) -> int:
        """The place of `trial_id` in `order()`, counted in O(n) when that is not kept."""
        if self._order is not None:
            return self._rank[trial_id]
        keys = self.keys()
        mine, before, place = keys[trial_id], True, 0
        for other, key in keys.items():  # arrival order
            if other == trial_id:
                before = False
            elif key < mine or (before and key == mine):
                place += 1
        return place
