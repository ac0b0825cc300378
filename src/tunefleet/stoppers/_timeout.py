"""`TimeoutStopper`: ends the experiment after a budget of running time."""

from __future__ import annotations

import datetime
import numbers
import time
from collections.abc import Callable
from typing import Any

from tunefleet._redact import get_logger
from tunefleet.stoppers._base import Stopper, check_number, positive, state_field

logger = get_logger(__name__)


class TimeoutStopper(Stopper):
    """Stops the experiment after `timeout` of running time.

    The clock starts at the first call (a result or a `stop_all` check), not at
    construction. On resume the remaining budget carries over: time while the
    experiment was not running does not count, nor time the stopper spent pickled
    (as in Ray, unpickling restarts the clock at the next call).

    Args:
        timeout: seconds, or a `datetime.timedelta`.
        clock: returns the current time in seconds; injectable for tests. The
            default reads `time.monotonic` at each call, so a test that patches it
            (freezegun, ``unittest.mock``) moves this stopper's clock too.
    """

    def __init__(
        self,
        timeout: float | datetime.timedelta,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        check_number(
            "TimeoutStopper", "timeout", seconds, "a positive number of seconds", positive, timeout
        )
        self._timeout = float(seconds)
        self._budget = self._timeout
        self._clock = clock
        self._last_check: float | None = None

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._tick()
        return False

    def stop_all(self) -> bool:
        self._tick()
        if self._budget <= 0:
            logger.info("TimeoutStopper: %gs of running time reached", self._timeout)
            return True
        return False

    def _now(self) -> float:
        # looked up at each call: `time.monotonic` may be patched after import
        return self._clock() if self._clock is not None else time.monotonic()

    def _tick(self) -> None:
        now = self._now()
        if self._last_check is not None:
            self._budget -= max(0.0, now - self._last_check)
        self._last_check = now

    def get_state(self) -> dict[str, Any]:
        budget = self._budget
        if self._last_check is not None:
            budget -= max(0.0, self._now() - self._last_check)
        return {"budget_left": budget}

    def set_state(self, state: dict[str, Any]) -> None:
        self._budget = float(state_field(self, state, "budget_left", numbers.Real))
        self._last_check = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Time spent pickled (e.g. inside an experiment being restored) does not count.
        self.__dict__.update(state, _last_check=None)
