"""Ax's Bayesian optimisation as a searcher (Ray Tune's `AxSearch`).

An `AxClient` runs the experiment: Sobol' points first, then BoTorch's GP (Ax's
default generation strategy, or the one given). When Ax will not suggest more
while trials run (its parallelism limit), `suggest` returns None and is asked
again later.

A tunefleet space becomes Ax parameters in index form (`_ask_tell.Param`): a float
a float range (log-scaled or not), an int or a quantized float the index of its
multiple as an int range, a choice an unordered choice of category indices. Ax's
own list of parameter dicts is taken as it is. The state is Ax's JSON snapshot of
the client (experiment, data and generation strategy), so `set_state` restores Ax
exactly, with no replay. The snapshot is kept as one opaque string (zlib, base64):
the experiment store hides values under secret-looking keys, and Ax's JSON has
``generator_key`` fields whose loss made a restored Ax restart its Sobol' sequence.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import warnings
import zlib
from collections.abc import Iterator
from typing import Any

from tunefleet._metrics import metric_value
from tunefleet.search._ask_tell import AskTellSearcher, Param


class AxSearch(AskTellSearcher):
    """Bayesian optimisation with Ax (Ray Tune's `AxSearch`).

    Args:
        space: a search space for this searcher alone: tunefleet domains, or Ax's
            list of parameter dicts (``{"name": "x", "type": "range", "bounds": [0.0,
            1.0]}``); the Tuner's `param_space` then holds only constants. None: use
            `param_space`.
        metric, mode: what to optimise; taken from `TuneConfig` when None.
        points_to_evaluate: configs to run first (nested dicts or "a/b" keys; values
            left out are drawn at random), attached to the experiment as trials.
        parameter_constraints: Ax's constraints on parameters (``"x1 + x2 <= 2.0"``).
        outcome_constraints: Ax's constraints on reported metrics (``"l2norm <=
            1.25"``); those metrics are read from each trial's last result.
        ax_client: an `AxClient` whose experiment is already created (then no
            `space`); its state is saved with the searcher's.
        **ax_kwargs: passed to `AxClient` (``random_seed``, ``generation_strategy``,
            ...).

    Example:
        >>> import tunefleet as tune
        >>> search = AxSearch(metric="loss", mode="min", random_seed=0)
        >>> search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> 0 <= search.suggest("t1")["x"] <= 1
        True
    """

    owner = "AxSearch"
    modules = ("ax.service.ax_client",)
    extra = "ax"
    needs = "the ax-platform package"

    def __init__(
        self,
        space: dict[str, Any] | list[dict[str, Any]] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        parameter_constraints: list[str] | None = None,
        outcome_constraints: list[str] | None = None,
        ax_client: Any = None,
        **ax_kwargs: Any,
    ) -> None:
        seed = ax_kwargs.pop("random_seed", None)
        super().__init__(
            space, metric=metric, mode=mode, points_to_evaluate=points_to_evaluate, seed=seed
        )
        if ax_client is not None:
            if not isinstance(ax_client, self._lib.AxClient):
                raise TypeError(f"AxSearch: ax_client={ax_client!r} is not an AxClient")
            if space is not None or ax_kwargs:
                raise ValueError(
                    "AxSearch: an ax_client carries its own experiment and settings; give "
                    "no space and no AxClient arguments with it"
                )
        for name, value in (
            ("parameter_constraints", parameter_constraints),
            ("outcome_constraints", outcome_constraints),
        ):
            if value is not None and not (
                isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value)
            ):
                raise TypeError(f"AxSearch: {name}={value!r} must be a list of strings")
        self._parameter_constraints = list(parameter_constraints or [])
        self._outcome_constraints = list(outcome_constraints or [])
        self._given = ax_client
        if ax_client is not None:
            self._own_space = []  # the client's experiment: param_space holds constants
        self._ax_kwargs = ax_kwargs
        self._client: Any = None
        # Ax's packed snapshot and the log's length it was taken at: Ax's
        # `to_json_snapshot` costs about 10 ms per trial it holds, and the state is
        # asked for before every commit, most of which follow no ask or tell
        self._snapshot: tuple[int, str] | None = None

    def _is_native(self, space: Any) -> bool:
        return self._given is not None or isinstance(space, list)

    def _start(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ax = self._lib
        self._snapshot = None
        if self._given is not None:
            if self._client is None:
                self._client = self._given
            if getattr(self._client, "_experiment", None) is None:
                raise ValueError(
                    "AxSearch: the ax_client has no experiment: call "
                    "ax_client.create_experiment(...) first"
                )
            return points
        parameters = self._space if self._native else [_parameter(p) for p in self._free]
        with _quiet():
            self._client = ax.AxClient(
                random_seed=self._seed, verbose_logging=False, **self._ax_kwargs
            )
            self._client.create_experiment(
                parameters=parameters,
                objectives={str(self.metric): ax.ObjectiveProperties(minimize=self.mode == "min")},
                parameter_constraints=self._parameter_constraints or None,
                outcome_constraints=self._outcome_constraints or None,
            )
        return points

    def _ask(self) -> tuple[dict[str, Any], Any] | None:
        from ax.exceptions.core import DataRequiredError
        from ax.exceptions.generation_strategy import MaxParallelismReachedException

        try:
            with _quiet():
                parameters, index = self._client.get_next_trial()
        except (MaxParallelismReachedException, DataRequiredError):
            return None  # Ax waits for results before it suggests more
        return self._values(parameters), index

    def _values(self, parameters: dict[str, Any]) -> dict[str, Any]:
        if self._native:
            return dict(parameters)
        return {name: self._params[name].clean(parameters[name]) for name in parameters}

    def _tell(self, handle: Any, loss: float | None, result: dict[str, Any] | None) -> None:
        with _quiet():
            if loss is None or result is None:
                self._client.log_trial_failure(trial_index=handle)
                return
            data = {str(self.metric): metric_value(result, str(self.metric))}
            for constraint in self._outcome_constraints:
                name = re.split(r"\s*(<=|>=)", constraint.strip())[0]
                data[name] = metric_value(result, name)
            if any(v is None for v in data.values()):
                self._client.log_trial_failure(trial_index=handle)
                return
            self._client.complete_trial(trial_index=handle, raw_data=data)

    def _attach(self, values: dict[str, Any]) -> Any:
        with _quiet():
            _, index = self._client.attach_trial(parameters=dict(values))
        return index

    # ------------------------------------------------------------------ state

    def _extra_state(self) -> dict[str, Any]:
        # Ax changes only through the asks and tells, each logged: an unchanged log
        # length means the snapshot taken at it still holds
        if self._snapshot is None or self._snapshot[0] != len(self._log):
            with _quiet():
                self._snapshot = (len(self._log), _pack(self._client.to_json_snapshot()))
        return {"ax": self._snapshot[1], "trials": {k: int(v) for k, v in self._live.items()}}

    def _restore(self, state: dict[str, Any]) -> None:
        """Ax's own snapshot: the experiment, its data and its generation strategy."""
        snapshot = state["ax"]
        if isinstance(snapshot, str):
            snapshot = _unpack(snapshot)
        with _quiet():
            self._client = self._lib.AxClient.from_json_snapshot(snapshot)
        self._snapshot = None
        self._live = {str(k): int(v) for k, v in state["trials"].items()}
        asks = sum(1 for e in state["log"] if e[0] == "ask")
        self._queue = [dict(v) for v in self._point_values][asks:]


def _pack(snapshot: dict[str, Any]) -> str:
    """Ax's snapshot as one opaque ASCII string (no key or text for redaction to alter)."""
    text = json.dumps(snapshot, separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def _unpack(packed: str) -> dict[str, Any]:
    try:
        data = json.loads(zlib.decompress(base64.b64decode(packed.encode("ascii"))))
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"AxSearch: the saved Ax snapshot cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("AxSearch: the saved Ax snapshot is not a JSON object")
    return data


def _parameter(param: Param) -> dict[str, Any]:
    """Ax's description of one parameter in index form."""
    if param.kind == "cat":
        values = list(range(int(param.high) + 1))
        return {
            "name": param.name,
            "type": "choice",
            "values": values,
            "value_type": "int",
            "is_ordered": len(values) == 2,  # Ax orders a two-valued choice itself
            "sort_values": True,  # indices: already in order
        }
    bounds = [float(param.low), float(param.high)]
    kind = "float" if param.kind == "float" else "int"
    if kind == "int":
        bounds = [int(param.low), int(param.high)]
    return {
        "name": param.name,
        "type": "range",
        "bounds": bounds,
        "value_type": kind,
        "log_scale": param.log,
    }


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Ax at WARNING, without its Python warnings (it logs a line per trial)."""
    ax_logger = logging.getLogger("ax")
    level = ax_logger.level
    ax_logger.setLevel(max(level, logging.WARNING))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        ax_logger.setLevel(level)
