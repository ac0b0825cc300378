"""What the searchers on ask-and-tell optimisers share (Nevergrad, HEBO, ZOOpt, Ax).

Each of those libraries asks for a point, is told its loss, and knows nothing of
tunefleet's spaces. `AskTellSearcher` does the rest once: the space becomes flat
parameters in index form (`Param`: a float as itself, an int or a quantized float as
the index k of its multiple k * q, a choice as the index of its category), a point
the library picks becomes a config through `resolve`, so values come back with exact
types, and points_to_evaluate are completed and encoded by `point_params`.

Every call into a library runs seeded from (seed, call number), with the global
generators of `random`, NumPy and torch saved and put back (`seeded`), so the
library draws the same numbers for the same calls. The state is the seed and a log
of the calls (each ask with the values it gave, each tell with its loss); `set_state`
replays the log into a fresh optimiser, which then stands where the saved one stood.
A library that has a state of its own as data (Ax), or whose asks are too costly to
replay (HEBO), overrides `_restore`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import sys
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value, python_scalar
from tunefleet._state_log import StateLog
from tunefleet.search._base import FINISHED, SpaceSearcher
from tunefleet.search._shared import (
    check_points,
    check_state_version,
    children,
    claim_name,
    grid_refused,
    import_optional,
    index_value,
    number_index,
    point_params,
    require_metric,
    split_space,
)
from tunefleet.space import (
    GRID_KEY,
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    format_path,
    parameter_name,
    resolve,
    validate_space,
)
from tunefleet.space._domains import _Category

logger = logging.getLogger("tunefleet.search")

_STATE_VERSION = 2  # 2: the log is a StateLog (saved by what it gained); 1 loads


@dataclass(frozen=True)
class Param:
    """One domain of the space in index form: `kind` "float" (the value), "int" (the
    index k of the multiple k * q) or "cat" (the index of the category), between
    `low` and `high` inclusive, `log`-scaled or not."""

    name: str
    domain: Domain
    path: tuple[Any, ...]
    kind: str
    low: float
    high: float
    log: bool

    @property
    def fixed(self) -> bool:
        """True when the domain has one value (no library takes an empty range)."""
        return self.low == self.high

    def clean(self, value: Any) -> float | int:
        """A library's number as this parameter's index: a float, or an int in bounds."""
        number = float(python_scalar(value))
        if self.kind == "float":
            return min(max(number, self.low), self.high)
        return int(min(max(round(number), self.low), self.high))


def index_params(owner: str, space: dict[str, Any]) -> dict[str, Param]:
    """Every domain of `space` as a `Param`, by the names `resolve`'s chooser uses (the
    parameters of each branch of a choice included); a domain with no bounds (randn)
    or a grid_search is refused with its key path."""
    found: dict[str, Param] = {}
    paths: dict[str, tuple[Any, ...]] = {}

    def walk(node: Any, path: tuple[Any, ...], name: tuple[Any, ...]) -> None:
        if isinstance(node, Function):
            return  # computed from the config by resolve
        if isinstance(node, dict) and GRID_KEY in node:
            raise grid_refused(owner, format_path(path))
        if not isinstance(node, Domain):
            for key, value in children(node):
                walk(value, (*path, key), (*name, key))
            return
        label = parameter_name(name)
        claim_name(owner, label, path, paths)
        if isinstance(node, Categorical):
            found[label] = Param(label, node, path, "cat", 0, len(node.categories) - 1, False)
            for i, category in enumerate(node.categories):
                walk(category, path, (*name, _Category(i)))
        elif isinstance(node, Float) and node.q is None:
            found[label] = Param(label, node, path, "float", node.lower, node.upper, node.log)
        elif isinstance(node, (Float, Integer)):
            k_lo, k_hi = node._multiples()
            found[label] = Param(label, node, path, "int", k_lo, k_hi, node.log)
        else:
            raise ValueError(
                f"{owner}: {format_path(path)} is {node!r}, which has no bounds: {owner} "
                "needs bounded parameters; use tune.uniform(...), or HyperOptSearch, which "
                "handles randn"
            )

    walk(space, (), ())
    return found


def unflatten(values: dict[str, Any]) -> dict[str, Any]:
    """``{"a/b": 1}`` as ``{"a": {"b": 1}}`` (a native space names nested keys so)."""
    config: dict[str, Any] = {}
    for key, value in values.items():
        *heads, last = key.split("/")
        node = config
        for head in heads:
            node = node.setdefault(head, {})
        node[last] = value
    return config


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """The global generators of `random`, NumPy and torch (when loaded) seeded with
    `seed`, and put back as they were afterwards."""
    import numpy as np

    saved_random, saved_numpy = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    with torch.random.fork_rng(devices=[]) if torch is not None else contextlib.nullcontext():
        if torch is not None:
            torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(saved_random)
            np.random.set_state(saved_numpy)


class AskTellSearcher(SpaceSearcher):
    """A searcher on an ask-and-tell optimiser (see the module's docstring).

    A subclass names its library (`owner`, `modules`, `extra`, `needs`) and gives
    `_start` (build the optimiser), `_ask`, `_tell` and `_attach` (a given point as
    a handle to tell); `_native` and `_native_values` when it takes the library's
    own space too. Values are ``{parameter: index}`` for a tunefleet space, the
    library's own values for a native one.
    """

    owner: ClassVar[str]
    modules: ClassVar[tuple[str, ...]]
    extra: ClassVar[str]
    needs: ClassVar[str]

    def __init__(
        self,
        space: Any = None,
        *,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self._own_space = space
        self._lib = import_optional(
            *self.modules, owner=self.owner, extra=self.extra, needs=self.needs
        )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"{self.owner}: seed={seed!r} must be an int or None")
        self._seed = (random.Random().getrandbits(32) if seed is None else seed) % 2**32
        self._points = check_points(self.owner, points_to_evaluate)
        self._space: Any = None  # a tunefleet space, or the library's own
        self._native = False
        self._constants: dict[str, Any] = {}  # the Tuner's param_space under an own space
        self._params: dict[str, Param] = {}  # tunefleet spaces: name -> parameter
        self._point_values: list[dict[str, Any]] = []
        self._queue: list[dict[str, Any]] = []  # values of points still to run
        self._live: dict[str, Any] = {}  # trial_id -> the library's handle
        # ["ask", trial_id, values|None] / ["tell", id, loss]: saved by what it gained
        self._log = StateLog()
        self._calls = 0
        self._num_samples: int | None = None

    # ------------------------------------------------------------------ setup

    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Take the metric, mode and search space (or check `param_space` holds only
        constants when the searcher was given its own `space`)."""
        self._fill_objective(metric, mode, strict=True)
        require_metric(self.owner, self.metric, self.mode)
        space, self._constants = split_space(self.owner, self._own_space, config)
        self._native = self._is_native(space)
        if not self._native:
            if not isinstance(space, dict):
                raise TypeError(f"{self.owner}: space must be a dict, not {type(space).__name__}")
            validate_space(space)
            self._params = index_params(self.owner, space)
            if all(p.fixed for p in self._params.values()):
                raise ValueError(
                    f"{self.owner}: the search space has no parameter to search (only "
                    "constants and sample_from); use the default BasicVariantGenerator"
                )
        self._space = space
        samples = spec.get("num_samples")
        self._num_samples = samples if isinstance(samples, int) and samples > 0 else None
        self._point_values = [
            self._values_of_point(point, f"points_to_evaluate[{i}]")
            for i, point in enumerate(self._points)
        ]
        self._reset()
        self._took(None if self._native else space)

    def _reset(self) -> None:
        self._live, self._log, self._calls = {}, StateLog(), 0
        self._queue = self._start([dict(v) for v in self._point_values])

    # ------------------------------------------------------------------ events

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next config: the next of `points_to_evaluate`, then the library's."""
        self._ready()
        if not self._may_ask():
            return None
        values = self._next(trial_id)
        self._log.append(["ask", trial_id, values])
        if not isinstance(values, dict):
            return None if values is None else FINISHED
        return self._config(trial_id, values)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell the library the trial's loss; a failed trial (or one with no metric)
        is told as failed, which each library takes in its own way."""
        if trial_id not in self._live:
            return
        value = None if error or result is None else metric_value(result, str(self.metric))
        loss = None
        if value is not None and math.isfinite(value):
            loss = float(value) if self.mode == "min" else -float(value)
        self._log.append(["tell", trial_id, loss])
        self._told(trial_id, loss, result)

    def _next(self, trial_id: str) -> dict[str, Any] | str | None:
        """Ask the library (or take the next point); the values, None or FINISHED."""
        with self._seeded():
            if self._queue:
                values: dict[str, Any] = self._queue.pop(0)
                handle = self._attach(values)
            else:
                got = self._ask()
                if not isinstance(got, tuple):
                    return got
                values, handle = got
        values = {str(k): python_scalar(v) for k, v in values.items()}
        self._live[trial_id] = handle
        return values

    def _told(self, trial_id: str, loss: float | None, result: dict[str, Any] | None) -> None:
        handle = self._live.pop(trial_id)
        with self._seeded():
            self._tell(handle, loss, result)

    def _seeded(self) -> contextlib.AbstractContextManager[None]:
        import numpy as np

        seed = int(np.random.SeedSequence([self._seed, self._calls]).generate_state(1)[0])
        self._calls += 1
        return seeded(seed)

    def _may_ask(self) -> bool:
        """False to make `suggest` wait (None) without asking the library."""
        return True

    # ------------------------------------------------------------------ state

    def get_state(self) -> dict[str, Any]:
        """The seed and the log of asks and tells (a StateLog: a save writes the events
        added since the last one), as JSON-able data."""
        self._ready()
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "log": self._log,
            "live": sorted(self._live),
            **self._extra_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore the optimiser of `state`: its next suggestions are the saved one's."""
        if state.get("version") != 1:  # the previous format (a plain list) loads too
            check_state_version(self.owner, state, _STATE_VERSION)
        self._ready()
        log = state.get("log")
        if not isinstance(log, list) or not all(isinstance(e, list) and len(e) == 3 for e in log):
            raise ValueError(
                f"{self.owner} state: log must be a list of [kind, trial_id, data] events"
            )
        self._seed = int(state["seed"])
        self._restore(state)
        # the store's StateLog itself, to go on appending to
        self._log = log if isinstance(log, StateLog) else StateLog(log)

    def _restore(self, state: dict[str, Any]) -> None:
        """Replay the log into a fresh optimiser (a value that replays differently is
        taken as logged: the library is told the config that really ran)."""
        self._reset()
        for kind, trial_id, data in state["log"]:
            if kind == "tell":
                if trial_id in self._live:
                    self._told(trial_id, data, None)
                continue
            values = self._next(trial_id)
            if values != data and isinstance(data, dict):
                logger.warning("%s: the replay asked %r, not %r", self.owner, values, data)
                with self._seeded():
                    self._live[trial_id] = self._attach(data)
        live = set(state["live"])
        self._live = {k: v for k, v in self._live.items() if k in live}

    def _extra_state(self) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------------ values

    def _config(self, trial_id: str, values: dict[str, Any]) -> dict[str, Any]:
        if self._native:
            return {**self._constants, **unflatten(self._native_values(values))}

        def chooser(name: str, domain: Domain) -> Any:
            param = self._params[name]
            index = param.low if param.fixed else param.clean(values[name])
            return index_value(domain, index)

        rng = random.Random(f"{self._seed}:{trial_id}")  # for sample_from functions
        return {**self._constants, **resolve(self._space, rng, chooser=chooser)}

    def _values_of_point(self, point: dict[str, Any], where: str) -> dict[str, Any]:
        """The library's values for a config of `points_to_evaluate`."""
        if self._native:
            return dict(point)
        rng = random.Random(f"{self._seed}:{where}")  # for values the point leaves out
        paths = {name: p.path for name, p in self._params.items()}

        def encode(name: str, domain: Domain, value: Any) -> tuple[Any, Any] | None:
            index = number_index(domain, self._params[name], value)
            if index is None or index_value(domain, index) != value:
                return None
            return index, value

        params = point_params(self._space, point, paths, rng, where, encode)
        return {k: v for k, v in params.items() if not self._params[k].fixed}

    def _native_values(self, values: dict[str, Any]) -> dict[str, Any]:
        return values

    def _is_native(self, space: Any) -> bool:
        return False

    @property
    def _free(self) -> list[Param]:
        """The parameters the library sees (one-valued ones are filled in here)."""
        return [p for p in self._params.values() if not p.fixed]

    # ------------------------------------------------------------------ the library

    @abstractmethod
    def _start(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Build a fresh optimiser; the points it leaves to `suggest` to run first."""

    @abstractmethod
    def _ask(self) -> tuple[dict[str, Any], Any] | str | None:
        """The library's next values and its handle for them; None to wait; FINISHED."""

    @abstractmethod
    def _tell(self, handle: Any, loss: float | None, result: dict[str, Any] | None) -> None:
        """Tell the library a loss (None: the trial failed)."""

    @abstractmethod
    def _attach(self, values: dict[str, Any]) -> Any:
        """A handle for given values (a point to evaluate), to tell later."""
