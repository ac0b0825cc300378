"""Quasi-random search: a scrambled Sobol' or Halton sequence mapped onto the space.

A low-discrepancy sequence fills the unit cube more evenly than independent random
points, so a few dozen trials cover a space better than random search (no gaps,
no clumps). Each parameter of the space gets one dimension of the sequence, and
its coordinate ``u`` in [0, 1) becomes a value through the domain's inverse CDF:
the domain's own `sample` is given a generator whose one draw is ``u`` (so
``uniform(a, b)`` gives ``a + u (b - a)``, a quantized or integer domain and a
choice take one of their equal-width bins, a normal one the normal inverse CDF of
``u``), which keeps the domain's rounding, bounds and types exactly.
"""

from __future__ import annotations

import random
import statistics
import warnings
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec
from tunefleet.search._base import SpaceSearcher
from tunefleet.search._shared import (
    check_points,
    check_state_version,
    effective_space,
    import_optional,
    parameters,
    point_spaces,
)
from tunefleet.space import Domain, resolve

_STATE_VERSION = 1
_TYPES = ("sobol", "halton")
_NORMAL = statistics.NormalDist()


class QMCSearch(SpaceSearcher):
    """Quasi-Monte Carlo search: configs from a Sobol' or Halton sequence (SciPy).

    Needs no metric (like random search). Every parameter gets its own dimension,
    the parameters of every branch of a conditional choice included (they are all
    allocated up front; those of the branches not chosen are drawn and unused), so
    the sequence of configs depends only on the space and the seed.

    Args:
        space: the search space, if not given as the Tuner's ``param_space``.
        metric, mode: accepted for Ray compatibility; not used.
        qmc_type: "sobol" (scrambled Sobol', best with a power of 2 of samples) or
            "halton".
        scramble: randomise the sequence (Owen scrambling for Sobol', permutations
            for Halton); False gives the plain deterministic sequence.
        seed: the scrambling seed (an int >= 0); None draws one (kept in the state).
        points_to_evaluate: configs to run first (each may set only some keys; the
            rest is drawn at random).

    Example:
        >>> from tunefleet import space as tune
        >>> qmc = QMCSearch(seed=0)
        >>> qmc.set_search_properties("loss", "min", {"x": tune.uniform(0, 1)})
        True
        >>> sorted(round(qmc.suggest(str(i))["x"] * 4 - 0.5) for i in range(4))  # one per quarter
        [0, 1, 2, 3]
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        *,
        metric: str | None = None,
        mode: str | None = None,
        qmc_type: str = "sobol",
        scramble: bool = True,
        seed: int | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
    ) -> None:
        stats = import_optional("scipy.stats", owner="QMCSearch", extra="qmc", needs="SciPy")
        super().__init__(metric=metric, mode=mode)
        if qmc_type not in _TYPES:
            raise ValueError(f"QMCSearch: qmc_type={qmc_type!r} must be one of {_TYPES}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"QMCSearch: seed={seed!r} must be an int >= 0 or None")
        self._qmc = stats.qmc
        self.qmc_type = qmc_type
        self.scramble = bool(scramble)
        self._seed = random.Random().getrandbits(63) if seed is None else seed
        self._own_space = space
        self._points = check_points("QMCSearch", points_to_evaluate)
        self._space: dict[str, Any] | None = None
        self._point_spaces: list[dict[str, Any]] = []
        self._dims: dict[str, int] = {}
        self._engine: Any = None  # built on first use, fast-forwarded past `_drawn`
        self._drawn = 0
        self._points_done = 0

    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Receive the search space (any metric, several included, is accepted)."""
        if not isinstance(metric, list) and not isinstance(mode, list):
            self._fill_objective(metric, mode, strict=True)
        space = effective_space("QMCSearch", self._own_space, config)
        names = parameters("QMCSearch", space)
        self._space = space
        self._dims = {name: i for i, (name, _, _) in enumerate(names)}
        self._point_spaces = point_spaces(space, self._points)
        self._engine = None
        self._took(space)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next point of `points_to_evaluate`, else of the sequence."""
        self._ready()
        assert self._space is not None
        if self._points_done < len(self._point_spaces):
            i = self._points_done
            self._points_done += 1
            return resolve(self._point_spaces[i], random.Random(f"{self._seed}:point:{i}"))
        unit = self._next_point()

        def choose(name: str, domain: Domain) -> Any:
            if name not in self._dims:  # parameters() names every domain as resolve does
                raise RuntimeError(f"QMCSearch: no dimension for parameter {name!r}")
            return domain.sample(_UnitDraw(float(unit[self._dims[name]])))

        # sample_from functions get a generator of their own (spec.rng)
        rng = random.Random(f"{self._seed}:sample:{self._drawn - 1}")
        return resolve(self._space, rng, chooser=choose)

    def _next_point(self) -> Any:
        if self._engine is None:
            d = max(1, len(self._dims))
            kind = self._qmc.Sobol if self.qmc_type == "sobol" else self._qmc.Halton
            self._engine = kind(d, scramble=self.scramble, seed=self._seed)
            if self._drawn:
                self._engine.fast_forward(self._drawn)
        with warnings.catch_warnings():
            # Sobol' warns when the count drawn is not a power of 2 (balance is best then)
            warnings.filterwarnings("ignore", message=".*balance properties.*")
            point = self._engine.random(1)[0]
        self._drawn += 1
        return point

    def get_state(self) -> dict[str, Any]:
        """The seed and how many points were drawn: the sequence is regenerated."""
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "drawn": self._drawn,
            "points_done": self._points_done,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue the sequence where the searcher that gave `state` stopped."""
        check_state_version("QMCSearch", state, _STATE_VERSION)
        self._seed = int(state["seed"])
        self._drawn = int(state["drawn"])
        self._points_done = int(state["points_done"])
        self._engine = None


class _UnitDraw(random.Random):
    """A generator whose single draw is the given coordinate ``u`` in [0, 1).

    Every `Domain.sample` draws from its generator exactly once, so handing it this
    one applies the domain's inverse CDF to ``u``, with the domain's own rounding.
    """

    def __init__(self, u: float) -> None:
        super().__init__(0)
        self._u = min(max(u, 0.0), 1.0 - 2.0**-53)
        self._used = False

    def _take(self) -> float:
        if self._used:
            raise RuntimeError("QMCSearch: a domain drew more than one number")
        self._used = True
        return self._u

    def random(self) -> float:
        return self._take()

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self._take()

    def randint(self, a: int, b: int) -> int:
        return a + min(int(self._take() * (b - a + 1)), b - a)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        low, high = (0, start) if stop is None else (start, stop)
        n = len(range(low, high, step))
        return low + step * min(int(self._take() * n), n - 1)

    def normalvariate(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        u = min(max(self._take(), 2.0**-53), 1.0 - 2.0**-53)  # inv_cdf(0) is -inf
        return mu + sigma * _NORMAL.inv_cdf(u)
