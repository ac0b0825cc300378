"""HEBO (Heteroscedastic Evolutionary Bayesian Optimisation) as a searcher (Ray Tune's
`HEBOSearch`).

HEBO suggests a batch at a time: scrambled Sobol' points until it has ``1 + number
of parameters`` observations, then the Pareto front of a GP's acquisitions (MACE).
Like Ray, the searcher asks for `max_concurrent` suggestions at once, hands them
out one by one, and waits (None) while `max_concurrent` of its trials run.

A tunefleet space becomes a `DesignSpace` in index form (`_ask_tell.Param`): a
float ``num`` (``pow`` when log-scaled), an int or a quantized float the index of
its multiple as ``int`` (``pow_int``), a choice ``cat`` over category indices.

HEBO's model is refitted from its observations at each batch, so the state is the
observations, the batch not yet handed out and the count of Sobol' points drawn:
`set_state` observes them in a fresh HEBO and fast-forwards its Sobol' engine (no
batch is asked again). Each batch is seeded from (seed, call number).
"""

from __future__ import annotations

from typing import Any

from tunefleet.search._ask_tell import AskTellSearcher, Param
from tunefleet.search._shared import check_rewards


class HEBOSearch(AskTellSearcher):
    """Bayesian optimisation with HEBO (Ray Tune's `HEBOSearch`).

    Args:
        space: a search space for this searcher alone: tunefleet domains, or a HEBO
            ``DesignSpace``; the Tuner's `param_space` then holds only constants.
            None: use `param_space`.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first (nested dicts or "a/b" keys; values
            left out are drawn at random).
        evaluated_rewards: the metric values of `points_to_evaluate`, already known:
            those points are observed, not run.
        random_state_seed: the seed of every random choice (None: a fresh one, kept
            in the state).
        max_concurrent: the batch size, and the most trials running at once
            (`ConcurrencyLimiter` sets it through `set_max_concurrency`).
        **kwargs: passed to ``hebo.optimizers.hebo.HEBO`` (``model_name``,
            ``rand_sample``, ``model_config``, ...).

    Example:
        >>> import tunefleet as tune
        >>> search = HEBOSearch(metric="loss", mode="min", random_state_seed=0)
        >>> search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> 0 <= search.suggest("t1")["x"] <= 1
        True
    """

    owner = "HEBOSearch"
    modules = ("hebo", "pandas", "torch")
    extra = "hebo"
    needs = "the HEBO package (with pandas and torch)"

    def __init__(
        self,
        space: Any = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        evaluated_rewards: list[float] | None = None,
        random_state_seed: int | None = None,
        max_concurrent: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            space,
            metric=metric,
            mode=mode,
            points_to_evaluate=points_to_evaluate,
            seed=random_state_seed,
        )
        self._rewards = check_rewards("HEBOSearch", evaluated_rewards, len(self._points))
        self.max_concurrent = 8
        self.set_max_concurrency(max_concurrent)
        self._kwargs = kwargs
        self._classes = _import_hebo()
        self._opt: Any = None
        self._batch: list[dict[str, Any]] = []  # suggestions not handed out yet

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Set the batch size and the most trials at once (Ray's hook for
        `ConcurrencyLimiter`)."""
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise TypeError(f"HEBOSearch: max_concurrent={max_concurrent!r} must be an int")
        if max_concurrent < 1:
            raise ValueError(f"HEBOSearch: max_concurrent={max_concurrent!r} must be >= 1")
        self.max_concurrent = max_concurrent
        return True

    def _is_native(self, space: Any) -> bool:
        return isinstance(space, self._classes[1])

    def _start(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        hebo_class, design_space = self._classes
        if self._native:
            space = self._space
        else:
            space = design_space().parse([_design(p) for p in self._free])
        self._names = list(space.para_names)
        self._opt = hebo_class(space, scramble_seed=self._seed, **self._kwargs)
        self._batch = []
        if self._rewards is None:
            return points
        for values, reward in zip(points, self._rewards, strict=True):
            self._observe(values, float(reward) if self.mode == "min" else -float(reward))
        return []

    def _may_ask(self) -> bool:
        return len(self._live) < self.max_concurrent

    def _ask(self) -> tuple[dict[str, Any], Any]:
        if not self._batch:
            frame = self._opt.suggest(n_suggestions=self.max_concurrent)
            self._batch = [self._values(row) for row in frame.to_dict("records")]
        values = self._batch.pop(0)
        return values, values

    def _values(self, row: dict[str, Any]) -> dict[str, Any]:
        if self._native:
            return dict(row)
        return {name: self._params[name].clean(row[name]) for name in self._names}

    def _tell(self, handle: Any, loss: float | None, result: dict[str, Any] | None) -> None:
        if loss is not None:  # HEBO drops a non-finite observation itself
            self._observe(handle, loss)

    def _observe(self, values: dict[str, Any], loss: float) -> None:
        import numpy as np
        import pandas as pd

        self._opt.observe(pd.DataFrame([values])[self._names], np.array([[loss]]))

    def _attach(self, values: dict[str, Any]) -> Any:
        return values

    # ------------------------------------------------------------------ state

    def _extra_state(self) -> dict[str, Any]:
        return {"calls": self._calls, "batch": self._batch, "sobol": self._sobol_drawn()}

    def _restore(self, state: dict[str, Any]) -> None:
        """Observe the logged losses in a fresh HEBO; no batch is asked again."""
        self._reset()
        self._queue = self._queue[sum(1 for e in state["log"] if e[0] == "ask") :]
        asked: dict[str, Any] = {}
        for kind, trial_id, data in state["log"]:
            if kind == "ask" and isinstance(data, dict):
                asked[trial_id] = data
            elif kind == "tell" and data is not None and trial_id in asked:
                self._observe(asked[trial_id], float(data))
        self._live = {trial_id: asked[trial_id] for trial_id in state["live"]}
        self._batch = [dict(v) for v in state["batch"]]
        self._calls = int(state["calls"])
        if int(state["sobol"]):
            self._opt.sobol.fast_forward(int(state["sobol"]))

    def _sobol_drawn(self) -> int:
        return int(self._opt.sobol.num_generated)


def _design(param: Param) -> dict[str, Any]:
    """HEBO's description of one parameter in index form."""
    if param.kind == "cat":
        return {"name": param.name, "type": "cat", "categories": list(range(int(param.high) + 1))}
    if param.kind == "float":
        kind = "pow" if param.log else "num"
        return {"name": param.name, "type": kind, "lb": param.low, "ub": param.high}
    kind = "pow_int" if param.log else "int"
    return {"name": param.name, "type": kind, "lb": int(param.low), "ub": int(param.high)}


def _import_hebo() -> tuple[Any, Any]:
    """HEBO's optimiser and DesignSpace classes; HEBO sets torch to one thread when
    imported, which is put back."""
    import torch

    threads = torch.get_num_threads()
    try:
        from hebo.design_space.design_space import DesignSpace
        from hebo.optimizers.hebo import HEBO
    finally:
        torch.set_num_threads(threads)
    return HEBO, DesignSpace
