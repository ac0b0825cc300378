"""Nevergrad's derivative-free optimisers as a searcher (Ray Tune's `NevergradSearch`).

A tunefleet space becomes an ``ng.p.Dict`` of one Nevergrad parameter per domain in
index form (`_ask_tell.Param`): a float a ``Scalar`` (``Log`` when log-scaled), an
int or a quantized float the index of its multiple as an integer-cast ``Scalar``
(``Log``), a choice a ``Choice`` of category indices. The optimiser's random state
is seeded; a restore replays the asks and tells into a fresh optimiser, which
Nevergrad then follows exactly.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

from tunefleet.search._ask_tell import AskTellSearcher


class NevergradSearch(AskTellSearcher):
    """Search with a Nevergrad optimiser (Ray Tune's `NevergradSearch`).

    Args:
        optimizer: a Nevergrad optimiser class (``ng.optimizers.OnePlusOne``), a
            configured optimiser (``ng.optimizers.ParametrizedOnePlusOne(...)``), or an
            optimiser instance built on its own parametrization (then `space` lists
            the names of its positional arguments, unless they are keyword ones).
            None: ``ng.optimizers.OnePlusOne``.
        optimizer_kwargs: keyword arguments for the optimiser (``budget``,
            ``num_workers``); not with an instance. Without ``budget``, the budget is
            the experiment's `num_samples` when it has one.
        space: a search space for this searcher alone: tunefleet domains, or a
            Nevergrad parametrization (``ng.p.Dict(...)``); the Tuner's `param_space`
            then holds only constants. None: use `param_space`.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first (nested dicts or "a/b" keys; values
            left out are drawn at random).
        seed: the seed of the optimiser's random state (tunefleet's addition; None:
            a fresh one, kept in the state).

    Example:
        >>> import nevergrad as ng
        >>> import tunefleet as tune
        >>> search = NevergradSearch(ng.optimizers.OnePlusOne, metric="loss", mode="min")
        >>> search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> 0 <= search.suggest("t1")["x"] <= 1
        True
    """

    owner = "NevergradSearch"
    modules = ("nevergrad",)
    extra = "nevergrad"
    needs = "the nevergrad package"

    def __init__(
        self,
        optimizer: Any = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        space: Any = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        names: list[str] | None = None
        if isinstance(space, (list, tuple)):
            names, space = [str(n) for n in space], None
        super().__init__(
            space, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate, seed=seed
        )
        ng = self._lib
        if optimizer_kwargs is not None and not isinstance(optimizer_kwargs, dict):
            raise TypeError(f"optimizer_kwargs must be a dict, not {type(optimizer_kwargs)}")
        self._kwargs = dict(optimizer_kwargs or {})
        self._instance: Any = None
        self._names = names
        base = ng.optimization.base
        if optimizer is None:
            optimizer = ng.optimizers.OnePlusOne
        if isinstance(optimizer, base.Optimizer):
            if self._kwargs:
                raise ValueError(
                    "NevergradSearch: optimizer_kwargs cannot be given with an optimizer "
                    "instance; pass the class (or give the instance those arguments)"
                )
            if space is not None:
                raise ValueError(
                    "NevergradSearch: an optimizer instance has its own parametrization; "
                    "give space as the list of its parameter names, or pass the class"
                )
            self._instance = copy.deepcopy(optimizer)  # pristine, for each restore
            self._own_space = names or []  # its parametrization is the searcher's own space
        elif not (isinstance(optimizer, type) and issubclass(optimizer, base.Optimizer)) and (
            not isinstance(optimizer, base.ConfiguredOptimizer)
        ):
            raise TypeError(
                f"NevergradSearch: optimizer={optimizer!r} is not a Nevergrad optimizer: "
                "pass a class such as ng.optimizers.OnePlusOne, a configured optimizer "
                "or an instance"
            )
        self._factory = optimizer
        self._opt: Any = None

    def _is_native(self, space: Any) -> bool:
        if self._instance is not None:
            return True
        return isinstance(space, self._lib.p.Parameter)

    def _start(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        import numpy as np

        ng = self._lib
        if self._instance is not None:
            self._opt = copy.deepcopy(self._instance)
        else:
            if self._native:
                parametrization = copy.deepcopy(self._space)
            else:
                parametrization = ng.p.Dict(**{p.name: self._parameter(p) for p in self._free})
            kwargs = dict(self._kwargs)
            if "budget" not in kwargs and self._num_samples is not None:
                kwargs["budget"] = self._num_samples
            if isinstance(self._factory, type):
                self._opt = self._factory(parametrization=parametrization, **kwargs)
            else:
                self._opt = self._factory(parametrization, **kwargs)
        self._opt.parametrization.random_state = np.random.RandomState(self._seed)
        return points

    def _parameter(self, param: Any) -> Any:
        ng = self._lib
        if param.kind == "cat":
            return ng.p.Choice(list(range(int(param.high) + 1)))
        kind = ng.p.Log if param.log else ng.p.Scalar
        made = kind(lower=param.low, upper=param.high)
        return made.set_integer_casting() if param.kind == "int" else made

    def _ask(self) -> tuple[dict[str, Any], Any]:
        with warnings.catch_warnings():
            # more asks than num_workers before a tell: Nevergrad copes, and says so
            warnings.simplefilter("ignore")
            candidate = self._opt.ask()
        return self._values(candidate), candidate

    def _values(self, candidate: Any) -> dict[str, Any]:
        if self._instance is None and not isinstance(candidate.value, dict):
            return {"value": candidate.value}
        if self._instance is None:
            return dict(candidate.value)
        if candidate.kwargs:
            return dict(candidate.kwargs)
        if isinstance(candidate.value, dict):
            return dict(candidate.value)
        args: Sequence[Any] = candidate.args
        names = self._names or []
        if len(names) != len(args):
            raise ValueError(
                f"NevergradSearch: the optimizer's parametrization gives {len(args)} "
                f"positional values, and space names {names}: give one name per value"
            )
        return dict(zip(names, args, strict=True))

    def _tell(self, handle: Any, loss: float | None, result: dict[str, Any] | None) -> None:
        if loss is not None:  # a failed trial is not told (Nevergrad takes no NaN)
            self._opt.tell(handle, loss)

    def _attach(self, values: dict[str, Any]) -> Any:
        parametrization = self._opt.parametrization
        if self._instance is not None and not isinstance(parametrization.value, dict):
            if parametrization.kwargs:
                return parametrization.spawn_child(new_value=((), dict(values)))
            names = self._names or list(values)
            return parametrization.spawn_child(new_value=(tuple(values[n] for n in names), {}))
        return parametrization.spawn_child(new_value=dict(values))
