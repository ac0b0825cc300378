"""ConcurrencyLimiter: at most `max_concurrent` trials of a searcher at once (Ray's)."""

from __future__ import annotations

from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec
from tunefleet.search._base import Searcher, WrappingSearcher
from tunefleet.search._shared import check_state_version

_STATE_VERSION = 1


class ConcurrencyLimiter(WrappingSearcher):
    """Wraps a searcher so that at most `max_concurrent` of its trials run at once.

    `suggest` returns None while `max_concurrent` trials it suggested are unfinished.
    With ``batch=True`` it suggests `max_concurrent` trials, then waits until all of
    them finished, and only then tells the wrapped searcher of their ends (in the
    order they ended) and suggests the next batch: the searcher updates its model
    once per batch.

    Args:
        searcher: the searcher to limit.
        max_concurrent: the most unfinished trials at once (a positive int).
        batch: wait for the whole batch before suggesting again.

    Example:
        >>> from tunefleet import space as tune
        >>> from tunefleet.search import BasicVariantGenerator
        >>> limited = ConcurrencyLimiter(BasicVariantGenerator(seed=0), max_concurrent=2)
        >>> limited.set_search_properties(None, None, {"x": tune.uniform(0, 1)}, num_samples=5)
        True
        >>> [limited.suggest(t) is None for t in ("a", "b", "c")]
        [False, False, True]
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(searcher, Searcher):
            raise TypeError(
                f"ConcurrencyLimiter: searcher={searcher!r} is not a tunefleet Searcher "
                "(see tunefleet.search)"
            )
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise TypeError(
                f"ConcurrencyLimiter: max_concurrent={max_concurrent!r} must be a positive int"
            )
        if max_concurrent < 1:
            raise ValueError(
                f"ConcurrencyLimiter: max_concurrent={max_concurrent!r} must be a positive int"
            )
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self.batch = bool(batch)
        self.self_limiting = searcher.self_limiting  # FINISHED passes through
        # a searcher that limits itself (set_max_concurrency True) gets every call
        self._limit = not searcher.set_max_concurrency(max_concurrent)
        self._live: list[str] = []  # suggested, not yet told to the searcher as ended
        self._ended: dict[str, tuple[dict[str, Any] | None, bool, bool]] = {}  # batch: held back

    def set_search_properties(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Passed on to the wrapped searcher."""
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The wrapped searcher's suggestion, or None while the limit is reached."""
        if not self._limit:
            return self.searcher.suggest(trial_id)
        if len(self._live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self._live.append(trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Passed on to the wrapped searcher."""
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Free the trial's slot (with `batch`: once every trial of the batch ended)."""
        self._end(trial_id, result, error, early=False)

    def on_trial_stopped_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Free the trial's slot as `on_trial_complete`; the wrapped searcher hears that
        it was stopped early."""
        self._end(trial_id, result, False, early=True)

    def _end(
        self, trial_id: str, result: dict[str, Any] | None, error: bool, *, early: bool
    ) -> None:
        if self._limit and trial_id in self._live and self.batch:
            self._ended[trial_id] = (result, error, early)
            if len(self._ended) < len(self._live):
                return
            ended, self._ended, self._live = self._ended, {}, []
            for tid, (res, err, stopped) in ended.items():
                self._tell(tid, res, err, stopped)
            return
        if self._limit and trial_id in self._live:
            self._live.remove(trial_id)
        self._tell(trial_id, result, error, early)  # else not counted (suggested before a restore)

    def _tell(self, trial_id: str, result: dict[str, Any] | None, error: bool, early: bool) -> None:
        if early:
            self.searcher.on_trial_stopped_early(trial_id, result)
        else:
            self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """A limiter inside another takes the outer one's limit (as in Ray)."""
        self.max_concurrent = max_concurrent
        self._limit = not self.searcher.set_max_concurrency(max_concurrent)
        return True

    def get_state(self) -> dict[str, Any]:
        """The live trials, the ends held back for the batch, the searcher's state."""
        return {
            "version": _STATE_VERSION,
            "max_concurrent": self.max_concurrent,
            "batch": self.batch,
            "live": list(self._live),
            "ended": [[tid, *ending] for tid, ending in self._ended.items()],
            "searcher": self.searcher.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned (the wrapped searcher's state included)."""
        check_state_version("ConcurrencyLimiter", state, _STATE_VERSION)
        # the saved limit and batch mode come back, as in Ray (its state is its attributes)
        self.max_concurrent = int(state.get("max_concurrent", self.max_concurrent))
        self.batch = bool(state.get("batch", self.batch))
        self._limit = not self.searcher.set_max_concurrency(self.max_concurrent)
        self._live = [str(t) for t in state["live"]]
        self._ended = {  # [tid, result, error] before stopped-early ends were told apart
            str(tid): (res, bool(err), bool(rest and rest[0]))
            for tid, res, err, *rest in state["ended"]
        }
        self.searcher.set_state(state["searcher"])
