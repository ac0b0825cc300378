"""The acquisition Ray's `utility_kwargs` ask for, on Optuna's GPSampler.

Ray's BayesOptSearch hands `utility_kwargs` to bayes_opt's `UtilityFunction`:
``"ucb"`` (mean + kappa * std, bayes_opt's default, kappa 2.576), ``"ei"`` (expected
improvement over the best value + xi) or ``"poi"`` (probability of improving on the
best value + xi). GPSampler maximises log EI with no margin, so that one (and None)
runs GPSampler as it is; the others run `AcquisitionGPSampler`, which lets GPSampler
fit its GP and swaps the acquisition it built for Optuna's own UCB, LogEI or LogPI
at `_optimize_acqf`.

GPSampler models the objective standardized (maximised, mean 0, std 1), so `xi`,
given in the metric's units, is divided by the std of the finished values, as
GPSampler computes it; UCB's argmax is the same in both units. Trials still running
are met as GPSampler meets them: q-batch LogEI for "ei"; for "ucb" and "poi" the GP
believes its own mean at the running trials' points (Kriging believer, what Optuna 5.0's
LogPI did; `_believer`), which shrinks the uncertainty there, so a batch spreads out.

`_optimize_acqf`, `_sample_relative_impl` and `optuna._gp` are private Optuna API:
`check_optuna` checks every name and parameter relied on (pinned by a test) and
refuses, naming the version and the nearest equivalent, where one is missing.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler, GPSampler

# bayes_opt's UtilityFunction arguments and defaults (kind, kappa, xi, decay, delay)
_DEFAULTS: dict[str, Any] = {
    "kind": "ucb",
    "kappa": 2.576,
    "xi": 0.0,
    "kappa_decay": 1,
    "kappa_decay_delay": 0,
}
_MIN_BETA = 1e-20
NEAREST = "utility_kwargs={'kind': 'ei', 'xi': 0.0} (or None, the same)"

# the private Optuna names relied on: (module, attribute, parameters it must take)
PRIVATE_API: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "optuna.samplers._gp.sampler",
        "GPSampler._sample_relative_impl",
        ("study", "completed_trials", "running_trials", "search_space"),
    ),
    ("optuna.samplers._gp.sampler", "GPSampler._optimize_acqf", ("acqf", "best_params")),
    ("optuna.samplers._gp.sampler", "_standardize_values", ("values",)),
    ("optuna.samplers._gp.sampler", "_get_params", ("trial",)),
    ("optuna.samplers._gp.sampler", "EPS", ()),
    ("optuna.samplers._gp.sampler", "_MAX_QMC_SEED_VALUE", ()),
    ("optuna._gp.acqf", "UCB", ("gpr", "search_space", "beta")),
    ("optuna._gp.acqf", "LogEI", ("gpr", "search_space", "threshold")),
    (
        "optuna._gp.acqf",
        "qLogEI",
        (
            "gpr",
            "search_space",
            "threshold",
            "n_qmc_samples",
            "qmc_seed",
            "normalized_params_of_running_trials",
        ),
    ),
    ("optuna._gp.acqf", "LogPI", ("gpr", "search_space", "threshold")),
    (
        "optuna._gp.gp",
        "GPRegressor",
        (
            "is_categorical",
            "X_train",
            "y_train",
            "inverse_squared_lengthscales",
            "kernel_scale",
            "noise_var",
        ),
    ),
    ("optuna._gp.gp", "GPRegressor._cache_matrix", ()),
    ("optuna._gp.search_space", "SearchSpace.get_normalized_params", ("trials",)),
)


class Kind(enum.Enum):
    """bayes_opt's acquisition kinds."""

    UCB = "ucb"
    EI = "ei"
    POI = "poi"


@dataclass(frozen=True)
class Acquisition:
    """What `utility_kwargs` ask for: the kind, UCB's kappa, EI's and PI's xi (in the
    metric's units)."""

    kind: Kind
    kappa: float
    xi: float

    @property
    def gp_default(self) -> bool:
        """GPSampler's own acquisition: log EI with no margin."""
        return self.kind is Kind.EI and self.xi == 0


def parse_utility(kwargs: Any, optuna: Any) -> Acquisition | None:
    """Ray's `utility_kwargs` checked (None: GPSampler's log EI). Missing keys take
    bayes_opt's defaults (kind "ucb", kappa 2.576, xi 0.0); `kappa_decay` and
    `kappa_decay_delay` are checked and, as in Ray (bayes_opt decays kappa only in
    its own `maximize` loop, which Ray does not use), change nothing."""
    if kwargs is None:
        return None
    where = "BayesOptSearch: utility_kwargs"
    if not isinstance(kwargs, dict):
        raise TypeError(f"{where}={kwargs!r} must be a dict or None")
    unknown = sorted(set(kwargs) - set(_DEFAULTS), key=str)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; bayes_opt's are {list(_DEFAULTS)}")
    given = {**_DEFAULTS, **kwargs}
    kinds = [k.value for k in Kind]
    if given["kind"] not in kinds:
        raise ValueError(f"{where}['kind']={given['kind']!r} must be one of {kinds}")
    for key, low in (("kappa", 0.0), ("xi", -math.inf), ("kappa_decay", 0.0)):
        value = given[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where}['{key}']={value!r} must be a number")
        if not math.isfinite(value) or value < low:
            raise ValueError(f"{where}['{key}']={value!r} must be a finite number >= {low}")
    delay = given["kappa_decay_delay"]
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise ValueError(f"{where}['kappa_decay_delay']={delay!r} must be an int >= 0")
    acquisition = Acquisition(Kind(given["kind"]), float(given["kappa"]), float(given["xi"]))
    if not acquisition.gp_default:
        check_optuna(optuna, f"{where} {_describe(acquisition)}")
    return acquisition


def check_constraints(acquisition: Acquisition | None, constraints: list[str]) -> None:
    """Refuse an acquisition other than log EI with `TuneConfig.constraints`: GPSampler's
    constrained acquisition is log EI plus the log probability of feasibility."""
    if constraints and acquisition is not None and not acquisition.gp_default:
        raise ValueError(
            f"BayesOptSearch: utility_kwargs {_describe(acquisition)} cannot be honoured with "
            f"TuneConfig.constraints={constraints!r}: GPSampler's constrained acquisition is "
            f"expected improvement times the probability of feasibility; use {NEAREST}"
        )


def check_optuna(optuna: Any, what: str) -> None:
    """Every private Optuna name (and parameter) in `PRIVATE_API` exists, or refuse."""
    missing = []
    for module_name, attribute, params in PRIVATE_API:
        try:
            found: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                found = getattr(found, part)
            if params and not set(params) <= set(inspect.signature(found).parameters):
                missing.append(f"{module_name}.{attribute}{params}")
        except (ImportError, AttributeError, TypeError, ValueError):
            missing.append(f"{module_name}.{attribute}")
    if missing:
        raise ValueError(
            f"{what} needs the acquisition classes of optuna 5 (the bayesopt extra, "
            f"optuna>=5,<6); optuna {optuna.__version__} is installed and lacks {missing}. "
            f"The nearest GPSampler offers: {NEAREST}"
        )


def gp_sampler(acquisition: Acquisition | None, **kwargs: Any) -> BaseSampler:
    """GPSampler (given its keyword arguments) maximising `acquisition`."""
    if acquisition is None or acquisition.gp_default:
        from optuna.samplers import GPSampler

        return GPSampler(**kwargs)
    return _sampler_class()(acquisition, **kwargs)


def _describe(acquisition: Acquisition) -> str:
    if acquisition.kind is Kind.UCB:
        return f"kind='ucb' (kappa={acquisition.kappa})"
    return f"kind={acquisition.kind.value!r} (xi={acquisition.xi})"


@functools.cache
def _sampler_class() -> Callable[..., GPSampler]:
    """The GPSampler subclass, made on first use (Optuna is an optional library)."""
    import numpy as np
    import torch
    from optuna._gp import acqf as acqf_module
    from optuna.samplers import GPSampler
    from optuna.samplers._gp import sampler as gp_module
    from optuna.study import StudyDirection

    class AcquisitionGPSampler(GPSampler):
        """GPSampler maximising UCB, LogEI over best + xi, or LogPI over best + xi."""

        def __init__(self, acquisition: Acquisition, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._acquisition = acquisition
            self._observed: tuple[Any, list[Any], list[Any]] | None = None

        def _sample_relative_impl(
            self,
            study: Any,
            completed_trials: list[Any],
            running_trials: list[Any],
            search_space: dict[str, Any],
        ) -> dict[str, Any]:
            self._observed = (study, completed_trials, running_trials)
            try:
                return super()._sample_relative_impl(
                    study, completed_trials, running_trials, search_space
                )
            finally:
                self._observed = None

        def _optimize_acqf(self, acqf: Any, best_params: Any) -> Any:
            return super()._optimize_acqf(self._swapped(acqf), best_params)

        def _swapped(self, acqf: Any) -> Any:
            if not isinstance(acqf, (acqf_module.LogEI, acqf_module.qLogEI)):
                raise RuntimeError(  # constraints are refused before; one objective only
                    f"BayesOptSearch: unexpected GPSampler acquisition {type(acqf).__name__}"
                )
            assert self._observed is not None and self._gprs_cache_list is not None
            study, completed, running = self._observed
            gpr, space = self._gprs_cache_list[0], acqf.search_space
            sign = -1.0 if study.direction == StudyDirection.MINIMIZE else 1.0
            scores, _, stds = gp_module._standardize_values(
                sign * np.array([t.values for t in completed])
            )
            # bayes_opt's margin over the best value, in GPSampler's standardized units
            threshold = float(scores[:, 0].max()) + self._acquisition.xi / max(
                gp_module.EPS, float(stds[0])
            )
            x_running = (
                space.get_normalized_params(running, [gp_module._get_params(t) for t in running])
                if running
                else None
            )
            kind = self._acquisition.kind
            if kind is not Kind.EI and x_running is not None:
                gpr = _believer(gpr, torch.from_numpy(x_running))
            if kind is Kind.UCB:
                # beta > 0: sqrt(0 * var) has no gradient (NaN); 1e-10 * std changes nothing
                beta = max(self._acquisition.kappa**2, _MIN_BETA)
                return acqf_module.UCB(gpr=gpr, search_space=space, beta=beta)
            if kind is Kind.POI:
                return acqf_module.LogPI(gpr=gpr, search_space=space, threshold=threshold)
            if x_running is None:
                return acqf_module.LogEI(gpr=gpr, search_space=space, threshold=threshold)
            return acqf_module.qLogEI(
                gpr=gpr,
                search_space=space,
                threshold=threshold,
                n_qmc_samples=self._n_qmc_samples_qei,
                qmc_seed=self._rng.rng.randint(gp_module._MAX_QMC_SEED_VALUE),
                normalized_params_of_running_trials=x_running,
            )

    return AcquisitionGPSampler


def _believer(gpr: Any, x_running: Any) -> Any:
    """The GP that has also seen its own mean at the running trials' points (the Kriging
    believer): the same kernel, the running points added to its data, so the uncertainty
    there shrinks and a batch of suggestions spreads out. What Optuna 5.0's
    `append_running_data` did in place (a Cholesky update); built anew, as Optuna 5.1 has
    none, with the same posterior."""
    import torch

    mean = gpr.posterior(x_running)[0].detach()
    believer = type(gpr)(
        is_categorical=gpr._is_categorical,
        X_train=torch.cat([gpr._X_train, x_running], dim=0),
        y_train=torch.cat([gpr._y_train.squeeze(-1), mean], dim=0),
        inverse_squared_lengthscales=gpr.inverse_squared_lengthscales,
        kernel_scale=gpr.kernel_scale,
        noise_var=gpr.noise_var,
    )
    believer._cache_matrix()
    return believer
