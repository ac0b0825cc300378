"""Which results a trial waits at for the driver's decision: the scheduler's milestones.

A scheduler that decides only at some points of a trial's progress (ASHA's rungs and
`max_t`) names them (`TrialScheduler.decision_points`). The first result of an
attempt at or past each of them waits for the decision, so a trial the scheduler
stops there trains no further; the others report without waiting. The trial's
session and the controller each keep a `Crossing` per attempt and feed it the same
results in the same order, so they agree on which results wait.
"""

from __future__ import annotations

from typing import Any

DecisionPoints = tuple[str, tuple[float, ...]]  # (time_attr, ascending points)


class Crossing:
    """Tells, result by result, whether one reached a decision point not reached before.

    Example:
        >>> c = Crossing(("training_iteration", (1.0, 3.0, 9.0)))
        >>> [c.crossed({"training_iteration": i}) for i in range(1, 6)]
        [True, False, True, False, False]
    """

    __slots__ = ("_attr", "_next", "_points")

    def __init__(self, points: DecisionPoints | None) -> None:
        self._attr, self._points = points or ("", ())
        self._next = 0

    def crossed(self, result: dict[str, Any]) -> bool:
        if self._next >= len(self._points):
            return False
        t = result.get(self._attr)
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            return False
        crossed = False
        while self._next < len(self._points) and t >= self._points[self._next]:
            self._next += 1
            crossed = True
        return crossed
