"""The Searcher interface: where new trial configurations come from.

A searcher is an event handler with JSON-able state. The controller asks it for
a configuration whenever a slot is free, and tells it about results and ends of
trials. Results reach it already normalised: the metric it was given is present
and finite (non-finite values are filtered by the controller).

`Searcher` keeps Ray Tune's contract, so a searcher written for Ray runs unchanged:
`set_search_properties` returns False unless the searcher took the space it was
offered, and `save`/`restore` (files) and `save_to_dir`/`restore_from_dir` (folders,
an experiment's included) carry its state, as JSON rather than a pickle.
`SpaceSearcher` is the base of the searchers that take a search space, either in
their constructor or from the experiment.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Final

from tunefleet._metrics import MetricSpec, ModeSpec, fill_objective
from tunefleet.space import GRID_KEY, Domain, Function

FINISHED: Final = "FINISHED"
"""Returned by `suggest` when the searcher has no more configurations, ever."""


class Searcher(ABC):
    """Base class of search algorithms (Ray Tune's `Searcher` names).

    Args:
        metric: the metric to optimise; filled in from `TuneConfig` if None.
        mode: "min" or "max"; filled in from `TuneConfig` if None.
    """

    FINISHED: ClassVar[str] = FINISHED
    #: the name `save_to_dir` gives the state file (`restore_from_dir` finds it)
    CKPT_FILE_TMPL: ClassVar[str] = "searcher-state-{}.json"

    #: True when the searcher knows its own number of trials (grid x num_samples)
    #: and returns FINISHED itself; otherwise the controller stops at num_samples.
    self_limiting: bool = False

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode={mode!r} is not valid: it must be 'min' or 'max'")
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        """The metric optimised (None until given)."""
        return self._metric

    @metric.setter
    def metric(self, value: str | None) -> None:
        self._metric = value

    @property
    def mode(self) -> str | None:
        """ "min" or "max" (None until given)."""
        return self._mode

    @mode.setter
    def mode(self, value: str | None) -> None:
        self._mode = value

    def set_search_properties(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Receive the experiment's metric, mode, search space (`config`), `num_samples`
        and `constraints` (names of reported values that must be <= 0).

        Returns True if the searcher took the space; False if it did not (it has its
        own, as Ray's base class says): the experiment then refuses a `param_space`
        with search domains and adds its constants to every config. The base takes
        no space; it fills in the metric and mode it was not given.
        """
        self._fill_objective(metric, mode)
        return False

    def _fill_objective(self, metric: MetricSpec, mode: ModeSpec, *, strict: bool = False) -> None:
        """Take the experiment's metric and mode where this searcher has none (`strict`:
        refuse several objectives, for a searcher that optimises one)."""
        if self.metric is not None and self.mode is not None:
            return
        if not strict and (isinstance(metric, list) or isinstance(mode, list)):
            return  # several objectives: a one-metric searcher keeps what it has
        owner = type(self).__name__
        self.metric, self.mode = fill_objective(owner, self.metric, self.mode, metric, mode)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Called by `ConcurrencyLimiter`: return True if the searcher limits its own
        concurrency to `max_concurrent` (the limiter then passes every call through)."""
        return False

    @property
    def total_samples(self) -> int | None:
        """How many configs it gives in all, when it knows (shown as the run's total)."""
        return None

    @abstractmethod
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """A configuration for a new trial, None to wait, or FINISHED."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of a running trial."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """The trial ended; `result` is its last result, `error` True if it failed."""

    def on_trial_stopped_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """The scheduler stopped the trial before its full budget (ASHA below a rung's
        cutoff, median stopping, a paused trial never resumed): `result`, its last, is
        not a final value. Searchers that model this override it (OptunaSearch tells
        the study the trial was pruned at its step; HyperOptSearch and BayesOptSearch
        leave it out of their model); by default it is `on_trial_complete`, as Ray
        Tune tells every end."""
        self.on_trial_complete(trial_id, result)

    # -- results from elsewhere (Ray's names) -------------------------------------------
    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: float,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None:
        """Tell the model about a config evaluated outside this run (`value`: its metric;
        `error`: it failed; `pruned`: stopped early). OptunaSearch, HyperOptSearch and
        BayesOptSearch take them; other searchers raise NotImplementedError, as in Ray."""
        raise NotImplementedError(
            f"{type(self).__name__} does not take evaluated points (add_evaluated_point); "
            "OptunaSearch, HyperOptSearch and BayesOptSearch do"
        )

    def add_evaluated_trials(self, trials_or_analysis: Any, metric: str) -> None:
        """`add_evaluated_point` for each trial of a `Trial`, a list of them, or an
        `ExperimentAnalysis` (a `ResultGrid` too) whose last result has `metric`."""
        from tunefleet.search._evaluated import add_evaluated_trials

        if type(self).add_evaluated_point is Searcher.add_evaluated_point:
            self.add_evaluated_point({}, 0.0)  # raises NotImplementedError, naming the class
        add_evaluated_trials(self, trials_or_analysis, metric)

    def get_state(self) -> dict[str, Any]:
        """The searcher's state as JSON-able data (random generators included)."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned."""

    def searched_space(self) -> dict[str, Any] | None:
        """The tunefleet search space the searcher samples, once it has one (`save`
        stores it, so a restored searcher needs no space again); None otherwise."""
        return None

    def _saved_spec(self) -> dict[str, Any]:
        """The spec (num_samples, constraints) `save` stores beside the space."""
        return {}

    def _restore_space(self, saved: dict[str, Any]) -> None:
        """Before `set_state`: take the space and properties `save` stored, if the
        searcher has none yet (`saved`: the file's content)."""

    # -- files (Ray's names) ---------------------------------------------------------------
    def save(self, checkpoint_path: str | os.PathLike[str]) -> None:
        """Write the searcher's state to the file `checkpoint_path` (JSON: the class,
        metric, mode, search space and `get_state()`)."""
        from tunefleet.search._persist import write_state

        write_state(self, checkpoint_path)

    def restore(self, checkpoint_path: str | os.PathLike[str]) -> None:
        """Load what `save` wrote to `checkpoint_path` into this searcher (of the same
        class); it then continues where the saved one stopped."""
        from tunefleet.search._persist import read_state

        read_state(self, checkpoint_path)

    def save_to_dir(
        self, checkpoint_dir: str | os.PathLike[str], session_str: str = "default"
    ) -> None:
        """`save` into the folder `checkpoint_dir`, as ``searcher-state-<session_str>.json``."""
        name = self.CKPT_FILE_TMPL.format(session_str)
        self.save(os.path.join(os.fspath(checkpoint_dir), name))

    def restore_from_dir(self, checkpoint_dir: str | os.PathLike[str]) -> None:
        """`restore` from a folder: the newest state `save_to_dir` wrote there, or the
        searcher state of the experiment in it (a Tuner's experiment directory)."""
        from tunefleet.search._persist import restore_from_dir

        restore_from_dir(self, checkpoint_dir)


class WrappingSearcher(Searcher):
    """A searcher around another (`ConcurrencyLimiter`, `Repeater`): the space it
    samples, what `save` stores of it and its restore are the wrapped searcher's."""

    searcher: Searcher

    def searched_space(self) -> dict[str, Any] | None:
        return self.searcher.searched_space()

    def _saved_spec(self) -> dict[str, Any]:
        return self.searcher._saved_spec()

    def _restore_space(self, saved: dict[str, Any]) -> None:
        inner = {**saved, "state": saved["state"]["searcher"]}
        self.searcher._restore_space(inner)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode


class SpaceSearcher(Searcher):
    """A searcher that takes a search space: its own (the constructor's `space`) or the
    experiment's, through `set_search_properties` (Ray's rule for which wins).

    Subclasses implement `_setup` (take metric, mode, space and spec) and set
    `_own_space` (None: none given) before anything else.
    """

    _own_space: Any = None

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        self._has_space = False  # a space was taken (own, offered, or restored)
        self._searched: dict[str, Any] | None = None
        self._spec: dict[str, Any] = {}

    def set_search_properties(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Take the metric, mode and search space; False (as in Ray) when the searcher
        already has a space: its own, or one taken before. Given its own space, it
        still takes `config`'s constants (and sample_from values) on first use."""
        if not isinstance(config, dict):
            raise TypeError(f"param_space must be a dict, not {type(config).__name__}")
        if self._has_space or (self._own_space is not None and sampled_path(config) is not None):
            self._fill_objective(metric, mode)
            return False
        self._setup(metric, mode, config, **spec)
        self._has_space, self._spec = True, _json_spec(spec)
        return self._own_space is None

    @abstractmethod
    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Take the metric, mode and space (`config`, or the own space with `config`'s
        constants); build the model."""

    def _ready(self) -> None:
        """Before any use: a searcher with its own space sets itself up on first use
        (as Ray's do in their constructor); without one, the experiment must give it."""
        if self._has_space:
            return
        if self._own_space is None:
            raise RuntimeError(
                f"{type(self).__name__}: set_search_properties() must be called before "
                "suggest() when the searcher has no space= of its own"
            )
        self.set_search_properties(None, None, {})

    def _took(self, space: dict[str, Any] | None) -> None:
        """Record the tunefleet space searched (None: a library's native space)."""
        self._searched = space

    def searched_space(self) -> dict[str, Any] | None:
        return self._searched if self._has_space else None

    def _saved_spec(self) -> dict[str, Any]:
        return dict(self._spec)

    def _restore_space(self, saved: dict[str, Any]) -> None:
        if self._has_space or self._own_space is not None:
            self._fill_objective(saved.get("metric"), saved.get("mode"))
            self._ready()
            return
        space = saved.get("space")
        if space is None:
            raise ValueError(
                f"{type(self).__name__}: the saved state holds no search space (it searched "
                "a library's own space): construct the searcher with that space= again, "
                "then restore"
            )
        from tunefleet.space import space_from_json

        self.set_search_properties(
            saved.get("metric"), saved.get("mode"), space_from_json(space), **saved.get("spec", {})
        )


def sampled_path(space: Any, path: str = "param_space") -> str | None:
    """The key path of the first sampled domain or grid_search in `space` (sample_from
    values are computed, not sampled), else None."""
    if isinstance(space, Function):
        return None
    if isinstance(space, Domain) or (isinstance(space, dict) and GRID_KEY in space):
        return path
    items: Any = ()
    if isinstance(space, dict):
        items = space.items()
    elif isinstance(space, (list, tuple)):
        items = enumerate(space)
    for key, value in items:
        found = sampled_path(value, f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


def _json_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The parts of the experiment's spec a restored searcher needs again."""
    return {k: spec[k] for k in ("num_samples", "constraints") if k in spec}
