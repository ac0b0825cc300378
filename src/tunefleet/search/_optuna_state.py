"""OptunaSearch's state as plain data: Optuna trials (and CMA-ES's optimizer) as JSON.

`StudyState` keeps it at the cost of what changed: finished trials in a StateLog.

Optuna keeps CmaEsSampler's optimizer as a pickle in the trials' system attributes;
here it becomes plain numeric arrays (exact bytes as hex), so the experiment's state
never holds a pickle, and the pickle is rebuilt on restore.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tunefleet._redact import get_logger
from tunefleet._state_log import StateLog

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.storages import BaseStorage
    from optuna.study import Study
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
    if trial.intermediate_values:  # a pruned trial's: TPE ranks it by its last step
        data["intermediate"] = [[s, v] for s, v in sorted(trial.intermediate_values.items())]
    return data


def trial_from_data(data: dict[str, Any], table: list[BaseDistribution]) -> FrozenTrial:
    """The trial `trial_to_data` saved, as `optuna.trial.create_trial` makes one (started
    now, and completed now if finished), unchecked: `Study.add_trial` checks it (once,
    not twice: a tenth of resuming 100,000 trials)."""
    from optuna.trial import FrozenTrial, TrialState

    dists = {n: table[i] for n, i in data["distributions"].items()}
    system = dict(data.get("system_attrs", {}))
    if data.get("optimizer") is not None:
        system.update(_optimizer_from_data(data["optimizer"]))
    state = TrialState[data["state"]]
    start = None if state is TrialState.WAITING else datetime.datetime.now()
    return FrozenTrial(
        number=-1,
        state=state,
        value=None,
        values=data["values"],
        datetime_start=start,
        datetime_complete=start if state.is_finished() else None,
        params={n: dists[n].to_external_repr(v) for n, v in data["params"].items()},
        distributions=dists,
        user_attrs=dict(data.get("user_attrs", {})),
        system_attrs=system,
        intermediate_values={int(s): float(v) for s, v in data.get("intermediate", [])},
        trial_id=-1,
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


class TrialTracker:
    """The trials of an in-memory study by number: the unfinished ones, and the
    finished ones as data (``data(trial)`` and its number) in the `finished` StateLog,
    each logged once (a finished trial never changes). With `log_open`, an unfinished
    trial is logged too, in `opened`, each time it is seen in a new state (waiting,
    running): the head then holds no trial, and a trial logged there is logged in
    `finished` by what changed since (``"of_opened": true``; keys gone in "dropped").
    New trials are found by number and single trials read through the storage: `track`
    costs the new and the unfinished trials, never all of them."""

    def __init__(
        self,
        storage: BaseStorage,
        study_id: int,
        data: Callable[[FrozenTrial], dict[str, Any]],
        owner: str,
        *,
        log_open: bool = False,
    ) -> None:
        self.storage, self.study_id, self.owner = storage, study_id, owner
        self._to_data, self._log_open = data, log_open
        self.finished = StateLog()  # finished trials as data, in the order they finished
        self.opened = StateLog()  # with log_open: unfinished trials, as each changed state
        self._open: dict[int, dict[str, Any] | None] = {}  # unfinished: number -> logged
        self._count = 0  # the trials of the study seen so far

    def _trial(self, number: int) -> FrozenTrial:
        storage = self.storage
        return storage.get_trial(
            storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        )

    def _data(self, trial: FrozenTrial) -> dict[str, Any]:
        return {"number": trial.number, **self._to_data(trial)}

    def track(self) -> None:
        """Take the new trials in as unfinished, and log those that finished since (and,
        with `log_open`, those that changed state)."""
        while True:
            try:
                self.storage.get_trial_id_from_study_id_trial_number(self.study_id, self._count)
            except KeyError:
                break
            self._open[self._count] = None
            self._count += 1
        for number, logged in list(self._open.items()):
            trial = self._trial(number)
            if trial.state.is_finished():
                del self._open[number]
                self.finished.append(_changes(self._data(trial), logged))
            elif self._log_open and (logged is None or trial.state.name != logged["state"]):
                self._open[number] = data = self._data(trial)
                self.opened.append(data)

    def unfinished(self) -> list[dict[str, Any]]:
        """The unfinished trials as data (after `track`)."""
        return [self._data(self._trial(number)) for number in self._open]

    def open_numbers(self) -> list[int]:
        """The numbers of the unfinished trials."""
        return list(self._open)

    def restored(self, finished: Any, unfinished: Any, opened: Any = None) -> list[dict[str, Any]]:
        """Take the saved trials back (`finished`, `opened`: the store's StateLogs,
        appended to from here on; `unfinished`: a head's list of trials); all of them in
        number order, to add to a new study. An opened trial's last entry is its data,
        unless it finished since."""
        self.finished = _log(finished, "finished", self.owner)
        self.opened = _log([] if opened is None else opened, "opened", self.owner)
        if not isinstance(unfinished, list):
            raise ValueError(f"{self.owner} state: trials must be a list")
        still = list(unfinished)
        latest: dict[int, dict[str, Any]] = {}
        if self._log_open:  # an older head's trials are logged from here on
            self.opened.extend(unfinished)
            latest = {_number(data, self.owner): data for data in self.opened}
        finished = [_applied(data, latest, self.owner) for data in self.finished]
        if self._log_open:
            done = {data["number"] for data in finished}
            still = [data for number, data in latest.items() if number not in done]
        trials = sorted([*finished, *still], key=lambda d: _number(d, self.owner))
        numbers = [data["number"] for data in trials]
        if numbers != list(range(len(trials))):
            raise ValueError(
                f"{self.owner} state: the trial numbers {numbers[:20]} of finished and trials "
                "must be 0, 1, 2, ... each once"
            )
        self._open = {data["number"]: data if self._log_open else None for data in still}
        self._count = len(trials)
        return trials


class StudyState:
    """An in-memory study's trials as saved state, at a cost of what changed.

    A finished trial is data that never changes: it goes, once, into the `finished`
    StateLog (with its number); an unfinished one (a queued point, a running trial) goes
    into the `opened` StateLog each time it changes state. The head holds only the
    distributions table and the study's attributes, so it is not rewritten as trials
    come and go; GA samplers' parent caches (one study attribute per generation) go to
    a log too. New trials are found by number, single trials read through the storage:
    no step walks the study's trials.
    """

    def __init__(self, storage: BaseStorage, study_id: int) -> None:
        self.storage, self.study_id = storage, study_id
        self.attr_log = StateLog()  # [key, value] of the study attributes set once
        self.table: dict[str, int] = {}  # the distributions (as JSON) by index
        self.trials = TrialTracker(
            storage,
            study_id,
            lambda t: trial_to_data(t, self.table),
            "OptunaSearch",
            log_open=True,
        )
        self._logged: set[str] = set()

    def state(self) -> dict[str, Any]:
        self.trials.track()
        attrs = self.storage.get_study_system_attrs(self.study_id)
        for key, value in attrs.items():
            if key not in self._logged and _set_once(key):
                self._logged.add(key)
                self.attr_log.append([key, value])
        return {  # the table after the trials: they may have added to it
            "study_attrs": {k: v for k, v in attrs.items() if k not in self._logged},
            "study_attr_log": self.attr_log,
            "distributions": [json.loads(d) for d in self.table],
            "finished": self.trials.finished,
            "opened": self.trials.opened,
        }

    def restore(self, study: Study, state: dict[str, Any]) -> None:
        """Fill the (new, empty) `study` with the trials of `state`, in number order, so
        that the numbers and ids are the saved ones."""
        from optuna.distributions import distribution_to_json, json_to_distribution
        from optuna.trial import TrialState

        for key, value in _items(state, "study_attrs"):
            self.storage.set_study_system_attr(self.study_id, key, value)
        self.attr_log = _log(state.get("study_attr_log", []), "study_attr_log", "OptunaSearch")
        for item in self.attr_log:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError(
                    f"OptunaSearch state: study_attr_log item {item!r} is not [key, value]"
                )
            self.storage.set_study_system_attr(self.study_id, item[0], item[1])
            self._logged.add(item[0])
        table = [json_to_distribution(json.dumps(d)) for d in state["distributions"]]
        self.table = {distribution_to_json(d): i for i, d in enumerate(table)}
        if state.get("version") == 1:  # every trial in "trials", in number order
            numbered = [{"number": i, **data} for i, data in enumerate(state["trials"])]
            done = [d for d in numbered if TrialState[d["state"]].is_finished()]
            unfinished = [d for d in numbered if not TrialState[d["state"]].is_finished()]
            trials = self.trials.restored(done, unfinished)
        else:  # 2: the unfinished trials in the head ("trials"); 3: logged ("opened")
            trials = self.trials.restored(
                state["finished"], state.get("trials", []), state.get("opened")
            )
        for data in trials:  # in order: the same trial numbers and ids
            _add_uncopied(study, trial_from_data(data, table))


def _add_uncopied(study: Study, trial: FrozenTrial) -> None:
    """Add `trial`, made here and held by nobody else, to `study`; a finished one marked
    so that a storage that copies what it is given (Optuna's in-memory one deep-copies
    each trial: 2.6 of a profiled 6 s to resume 30,000 trials) takes it as it is. Only
    a finished trial: a storage changes none of those; its distributions stay shared
    with the other trials' (one object per distribution, not one per trial)."""
    plain = type(trial)
    if trial.state.is_finished():
        trial.__class__ = _uncopied_class()
    try:
        study.add_trial(trial)
    finally:
        trial.__class__ = plain  # whatever the storage did with it


@functools.cache
def _uncopied_class() -> type[FrozenTrial]:
    from optuna.trial import FrozenTrial

    class Uncopied(FrozenTrial):
        def __deepcopy__(self, memo: dict[int, Any]) -> FrozenTrial:
            self.__class__ = FrozenTrial  # type: ignore[assignment]  # the copy: itself, plain
            return self

    return Uncopied


def _changes(data: dict[str, Any], logged: dict[str, Any] | None) -> dict[str, Any]:
    """A finished trial's `data` as the changes since it was `logged` (when it was)."""
    if logged is None:
        return data
    changes = {k: v for k, v in data.items() if k == "number" or logged.get(k) != v}
    if dropped := [k for k in logged if k not in data]:
        changes["dropped"] = dropped
    return {**changes, "of_opened": True}


def _applied(data: Any, opened: dict[int, dict[str, Any]], owner: str) -> dict[str, Any]:
    """A finished trial's whole data: logged whole, or as changes to its last `opened`."""
    number = _number(data, owner)
    whole: dict[str, Any] = data  # a dict (`_number` checked it)
    if not whole.get("of_opened"):
        return whole  # read, never changed, by the caller
    if number not in opened:
        raise ValueError(f"{owner} state: the finished trial {number} was never opened")
    dropped = data.get("dropped", [])
    base = {k: v for k, v in opened[number].items() if k not in dropped}
    changes = {k: v for k, v in data.items() if k not in ("of_opened", "dropped")}
    return {**base, **changes}


def _set_once(key: str) -> bool:
    """A GA sampler's parent cache ("NSGAIISampler:parent:<generation>")."""
    _, sep, generation = key.partition(":parent:")
    return bool(sep) and generation.isdigit()


def _items(state: dict[str, Any], key: str) -> list[tuple[str, Any]]:
    value = state.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"OptunaSearch state: {key}={value!r} must be a dict")
    return list(value.items())


def _log(value: Any, key: str, owner: str) -> StateLog:
    """`value` as the StateLog to go on appending to (the store's own, when it is one)."""
    if not isinstance(value, list):
        raise ValueError(f"{owner} state: {key} must be a list, not {type(value).__name__}")
    return value if isinstance(value, StateLog) else StateLog(value)


def _number(data: Any, owner: str) -> int:
    number = data.get("number") if isinstance(data, dict) else None
    if isinstance(number, bool) or not isinstance(number, int):
        raise ValueError(f"{owner} state: the trial {str(data)[:200]} has no int 'number'")
    return number


def asked_log(value: Any) -> StateLog:
    """The saved asks: the store's StateLog of [trial id, trial number] items."""
    if not isinstance(value, list):
        raise ValueError(f"OptunaSearch state: asked={value!r} must be a list")
    for item in value:
        valid = isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
        if not (valid and isinstance(item[1], int) and not isinstance(item[1], bool)):
            raise ValueError(
                f"OptunaSearch state: asked item {item!r} is not [trial id, trial number]"
            )
    return value if isinstance(value, StateLog) else StateLog(value)
