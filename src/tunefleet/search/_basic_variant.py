"""Random and grid search: Ray Tune's default `BasicVariantGenerator`.

The sequence of configs is: each of `points_to_evaluate` (expanded over any grid
the point leaves open), then ``num_samples - len(points_to_evaluate)`` samples,
each expanded over the whole grid. The configs of unit ``u`` (a point or a sample)
at grid index ``g`` are drawn from ``random.Random(f"{base_seed}:{u}:{g}")``, so
the sequence is reproducible and the state is a few numbers (it is saved after
every step, for resume).
"""

from __future__ import annotations

import random
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec
from tunefleet.search._base import FINISHED, Searcher
from tunefleet.search._shared import check_points, check_state_version, point_spaces
from tunefleet.space import grid_point, grid_size, resolve, validate_space
from tunefleet.space._sampling import as_rng

_STATE_VERSION = 2


class BasicVariantGenerator(Searcher):
    """Grid search and random search over a search space (Ray Tune's default).

    The total number of trials is ``num_samples x grid size`` (a point of
    `points_to_evaluate` counts as one of the samples, expanded over the grid
    values it does not set). With ``num_samples=-1`` it samples forever.

    Args:
        points_to_evaluate: configs to run first; each may set only some keys
            (nested dicts, or "a/b" keys), the rest is sampled from the space.
        max_concurrent: at most this many unfinished trials; 0 means no limit.
        constant_grid_search: keep the random values of a sample the same across
            all grid points (instead of drawing new ones for each grid point).
        random_state: an int seed (Ray's name), or a `random.Random` or numpy
            ``Generator`` / ``RandomState`` to draw one from. None draws it from numpy's
            global generator when numpy is loaded, as Ray's sampling does, so
            ``np.random.seed(1234)`` before a run repeats its configs.
        seed: the same as `random_state`.

    Example:
        >>> from tunefleet import space as tune
        >>> gen = BasicVariantGenerator(seed=0)
        >>> gen.set_search_properties(None, None, {"x": tune.grid_search([1, 2])}, num_samples=2)
        True
        >>> [gen.suggest(str(i))["x"] for i in range(4)], gen.suggest("4")
        ([1, 2, 1, 2], 'FINISHED')
    """

    self_limiting = True

    def __init__(
        self,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        max_concurrent: int = 0,
        constant_grid_search: bool = False,
        random_state: Any = None,
        *,
        seed: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise TypeError(f"max_concurrent={max_concurrent!r} must be an int (0: no limit)")
        if max_concurrent < 0:
            raise ValueError(f"max_concurrent={max_concurrent!r} must be >= 0 (0: no limit)")
        points = check_points("BasicVariantGenerator", points_to_evaluate)
        if random_state is not None and seed is not None and random_state != seed:
            raise ValueError(f"random_state={random_state!r} and seed={seed!r} disagree; pass one")
        self.points_to_evaluate = points
        self.max_concurrent = max_concurrent
        self.constant_grid_search = bool(constant_grid_search)
        self._base_seed = _make_rng(seed if seed is not None else random_state).getrandbits(64)
        self._space: dict[str, Any] | None = None
        self._unit_spaces: list[dict[str, Any]] = []
        self.num_samples = 1
        # Position in the sequence: unit (point or sample) and grid index within it.
        self._unit = 0
        self._grid_index = 0
        self._live: list[str] = []

    def set_search_properties(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Receive the search space and ``num_samples`` (default 1; -1: endless)."""
        if not isinstance(metric, list):  # random search needs no objective, or takes any
            super().set_search_properties(metric, mode, config, **spec)
        num_samples = spec.get("num_samples", 1)
        if isinstance(num_samples, bool) or not isinstance(num_samples, int):
            raise TypeError(f"num_samples={num_samples!r} must be an int")
        if num_samples < 1 and num_samples != -1:
            raise ValueError(f"num_samples={num_samples!r} must be >= 1, or -1 for no limit")
        if not isinstance(config, dict):
            raise TypeError(f"param_space must be a dict, not {type(config).__name__}")
        validate_space(config)
        unit_spaces = point_spaces(config, self.points_to_evaluate)
        self._space, self._unit_spaces, self.num_samples = config, unit_spaces, num_samples
        return True

    @property
    def total_samples(self) -> int | None:
        """How many configs this generator gives in all (None: endless or no space yet)."""
        if self._space is None or self.num_samples == -1:
            return None
        points = sum(grid_size(s) for s in self._unit_spaces)
        return points + self._num_sample_units() * grid_size(self._space)

    def _num_sample_units(self) -> int:
        return max(0, self.num_samples - len(self._unit_spaces))

    def is_finished(self) -> bool:
        """True when every config has been suggested."""
        if self.num_samples == -1:
            return False
        return self._unit >= len(self._unit_spaces) + self._num_sample_units()

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next config, None while `max_concurrent` trials run, or FINISHED."""
        if self._space is None:
            raise RuntimeError("set_search_properties() must be called before suggest()")
        if self.is_finished():
            return FINISHED
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        units = self._unit_spaces
        unit_space = units[self._unit] if self._unit < len(units) else self._space
        grid = "" if self.constant_grid_search else f":{self._grid_index}"
        rng = random.Random(f"{self._base_seed}:{self._unit}{grid}")
        config = resolve(unit_space, rng, grid_point(unit_space, self._grid_index))
        self._grid_index += 1
        if self._grid_index >= grid_size(unit_space):
            self._unit, self._grid_index = self._unit + 1, 0
        self._live.append(trial_id)
        return config

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Free the trial's slot under `max_concurrent`."""
        if trial_id in self._live:
            self._live.remove(trial_id)

    def get_state(self) -> dict[str, Any]:
        """JSON-able state: the base seed, the position, the live trials."""
        return {
            "version": _STATE_VERSION,
            "base_seed": self._base_seed,
            "unit": self._unit,
            "grid_index": self._grid_index,
            "live_trials": list(self._live),
            "num_samples": self.num_samples,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly where the generator that gave `state` stopped."""
        check_state_version("BasicVariantGenerator", state, _STATE_VERSION)
        self._base_seed = int(state["base_seed"])
        self._unit, self._grid_index = int(state["unit"]), int(state["grid_index"])
        self._live = [str(t) for t in state["live_trials"]]
        # num_samples stays as set_search_properties gave it: a budget may change on resume


def _make_rng(seed: Any) -> random.Random:
    """None: a seed from numpy's global generator when numpy is loaded, as Ray's draws
    (so ``np.random.seed(1234)`` before a run repeats it); also a numpy Generator."""
    if isinstance(seed, random.Random):
        return random.Random(seed.getrandbits(64))
    return as_rng(seed, "BasicVariantGenerator")
