"""OptunaSearch's state as plain data: Optuna trials (and CMA-ES's optimizer) as JSON.

Optuna keeps CmaEsSampler's optimizer as a pickle in the trials' system attributes;
here it becomes plain numeric arrays (exact bytes as hex), so the experiment's state
never holds a pickle, and the pickle is rebuilt on restore.
"""

from __future__ import annotations

import math
import pickle
from typing import TYPE_CHECKING, Any

from tunefleet._redact import get_logger

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

logger = get_logger("tunefleet.search")

CMA_PREFIXES = ("cma:", "sepcma:")  # CmaEsSampler's optimizer attributes ("<prefix>optimizer:i")
_ATTR_CHUNK = 2045  # Optuna's limit for one system attribute string


def trial_to_data(trial: FrozenTrial, table: dict[str, int]) -> dict[str, Any]:
    """A trial as JSON-able data; its distributions as indices into `table` (grown here)."""
    from optuna.distributions import distribution_to_json

    dists = trial.distributions
    data: dict[str, Any] = {
        "state": trial.state.name,
        "values": None if trial.values is None else list(trial.values),
        "params": {n: dists[n].to_internal_repr(v) for n, v in trial.params.items()},
        "distributions": {
            n: table.setdefault(distribution_to_json(d), len(table)) for n, d in dists.items()
        },
    }
    system = dict(trial.system_attrs)
    if (optimizer := _optimizer_to_data(system)) is not None:
        data["optimizer"] = optimizer
    if system:
        data["system_attrs"] = system
    if trial.user_attrs:
        data["user_attrs"] = dict(trial.user_attrs)
    return data


def trial_from_data(data: dict[str, Any], table: list[BaseDistribution]) -> FrozenTrial:
    import optuna

    dists = {n: table[i] for n, i in data["distributions"].items()}
    system = dict(data.get("system_attrs", {}))
    if data.get("optimizer") is not None:
        system.update(_optimizer_from_data(data["optimizer"]))
    return optuna.trial.create_trial(
        state=optuna.trial.TrialState[data["state"]],
        values=data["values"],
        params={n: dists[n].to_external_repr(v) for n, v in data["params"].items()},
        distributions=dists,
        user_attrs=data.get("user_attrs", {}),
        system_attrs=system,
    )


def _optimizer_to_data(system: dict[str, Any]) -> dict[str, Any] | None:
    """Take CmaEsSampler's pickled optimizer out of `system` and return it as data."""
    for prefix in CMA_PREFIXES:
        keys = [k for k in system if k.startswith(f"{prefix}optimizer:")]
        if not keys:
            continue
        import cmaes  # slow to import (SciPy): only when CMA-ES is used

        text = "".join(system.pop(f"{prefix}optimizer:{i}") for i in range(len(keys)))
        optimizer = pickle.loads(bytes.fromhex(text))  # made by this process, not read
        kind = type(optimizer).__name__
        if type(optimizer) not in (cmaes.CMA, cmaes.SepCMA):
            logger.warning("OptunaSearch: a %s optimizer is not saved; CMA-ES restarts", kind)
            return None
        state = {k: _array_to_data(v) for k, v in optimizer.__getstate__().items()}
        return {"prefix": prefix, "class": kind, "state": state}
    return None


def _optimizer_from_data(data: dict[str, Any]) -> dict[str, str]:
    import cmaes

    cls = {"CMA": cmaes.CMA, "SepCMA": cmaes.SepCMA}[data["class"]]
    optimizer = cls.__new__(cls)
    optimizer.__setstate__({k: _array_from_data(v) for k, v in data["state"].items()})
    text = pickle.dumps(optimizer).hex()
    chunks = range(0, len(text), _ATTR_CHUNK)
    return {
        f"{data['prefix']}optimizer:{i}": text[start : start + _ATTR_CHUNK]
        for i, start in enumerate(chunks)
    }


def _array_to_data(value: Any) -> Any:
    """NumPy arrays and scalars as exact bytes (hex), other values as they are."""
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        return {
            "__ndarray__": array.tobytes().hex(),
            "dtype": array.dtype.str,
            "shape": list(array.shape),
            "scalar": isinstance(value, np.generic),
        }
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    return value


def _array_from_data(value: Any) -> Any:
    import numpy as np

    if not isinstance(value, dict):
        return value
    if "__float__" in value:
        return float(value["__float__"])
    dtype = np.dtype(value["dtype"])
    if dtype.kind not in "biuf":
        raise ValueError(f"OptunaSearch state: an array of dtype {dtype} is not numeric")
    array = np.frombuffer(bytes.fromhex(value["__ndarray__"]), dtype=dtype)
    array = array.reshape(value["shape"]).copy()
    return array[()] if value["scalar"] else array
