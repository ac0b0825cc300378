"""ZOOpt's ASRacos as a searcher (Ray Tune's `ZOOptSearch`).

ZOOpt's `SRacosTune` is ZOOpt's own ask-and-tell form of sequential RACOS: it
suggests a first batch (its "train size", 4 to 22 points by budget), waits until
they have all finished (`suggest` returns None), then samples from a region it
learns from the best points, with up to `parallel_num` trials at once.

A tunefleet space becomes a `Dimension2` in index form (`_ask_tell.Param`): a
float a continuous dimension (over its logarithm when log-scaled), an int or a
quantized float the index of its multiple as an ordered discrete dimension (a
log-scaled one continuous over the log, rounded), a choice a grid of category
indices. ZOOpt draws from the global `random` and NumPy generators, which each
call seeds from (seed, call number); a restore replays the asks and tells.
"""

from __future__ import annotations

import math
from typing import Any

from tunefleet.search._ask_tell import AskTellSearcher, Param
from tunefleet.search._base import FINISHED

_ALGOS = ("asracos", "sracos")
_PRECISION = 1e-10  # of a continuous dimension (ZOOpt rounds to it)
_RETRIES = 10  # new regions tried before taking ZOOpt's "FINISHED" (space explored)


class ZOOptSearch(AskTellSearcher):
    """Sequential RACOS search with ZOOpt (Ray Tune's `ZOOptSearch`).

    Args:
        algo: "asracos" (or "sracos"; the same algorithm here, as in Ray).
        budget: the number of trials ZOOpt plans for (it sizes ZOOpt's first batch);
            at least 3. None: the experiment's `num_samples`.
        dim_dict: ZOOpt's own space, ``{"x": (ValueType.CONTINUOUS, [0, 1], 1e-2),
            "k": (ValueType.DISCRETE, [0, 10], True), "c": (ValueType.GRID, [...])}``;
            the Tuner's `param_space` then holds only constants. None: use
            `param_space` (tunefleet domains).
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first, in ZOOpt's first batch (at most its
            size); values left out are drawn at random.
        parallel_num: the most trials ZOOpt has running once its first batch is done.
        seed: the seed of every random choice (tunefleet's addition; None: a fresh
            one, kept in the state).
        **kwargs: passed to ``zoopt.Parameter`` (e.g. ``exploration_rate``).

    Example:
        >>> import tunefleet as tune
        >>> search = ZOOptSearch(budget=20, metric="loss", mode="min")
        >>> search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> 0 <= search.suggest("t1")["x"] <= 1
        True
    """

    owner = "ZOOptSearch"
    modules = ("zoopt",)
    extra = "zoopt"
    needs = "the zoopt package"

    def __init__(
        self,
        algo: str = "asracos",
        budget: int | None = None,
        dim_dict: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        parallel_num: int = 1,
        *,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(algo, str) or algo.lower() not in _ALGOS:
            raise ValueError(f"ZOOptSearch: algo={algo!r} is not one of {_ALGOS}")
        for name, value in (("budget", budget), ("parallel_num", parallel_num)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"ZOOptSearch: {name}={value!r} must be an int")
        if budget is not None and budget < 3:
            raise ValueError(f"ZOOptSearch: budget={budget!r} must be >= 3 (ZOOpt's minimum)")
        if parallel_num < 1:
            raise ValueError(f"ZOOptSearch: parallel_num={parallel_num!r} must be >= 1")
        if dim_dict is not None and not isinstance(dim_dict, dict):
            raise TypeError(f"ZOOptSearch: dim_dict must be a dict, not {type(dim_dict).__name__}")
        super().__init__(
            dim_dict, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate, seed=seed
        )
        if "seed" in kwargs:
            raise ValueError("ZOOptSearch: give seed= as the searcher's argument")
        self.budget, self.parallel_num, self._kwargs = budget, parallel_num, kwargs
        self._names: list[str] = []
        self._opt: Any = None

    def _is_native(self, space: Any) -> bool:
        # the searcher's own dim_dict holds ZOOpt tuples, never tunefleet domains
        return space is self._own_space and space is not None

    def _start(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from zoopt.algos.opt_algorithms.racos.sracos import SRacosTune

        zoopt = self._lib
        budget = self.budget or self._num_samples
        if budget is None:
            raise ValueError(
                "ZOOptSearch needs a budget: pass budget=... (usually num_samples), or "
                "set TuneConfig(num_samples=...)"
            )
        if budget < 3:
            raise ValueError(f"ZOOptSearch: budget={budget!r} must be >= 3 (ZOOpt's minimum)")
        if self._native:
            self._names = list(self._space)
            dims = [tuple(self._space[name]) for name in self._names]
        else:
            self._names = [p.name for p in self._free]
            dims = [self._dimension(p) for p in self._free]
        samples = [zoopt.Solution(x=self._x(values)) for values in points]
        parameter = zoopt.Parameter(budget=budget, init_samples=samples or None, **self._kwargs)
        if len(samples) > parameter.get_train_size():
            raise ValueError(
                f"ZOOptSearch: {len(samples)} points_to_evaluate do not fit ZOOpt's first "
                f"batch of {parameter.get_train_size()} (budget={budget}); give fewer"
            )
        self._opt = SRacosTune(
            dimension=zoopt.Dimension2(dims), parameter=parameter, parallel_num=self.parallel_num
        )
        return []  # the points are ZOOpt's init samples

    def _dimension(self, param: Param) -> tuple[Any, ...]:
        types = self._lib.ValueType
        if param.kind == "cat":
            return (types.GRID, list(range(int(param.high) + 1)))
        if param.log:
            high = param.high if param.kind == "float" else param.high + 1
            return (types.CONTINUOUS, [math.log(param.low), math.log(high)], _PRECISION)
        if param.kind == "float":
            return (types.CONTINUOUS, [param.low, param.high], _PRECISION)
        return (types.DISCRETE, [int(param.low), int(param.high)], True)

    def _x(self, values: dict[str, Any]) -> list[Any]:
        if self._native:
            return [values[name] for name in self._names]
        x = []
        for name in self._names:
            param, value = self._params[name], values[name]
            if param.log:
                x.append(math.log(value + 0.5 if param.kind == "int" else value))
            else:
                x.append(value)
        return x

    def _values(self, x: list[Any]) -> dict[str, Any]:
        if self._native:
            return dict(zip(self._names, x, strict=True))
        values = {}
        for name, coordinate in zip(self._names, x, strict=True):
            param = self._params[name]
            if param.log and param.kind == "int":
                values[name] = param.clean(math.floor(math.exp(coordinate)))
            elif param.log:
                values[name] = param.clean(math.exp(coordinate))
            else:
                values[name] = param.clean(coordinate)
        return values

    def _ask(self) -> tuple[dict[str, Any], Any] | str | None:
        solution = self._opt.suggest()
        opt = self._opt
        if solution is None and opt.complete_num >= opt._parameter.get_train_size():
            # SRacosTune closes its first batch with one None, and opens the next one
            # only in the tell that finishes the batch: here that tell came first
            opt.semaphore = 1
            solution = opt.suggest()
        for _ in range(_RETRIES):
            if solution != "FINISHED":
                break
            # no new point in the region of this draw of the uncertain dimensions
            solution = opt.suggest()
        if solution is None or isinstance(solution, str):
            return None if solution is None else FINISHED
        return self._values(solution.get_x()), solution

    def _tell(self, handle: Any, loss: float | None, result: dict[str, Any] | None) -> None:
        # ZOOpt waits for every trial it suggested: a failed one is told as the worst
        self._opt.complete(handle, math.inf if loss is None else loss)

    def _attach(self, values: dict[str, Any]) -> Any:
        return self._lib.Solution(x=self._x(values))
