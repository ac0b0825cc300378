"""Population Based Bandits (Parker-Holder et al., 2020): PBT whose explore is a GP bandit.

PB2 exploits as PBT does (the bottom quantile copies the top one), but instead of
perturbing the copied config at random it picks the new values of the bounded
hyperparameters with GP-UCB: a Gaussian process (scikit-learn's
`GaussianProcessRegressor`) models the change of the score per unit of
`time_attr` over one interval as a function of (time, score before, config), and
the new config maximises its upper confidence bound at the source's time and
score. The kernel is the paper's time-varying one: a squared exponential over
(score before, config) times ``(1 - epsilon) ** (|t - t'| / 2)`` with t counted in
perturbation intervals, so that old observations count less; its length scales
and epsilon are fitted by maximum likelihood. Configs already chosen for the same
time (a synchronous round) count as pending observations that lower the GP's
variance where they are (GP-BUCB, Desautels et al., 2014), as in Ray Tune.

scikit-learn is imported only when a PB2 is created: ``pip install 'tunefleet[pb2]'``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import math
import random
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from tunefleet._metrics import as_number
from tunefleet._redact import get_logger
from tunefleet.schedulers._pbt import PopulationBasedTraining
from tunefleet.space import Float
from tunefleet.trial import Trial

#: The GP is fitted on the most recent data points only: its cost grows as n^3 and
#: old points count little under the time-varying kernel (an explore: ~20-35 ms).
MAX_DATA_POINTS = 80
_CANDIDATES = 256  # random candidates for the acquisition, then two local rounds
_LOCAL = 32  # candidates around each of the best four, per local round
_FIT_ITERATIONS = 20  # L-BFGS-B iterations per fit (warm-started from the last fit)

Bound = tuple[tuple[str, ...], float, float]  # (key path, low, high)
logger = get_logger(__name__)


class PB2(PopulationBasedTraining):
    """Population Based Bandits with Ray Tune's arguments.

    Args:
        time_attr: the result key that measures progress.
        metric, mode: what to optimise (default: the experiment's).
        perturbation_interval: exploit/explore every this much of `time_attr`.
        hyperparam_bounds: ``{key: [low, high]}`` for each continuous hyperparameter
            PB2 tunes (nested dicts for nested keys); other keys are copied from the
            source. A value that is an int in the source config stays an int.
        quantile_fraction: the bottom and top fractions of the population (<= 0.5).
        log_config: accepted for Ray Tune compatibility (the lineage is recorded).
        require_attrs: a result without `time_attr` or the metric is an error; with
            False it is ignored.
        synch: synchronous PB2 (see `PopulationBasedTraining`).
        custom_explore_fn: applied to each new config after the GP's choice.
        seed: the random generator's seed (decisions are reproducible).

    Example:
        >>> pb2 = PB2(time_attr="training_iteration", perturbation_interval=4,
        ...           hyperparam_bounds={"lr": [1e-4, 1e-1], "momentum": [0.8, 0.99]})
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: Mapping[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        seed: int | None = None,
    ) -> None:
        self._bounds = _flat_bounds(hyperparam_bounds)
        _require_sklearn()
        super().__init__(
            time_attr=time_attr,
            metric=metric,
            mode=mode,
            perturbation_interval=perturbation_interval,
            hyperparam_mutations=_as_domains(self._bounds),
            quantile_fraction=quantile_fraction,
            resample_probability=0.0,
            custom_explore_fn=custom_explore_fn,
            log_config=log_config,
            require_attrs=require_attrs,
            synch=synch,
            seed=seed,
        )
        self.hyperparam_bounds = dict(hyperparam_bounds or {})
        # rows [time, score before, score change per unit of time, *values]
        self._data: list[list[float]] = []
        self._recorded = 0  # rows ever recorded: the version of the data
        self._prev: dict[str, list[Any]] = {}  # trial -> [time, score, values] of its step
        self._batch: list[list[float]] = []  # configs chosen for the latest time (scaled)
        self._batch_time = -math.inf
        self._theta: list[float] | None = None  # the last fit's kernel parameters (log)
        self._fit_from: list[float] | None = None  # ... and where that fit started
        self._fitted_on = -1  # `_recorded` at the last fit
        self._gp: Any = None  # the last fitted GP (rebuilt from the state when needed)

    # -- data ------------------------------------------------------------------------------
    def _values(self, config: Mapping[str, Any]) -> list[float] | None:
        """The bounded hyperparameters of `config`, or None when one is not a number."""
        out = []
        for path, _, _ in self._bounds:
            node: Any = config
            for key in path:
                node = node.get(key) if isinstance(node, Mapping) else None
            value = as_number(node)
            if value is None or not math.isfinite(value):
                return None
            out.append(value)
        return out

    def _observe(self, trial: Trial, now: float, score: float, *, boundary: bool) -> None:
        """Record the score change over each interval run with one config."""
        tid = trial.trial_id
        values = self._values(trial.config)
        prev = self._prev.get(tid)
        if values is None or not math.isfinite(score) or not math.isfinite(now):
            self._prev.pop(tid, None)  # NaN-safe: nothing is learnt from this step
            return
        if prev is None or prev[2] != values:  # the first result, or a new config
            self._prev[tid] = [now, score, values]
            return
        if not boundary:
            return
        if now > prev[0]:
            change = (score - prev[1]) / (now - prev[0])
            if math.isfinite(change):
                self._data.append([now, prev[1], change, *values])
                self._recorded += 1
                del self._data[:-MAX_DATA_POINTS]
        self._prev[tid] = [now, score, values]

    # -- explore ---------------------------------------------------------------------------
    def _explore_for(self, trial_id: str, source: str, rng: random.Random) -> dict[str, Any]:
        config = copy.deepcopy(self._configs.get(source, {}))
        at = self._prev.get(source)
        chosen = self._select(at, rng)
        for (path, _, _), value in zip(self._bounds, chosen, strict=True):
            old = _get(config, path)
            whole = isinstance(old, int) and not isinstance(old, bool)
            _set(config, path, round(value) if whole else value)
        if self.custom_explore_fn is not None:
            config = self.custom_explore_fn(config)
        values = self._values(config)
        if at is not None and values is not None:  # it goes on from the source's step
            self._prev[trial_id] = [at[0], at[1], values]
        else:
            self._prev.pop(trial_id, None)
        return config

    def _select(self, at: list[Any] | None, rng: random.Random) -> list[float]:
        """The new values: GP-UCB's choice, or uniform ones while data is too scarce."""
        lows = [low for _, low, _ in self._bounds]
        spans = [high - low for _, low, high in self._bounds]
        if at is None or len(self._data) < 3:
            return [low + rng.random() * span for low, span in zip(lows, spans, strict=True)]
        try:
            with _one_blas_thread():
                scaled = self._ucb_choice(float(at[0]), float(at[1]), rng)
        except (ArithmeticError, ValueError) as exc:  # an ill-conditioned fit: explore
            logger.warning("PB2: the GP fit failed (%s); a random config is used", exc)
            return [low + rng.random() * span for low, span in zip(lows, spans, strict=True)]
        return [
            min(max(low + x * span, low), low + span)
            for x, low, span in zip(scaled, lows, spans, strict=True)
        ]

    def _ucb_choice(self, now: float, score: float, rng: random.Random) -> list[float]:
        import numpy as np

        data = np.asarray(self._data, dtype=float)
        lows = np.array([low for _, low, _ in self._bounds])
        spans = np.array([high - low for _, low, high in self._bounds])
        r_lo, r_hi = data[:, 1].min(), data[:, 1].max()  # the data's only: x is the fit's key
        r_span = r_hi - r_lo if r_hi > r_lo else 1.0
        x = np.column_stack(
            [data[:, 0] / self.interval, (data[:, 1] - r_lo) / r_span, (data[:, 3:] - lows) / spans]
        )
        y = data[:, 2]
        y = (y - y.mean()) / (y.std() or 1.0)
        gp = self._fit(x, y)
        if data[:, 0].max() > self._batch_time:  # a new time: earlier choices are stale
            self._batch, self._batch_time = [], float(data[:, 0].max())
        fixed = [now / self.interval, (score - r_lo) / r_span]
        var_gp = gp
        if self._batch:  # chosen, not yet observed: less uncertain there (no new fit)
            from sklearn.gaussian_process import GaussianProcessRegressor

            pending = np.column_stack(
                [np.tile(fixed, (len(self._batch), 1)), np.asarray(self._batch)]
            )
            var_gp = GaussianProcessRegressor(kernel=gp.kernel_, optimizer=None)
            var_gp.fit(np.vstack([x, pending]), np.concatenate([y, np.zeros(len(pending))]))
        kappa = math.sqrt(0.2 + max(0.0, math.log(0.4 * len(y))))  # Ray Tune's beta_t

        def ucb(points: Any) -> Any:
            full = np.column_stack([np.tile(fixed, (len(points), 1)), points])
            mean = gp.predict(full)
            _, std = var_gp.predict(full, return_std=True)
            return mean + kappa * std

        gen = np.random.default_rng(rng.getrandbits(64))
        dims = len(self._bounds)
        points = gen.random((_CANDIDATES, dims))
        values = ucb(points)
        for sigma in (0.1, 0.02):  # local search around the best so far
            best = points[np.argsort(values)[-4:]]
            local = np.repeat(best, _LOCAL, axis=0) + gen.normal(0.0, sigma, (4 * _LOCAL, dims))
            local = np.clip(local, 0.0, 1.0)
            points = np.vstack([points, local])
            values = np.concatenate([values, ucb(local)])
        chosen = points[int(np.argmax(values))]
        self._batch.append([float(v) for v in chosen])
        return [float(v) for v in chosen]

    def _fit(self, x: Any, y: Any) -> Any:
        """The GP on (x, y), warm-started from the last fit; the same data gives the same
        GP (also after a restore: the state keeps where each fit started)."""
        if self._fitted_on != self._recorded:
            self._fit_from, self._fitted_on, self._gp = self._theta, self._recorded, None
        if self._gp is None:
            self._gp = _fit_gp(x, y, self._fit_from)
            self._theta = [float(t) for t in self._gp.kernel_.theta]
        return self._gp

    # -- state -----------------------------------------------------------------------------
    def _leave(self, trial_id: str) -> None:
        super()._leave(trial_id)
        self._prev.pop(trial_id, None)

    def get_state(self) -> dict[str, Any]:
        return super().get_state() | {
            "pb2": {
                "data": [list(row) for row in self._data],
                "recorded": self._recorded,
                "prev": {tid: [p[0], p[1], list(p[2])] for tid, p in self._prev.items()},
                "batch": [list(b) for b in self._batch],
                "batch_time": self._batch_time,
                "theta": self._theta,
                "fit_from": self._fit_from,
                "fitted_on": self._fitted_on,
            }
        }

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        pb2 = state.get("pb2", {})
        self._data = [[float(v) for v in row] for row in pb2.get("data", [])]
        self._recorded = int(pb2.get("recorded", len(self._data)))
        self._prev = {
            str(tid): [float(p[0]), float(p[1]), [float(v) for v in p[2]]]
            for tid, p in pb2.get("prev", {}).items()
        }
        self._batch = [[float(v) for v in b] for b in pb2.get("batch", [])]
        self._batch_time = float(pb2.get("batch_time", -math.inf))
        self._theta = pb2.get("theta")
        self._fit_from = pb2.get("fit_from")
        self._fitted_on = int(pb2.get("fitted_on", -1))
        self._gp = None


# -- arguments --------------------------------------------------------------------------
def _flat_bounds(bounds: Mapping[str, Any] | None, prefix: tuple[str, ...] = ()) -> list[Bound]:
    """[(path, low, high)] of `hyperparam_bounds`, checked: loud errors naming the key."""
    if not prefix and not bounds:
        raise ValueError(
            "PB2 needs hyperparam_bounds, e.g. {'lr': [1e-4, 1e-1]}: the continuous "
            "hyperparameters it tunes, each with [low, high]"
        )
    if not isinstance(bounds, Mapping):
        raise ValueError(f"PB2: hyperparam_bounds={bounds!r} must be a dict of [low, high]")
    out: list[Bound] = []
    for key, spec in bounds.items():
        path = (*prefix, key)
        where = "hyperparam_bounds" + "".join(f"[{k!r}]" for k in path)
        if not isinstance(key, str):
            raise ValueError(f"PB2: {where}: keys must be strings")
        if isinstance(spec, Mapping):
            if not spec:
                raise ValueError(f"PB2: {where}={{}}: a nested dict needs at least one key")
            out.extend(_flat_bounds(spec, path))
            continue
        pair = list(spec) if isinstance(spec, (list, tuple)) else None
        if pair is None or len(pair) != 2:
            raise ValueError(f"PB2: {where}={spec!r}: must be [low, high] (or a nested dict)")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in pair):
            raise ValueError(f"PB2: {where}={spec!r}: low and high must be numbers")
        low, high = float(pair[0]), float(pair[1])
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"PB2: {where}={spec!r}: low and high must be finite")
        if not low < high:
            raise ValueError(f"PB2: {where}={spec!r}: low must be < high")
        out.append((path, low, high))
    return out


def _as_domains(bounds: list[Bound]) -> dict[str, Any]:
    """The bounds as PBT mutations (uniform domains), for PBT's own checks."""
    out: dict[str, Any] = {}
    for path, low, high in bounds:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = Float(low, high)
    return out


def _require_sklearn() -> None:
    try:
        import sklearn.gaussian_process  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "PB2 needs scikit-learn (its Gaussian process): pip install 'tunefleet[pb2]'"
        ) from exc


def _get(config: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _set(config: dict[str, Any], path: tuple[str, ...], value: float) -> None:
    node = config
    for key in path[:-1]:
        child = node.get(key)
        node[key] = child = dict(child) if isinstance(child, Mapping) else {}
        node = child
    node[path[-1]] = value


# -- the Gaussian process (scikit-learn) -------------------------------------------------------
def _fit_gp(x: Any, y: Any, theta: list[float] | None) -> Any:
    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    kernel = ConstantKernel(1.0, (1e-2, 1e2)) * _kernel_class()(
        length_scale=np.ones(x.shape[1] - 1)
    ) + WhiteKernel(0.1, (1e-5, 1.0))
    if theta is not None and len(theta) == len(kernel.theta):
        kernel = kernel.clone_with_theta(np.asarray(theta))

    minimize = importlib.import_module("scipy.optimize").minimize  # scipy has no type hints

    def optimizer(objective: Any, start: Any, bounds: Any) -> tuple[Any, float]:
        found = minimize(
            objective,
            start,
            method="L-BFGS-B",
            jac=True,
            bounds=bounds,
            options={"maxiter": _FIT_ITERATIONS},
        )
        return found.x, float(found.fun)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a length scale at a bound
        return GaussianProcessRegressor(kernel, optimizer=optimizer).fit(x, y)


def _one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """BLAS on one thread: at 100 points its threads cost more than they save (a fit
    took 250 ms instead of 30 on two cores). threadpoolctl comes with scikit-learn."""
    controller = _blas_controller()
    return (
        contextlib.nullcontext()
        if controller is None
        else controller.limit(limits=1, user_api="blas")
    )


@functools.cache
def _blas_controller() -> Any:
    try:  # created once: it scans the loaded libraries (~10 ms)
        return importlib.import_module("threadpoolctl").ThreadpoolController()
    except ImportError:  # pragma: no cover - a dependency of scikit-learn
        return None


@functools.cache
def _kernel_class() -> Any:
    """The time-varying kernel as a scikit-learn kernel (built on first use: lazy import)."""
    import numpy as np
    from sklearn.gaussian_process import kernels as k

    class TimeVaryingKernel(k.StationaryKernelMixin, k.NormalizedKernelMixin, k.Kernel):  # type: ignore[misc]
        """k(x, x') = exp(-sum_d (x_d - x'_d)^2 / 2 l_d^2) * (1 - eps)^(|t - t'| / 2),
        where column 0 is the time t and the other columns are the x_d."""

        def __init__(
            self,
            length_scale: Any = 1.0,
            epsilon: float = 0.1,
            length_scale_bounds: tuple[float, float] = (0.05, 20.0),
            epsilon_bounds: tuple[float, float] = (1e-3, 0.5),
        ) -> None:
            self.length_scale = length_scale
            self.epsilon = epsilon
            self.length_scale_bounds = length_scale_bounds
            self.epsilon_bounds = epsilon_bounds

        @property
        def hyperparameter_length_scale(self) -> Any:
            n = int(np.size(self.length_scale))
            return k.Hyperparameter("length_scale", "numeric", self.length_scale_bounds, n)

        @property
        def hyperparameter_epsilon(self) -> Any:
            return k.Hyperparameter("epsilon", "numeric", self.epsilon_bounds)

        def __call__(self, X: Any, Y: Any = None, eval_gradient: bool = False) -> Any:
            X = np.atleast_2d(X)
            Z = X if Y is None else np.atleast_2d(Y)
            eps = float(self.epsilon)
            scales = np.broadcast_to(np.asarray(self.length_scale, float), (X.shape[1] - 1,))
            squares = [
                np.subtract.outer(X[:, d], Z[:, d]) ** 2 / scales[d - 1] ** 2
                for d in range(1, X.shape[1])
            ]
            dt = np.abs(np.subtract.outer(X[:, 0], Z[:, 0]))
            K = np.exp(-0.5 * sum(squares) + 0.5 * math.log1p(-eps) * dt)
            if not eval_gradient:
                return K
            if Y is not None:
                raise ValueError("the gradient is only defined when Y is None")
            # d/d log(theta), theta in sklearn's order: epsilon, then the length scales
            grad = np.empty((*K.shape, 1 + len(squares)))
            grad[..., 0] = K * dt * (-0.5 * eps / (1.0 - eps))
            for d, square in enumerate(squares):
                grad[..., d + 1] = K * square
            return K, grad

    return TimeVaryingKernel
