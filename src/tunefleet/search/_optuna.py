"""OptunaSearch: Optuna's samplers (TPE, GP, CMA-ES, QMC, NSGA-II, ...) as a searcher.

Optuna runs through its ask/tell interface on an in-memory study: `suggest` asks a
trial and translates the tunefleet space through `resolve(..., chooser=)`, so every
domain becomes one ``trial.suggest_*`` call (conditional spaces, sample_from and
constants work as in random search); `on_trial_complete` tells the values.

Exact restore: the samplers OptunaSearch builds itself (the default and the string
shortcuts) are built afresh for every ask, from a seed derived from ``(seed, number
of asks)``, and keep everything else in the study's trials. The state is therefore
the trials as data (parameters, distributions, values, attributes), the seed and the
ask count; `set_state` replays the trials into a fresh study with `add_trial` and the
next suggestions are the very ones the original would have made. Asks and trials are
saved as StateLog rows, once each (`StudyState`): a step saves what changed, no more.
CMA-ES keeps its optimizer as a pickle in trial attributes: the state holds it as plain
arrays instead (see `_optuna_state`), never as a pickle.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value, objectives
from tunefleet._redact import get_logger
from tunefleet._state_log import StateLog
from tunefleet.search._base import SpaceSearcher
from tunefleet.search._optuna_space import (
    _checked_space,
    _is_conditional,
    _merge,
    _suggest,
    _unflatten,
    _walk,
    point_params,
    to_distributions,
)
from tunefleet.search._optuna_state import StudyState, asked_log
from tunefleet.search._shared import (
    check_points,
    check_rewards,
    check_state_version,
    import_optional,
    quiet_optuna,
    require_metric,
    tell_pruned,
)
from tunefleet.space import (
    Function,
    format_path,
    resolve,
)

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler
    from optuna.storages import BaseStorage
    from optuna.study import Study
    from optuna.trial import FrozenTrial, Trial

logger = get_logger(__name__)

# 3: every trial and ask in StateLogs, a head that stays the same; 2 (the unfinished
# trials, the asks and the live trials in the head) and 1 (all in "trials") still load
_STATE_VERSION = 3
SAMPLERS = ("tpe", "gp", "cmaes", "qmc", "nsga2", "random")
_CONSTRAINTS_ATTR = "tunefleet:constraints"  # a trial's constraint values, in user attrs

DefineByRun = Callable[["Trial"], "dict[str, Any] | None"]


class OptunaSearch(SpaceSearcher):
    """Search with an Optuna sampler (Ray Tune's `OptunaSearch` names).

    Args:
        space: None to use the experiment's `param_space` (the usual way); or a
            define-by-run function ``fn(trial)`` that calls ``trial.suggest_*`` and may
            return a dict of constants to add; or a dict of Optuna distributions
            (``{"x": FloatDistribution(0, 1)}``). "a/b" names become nested keys.
        metric, mode: the objective, or lists of them (several objectives: a Pareto
            front); taken from `TuneConfig` when None.
        points_to_evaluate: configs to try first (each may set only some parameters).
        sampler: an Optuna sampler instance, or one of "tpe" (the default), "gp",
            "cmaes", "qmc", "nsga2", "random", built and seeded by OptunaSearch.
        study_name: the name of the (in-memory) Optuna study.
        storage: must be None: the study's state is kept in the experiment store.
        seed: seeds the samplers OptunaSearch builds (not an instance's).
        evaluated_rewards: the objective values of `points_to_evaluate`, already known:
            the points are then added as finished trials instead of being run.

    Example:
        >>> import tunefleet as tune
        >>> search = OptunaSearch(metric="loss", mode="min", seed=0)
        >>> search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        True
        >>> config = search.suggest("t1")
        >>> 0 <= config["x"] <= 1
        True
    """

    def __init__(
        self,
        space: Mapping[str, Any] | DefineByRun | None = None,
        metric: MetricSpec = None,
        mode: ModeSpec = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        sampler: BaseSampler | str | None = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: list[Any] | None = None,
    ) -> None:
        optuna = import_optional("optuna", owner="OptunaSearch", extra="optuna", needs="Optuna")
        if study_name is not None and not isinstance(study_name, str):
            raise TypeError(f"OptunaSearch: study_name={study_name!r} must be a str or None")
        if storage is not None:
            raise ValueError(
                f"OptunaSearch: storage={storage!r} is not supported: the study lives in "
                "memory and its state in the experiment store (resume with Tuner.restore); "
                "pass storage=None"
            )
        self._study_name = study_name or "tunefleet"
        # several objectives are kept apart (_metric_arg): `metric` names one
        super().__init__(
            metric=metric if isinstance(metric, str) and isinstance(mode, str) else None,
            mode=mode if isinstance(metric, str) and isinstance(mode, str) else None,
        )
        if isinstance(sampler, str):
            if sampler not in SAMPLERS:
                raise ValueError(f"OptunaSearch sampler={sampler!r} is not one of {SAMPLERS}")
        elif sampler is not None:
            if not isinstance(sampler, optuna.samplers.BaseSampler):
                raise TypeError(
                    f"OptunaSearch sampler={sampler!r} must be an Optuna sampler or one of "
                    f"{SAMPLERS}"
                )
            if seed is not None:
                raise ValueError(
                    "OptunaSearch: seed= seeds only the samplers OptunaSearch builds; "
                    "seed your sampler instance yourself (e.g. TPESampler(seed=...))"
                )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"OptunaSearch seed={seed!r} must be an int")
        points = check_points("OptunaSearch", points_to_evaluate)
        # a value or a list of them (several objectives) per point: checked when added
        rewards = check_rewards("OptunaSearch", evaluated_rewards, len(points), numbers=False)
        if space is not None and not callable(space) and not isinstance(space, Mapping):
            raise TypeError(f"OptunaSearch space={space!r} must be a dict, a function or None")
        self._space_arg, self._metric_arg, self._mode_arg = space, metric, mode
        self._own_space = space
        self._points, self._rewards = points, rewards
        self._sampler_arg: BaseSampler | str | None = sampler
        self._seed = seed if seed is not None else random.SystemRandom().getrandbits(31)
        self._asks = 0
        self._asked = StateLog()  # [tunefleet trial id, Optuna trial number] of each ask
        self._asks_before = 0  # the asks of an older state, before `_asked` began
        self._objectives: list[tuple[str, str]] = []
        self._constraints: list[str] = []
        self._space: dict[str, Any] | None = None  # a tunefleet space
        self._define: DefineByRun | None = None
        self._fixed: dict[str, BaseDistribution] | None = None
        self._base: dict[str, Any] = {}  # param_space's constants beside an own `space`
        self._study: Study | None = None
        self._storage: BaseStorage
        self._study_id = 0
        self._live: dict[str, int] = {}  # tunefleet trial id -> Optuna trial number
        self._state: StudyState  # the study's trials as saved state
        self._warned: set[str] = set()

    # ------------------------------------------------------------ setup

    def _setup(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> None:
        """Take the objectives, the constraints and the search space; build the study."""
        metric = self._metric_arg if self._metric_arg is not None else metric
        mode = self._mode_arg if self._mode_arg is not None else mode
        self._objectives = _objectives(metric, mode)
        if isinstance(metric, str) and isinstance(mode, str):
            self.metric, self.mode = metric, mode
        self._constraints = list(spec.get("constraints") or [])
        if self._sampler_arg == "cmaes" and len(self._objectives) > 1:
            raise ValueError(
                "OptunaSearch: sampler='cmaes' optimises one metric, but there are several "
                f"objectives {[m for m, _ in self._objectives]}: use 'tpe', 'nsga2' or 'gp'"
            )
        if self._constraints and self._sampler_arg in ("cmaes", "qmc", "random"):
            logger.warning(
                "OptunaSearch: sampler=%r does not use constraints; %s are only recorded",
                self._sampler_arg,
                self._constraints,
            )
        self._set_space(config)
        self._asks, self._live = 0, {}
        self._asked, self._asks_before = StateLog(), 0
        self._new_study()
        self._add_points()
        self._took(self._space)

    def _set_space(self, config: dict[str, Any]) -> None:
        own = self._space_arg
        if own is None:
            self._space = _checked_space(config)
            return
        for path, domain in _walk(config, ()):
            if not isinstance(domain, Function):
                raise ValueError(
                    f"OptunaSearch: {format_path(path)} is a {domain.name} domain, but "
                    "OptunaSearch(space=...) has its own search space; put every parameter in "
                    "one of them (param_space may add constants and sample_from values)"
                )
        if callable(own):
            self._define, self._base = own, dict(config)
            return
        from optuna.distributions import BaseDistribution

        if own and all(isinstance(d, BaseDistribution) for d in own.values()):
            self._fixed, self._base = dict(own), dict(config)
        else:
            self._space = _checked_space(_merge(config, dict(own)))

    def _fill_objective(self, metric: MetricSpec, mode: ModeSpec, *, strict: bool = False) -> None:
        if not isinstance(self._metric_arg, list):  # several objectives stay its own
            super()._fill_objective(metric, mode, strict=strict)

    def _directions(self) -> list[str]:
        return ["MAXIMIZE" if mode == "max" else "MINIMIZE" for _, mode in self._objectives]

    def _new_study(self) -> None:
        """An empty in-memory study (its storage and id are kept for trial attributes)."""
        import optuna

        storage = optuna.storages.InMemoryStorage()
        with quiet_optuna():
            study = optuna.create_study(
                storage=storage,
                study_name=self._study_name,
                directions=[d.lower() for d in self._directions()],  # type: ignore[misc]
                sampler=self._sampler(),
            )
        self._study, self._storage = study, storage
        self._study_id = storage.get_study_id_from_name(study.study_name)
        self._state = StudyState(storage, self._study_id)

    def _sampler(self) -> BaseSampler:
        """The sampler for the next ask: built from a seed of (seed, asks), or the user's."""
        import optuna.samplers as ot

        if self._sampler_arg is not None and not isinstance(self._sampler_arg, str):
            return self._sampler_arg
        name = self._sampler_arg or "tpe"
        seed = random.Random(f"{self._seed}:{self._asks}").getrandbits(32)
        feasibility = self.constraints_func if self._constraints else None
        quiet: dict[str, Any] = {"seed": seed, "warn_independent_sampling": False}
        if name == "tpe":
            # group: conditional parameters are modelled per branch, not sampled at random
            group = self._define is not None or _is_conditional(self._space)
            return ot.TPESampler(
                multivariate=True,
                group=group,
                constant_liar=True,
                constraints_func=feasibility,
                seed=seed,
            )
        if name == "gp":
            return ot.GPSampler(constraints_func=feasibility, **quiet)
        if name == "cmaes":
            return ot.CmaEsSampler(**quiet)
        if name == "qmc":  # one scrambled sequence for the whole search, whatever the ask
            return ot.QMCSampler(
                scramble=True,
                seed=self._seed % 2**32,
                independent_sampler=ot.RandomSampler(seed=seed),
                warn_asynchronous_seeding=False,
                warn_independent_sampling=False,
            )
        if name == "nsga2":
            return ot.NSGAIISampler(seed=seed, constraints_func=feasibility)
        return ot.RandomSampler(seed=seed)

    @staticmethod
    def convert_search_space(spec: dict[str, Any]) -> dict[str, BaseDistribution]:
        """A tunefleet search space as a dict of Optuna distributions by "a/b" key path
        (Ray's method; what `OptunaSearch(space=...)` takes). A grid_search, an unbounded
        domain or a domain inside a choice's category is refused."""
        return to_distributions(spec)

    @staticmethod
    def constraints_func(trial: FrozenTrial) -> list[float]:
        """A trial's constraint values (<= 0: feasible), for a sampler's `constraints_func`.

        OptunaSearch gives it to the samplers it builds; pass it to your own sampler
        instance to make it use `TuneConfig(constraints=...)`.
        """
        return [float(v) for v in trial.user_attrs.get(_CONSTRAINTS_ATTR, [])]

    def _add_points(self) -> None:
        study = self._require_study()
        for i, point in enumerate(self._points):
            where = f"points_to_evaluate[{i}]"
            if self._rewards is not None:
                self.add_evaluated_point(point, self._rewards[i], where=where)
            else:
                params = point_params(self._space, self._fixed, point, where, complete=False)[0]
                with quiet_optuna():
                    study.enqueue_trial(params)

    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: float | list[float] | None,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
        *,
        where: str = "parameters",
    ) -> None:
        """Tell the study about a config evaluated elsewhere (Ray's names): `value` its
        objective value(s); `error` it failed; `pruned` it was stopped early (its
        `intermediate_values`, one per step, are the study's record of it).

        With `TuneConfig(constraints=...)`, the point counts as feasible.
        """
        import optuna

        study = self._require_study()  # a searcher with its own space sets itself up
        params, dists = point_params(self._space, self._fixed, parameters, where, complete=True)
        values = value if isinstance(value, list) else [value]
        valid = len(values) == len(self._objectives) and all(
            isinstance(v, numbers.Real) and math.isfinite(v) for v in values
        )
        if not valid and not (error or pruned):
            raise ValueError(
                f"OptunaSearch: the value {value!r} of {where} must be "
                f"{len(self._objectives)} finite number(s), one per objective"
            )
        steps = _intermediate(intermediate_values, where)
        # added running, then told: the sampler records it as for any trial (constraints too)
        states = optuna.trial.TrialState
        feasible = [0.0] * len(self._constraints)
        trial = optuna.trial.create_trial(
            state=states.FAIL if error else states.RUNNING,
            params=params,
            distributions=dists,
            user_attrs={_CONSTRAINTS_ATTR: feasible} if feasible else None,
            intermediate_values=steps,
        )
        with quiet_optuna():
            study.add_trial(trial)
            if error:
                return
            number = self._storage.get_n_trials(self._study_id) - 1
            if pruned:
                study.tell(number, state=states.PRUNED)
            else:
                study.tell(number, [float(v or 0.0) for v in values])  # checked finite

    # ------------------------------------------------------------ events

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """Ask the study for a trial and build its config."""
        import optuna

        study = self._require_study()
        with quiet_optuna():
            study.sampler = self._sampler()
            trial = study.ask(self._fixed)
            self._asks += 1
            self._asked.append([trial_id, trial.number])
            try:
                config = self._config(trial)
            except BaseException:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                raise
        self._live[trial_id] = trial.number
        return config

    def _config(self, trial: Trial) -> dict[str, Any]:
        rng = random.Random(f"{self._seed}:config:{trial.number}")  # sample_from's spec.rng
        if self._space is not None:
            return resolve(self._space, rng, chooser=lambda n, d: _suggest(trial, n, d))
        values: dict[str, Any] = dict(trial.params)
        if self._define is not None:
            extra = self._define(trial)
            if extra is not None and not isinstance(extra, dict):
                raise TypeError(
                    f"OptunaSearch: the define-by-run space returned {extra!r}; it must "
                    "return a dict of constants or None"
                )
            values = {**trial.params, **(extra or {})}
        return resolve(_merge(self._base, _unflatten(values)), rng)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell the study the trial's objective values (a failure if there are none)."""
        import optuna

        number = self._live.pop(trial_id, None)
        if number is None or self._study is None:
            return
        values = None if error or result is None else self._values(result)
        feasibility = None if values is None else self._constraint_values(result or {})
        with quiet_optuna():
            if values is None or feasibility is None:
                self._study.tell(number, state=optuna.trial.TrialState.FAIL)
                return
            if self._constraints:  # read back by constraints_func in the sampler's after_trial
                storage = self._storage
                internal = storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
                storage.set_trial_user_attr(internal, _CONSTRAINTS_ATTR, feasibility)
            self._study.tell(number, values)

    def on_trial_stopped_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Tell the study the trial was pruned, with its value at its step (one objective)."""
        number = self._live.pop(trial_id, None)
        if number is not None and self._study is not None:
            values = self._values(result) if result and len(self._objectives) == 1 else None
            step = (result or {}).get("training_iteration")
            tell_pruned(self._study, number, values[0] if values else None, step)

    def _values(self, result: dict[str, Any]) -> list[float] | None:
        return self._read(result, [m for m, _ in self._objectives], "objective")

    def _constraint_values(self, result: dict[str, Any]) -> list[float] | None:
        return self._read(result, self._constraints, "constraint")

    def _read(self, result: dict[str, Any], names: list[str], kind: str) -> list[float] | None:
        """The named values of a result; None (and a warning, once) unless all are finite."""
        values = [metric_value(result, name) for name in names]
        finite = [v for v in values if v is not None and math.isfinite(v)]
        if len(finite) < len(names) and kind not in self._warned:
            self._warned.add(kind)
            logger.warning("OptunaSearch: results without a finite %s %s fail", kind, names)
        return finite if len(finite) == len(names) else None

    def _require_study(self) -> Study:
        if self._study is None:
            self._ready()
        assert self._study is not None
        return self._study

    # ------------------------------------------------------------ state

    def get_state(self) -> dict[str, Any]:
        """JSON-able state: the seed and the directions; the asks (trial id and number),
        the finished trials and the unfinished ones as they changed state, in StateLogs
        (each saved once). The head stays the same as trials come and go: a step saves
        what changed, not the number of trials nor the live ones."""
        self._require_study()
        return {
            "version": _STATE_VERSION,
            "seed": self._seed,
            "asks_before": self._asks_before,
            "directions": self._directions(),
            **self._state.state(),
            "asked": self._asked,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Rebuild the study from `state` (after `set_search_properties`)."""
        if state.get("version") not in (1, 2):  # the previous formats load too
            check_state_version("OptunaSearch", state, _STATE_VERSION)
        self._require_study()
        if state["directions"] != self._directions():
            raise ValueError(
                f"OptunaSearch: the saved search optimised {state['directions']}, this one "
                f"{self._directions()} ({self._objectives})"
            )
        self._seed = int(state["seed"])
        self._new_study()
        with quiet_optuna():
            self._state.restore(self._require_study(), state)
        if state.get("version") in (1, 2):  # asks and live trials in the head
            live = [[str(k), int(v)] for k, v in state["live"].items()]
            self._asked = StateLog(live)
            self._asks_before = int(state["asks"]) - len(live)
        else:
            self._asked = asked_log(state.get("asked"))
            self._asks_before = int(state["asks_before"])
        self._asks = self._asks_before + len(self._asked)
        running = set(self._state.trials.open_numbers())
        self._live = {tid: number for tid, number in self._asked if number in running}


# ---------------------------------------------------------------- objectives


def _objectives(metric: MetricSpec, mode: ModeSpec) -> list[tuple[str, str]]:
    require_metric("OptunaSearch", metric, mode)
    assert metric is not None and mode is not None
    if isinstance(metric, list) and isinstance(mode, list) and len(mode) != len(metric):
        raise ValueError(f"OptunaSearch: metric={metric!r} and mode={mode!r} differ in length")
    if isinstance(mode, list) and not isinstance(metric, list):
        raise ValueError(f"OptunaSearch: mode={mode!r} is a list but metric={metric!r} is not")
    for m in [mode] if isinstance(mode, str) else mode:
        if m not in ("min", "max"):
            raise ValueError(f"OptunaSearch: mode={m!r} is not valid: it must be 'min' or 'max'")
    return objectives(metric, mode)


def _intermediate(values: list[float] | None, where: str) -> dict[int, float]:
    """Optuna's step -> value table of a point's intermediate values."""
    if values is None:
        return {}
    if not isinstance(values, (list, tuple)) or not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values
    ):
        raise TypeError(
            f"OptunaSearch: intermediate_values={values!r} of {where} must be a list of numbers"
        )
    return {step: float(v) for step, v in enumerate(values)}
