"""Assemble an experiment from validated configs and run it to its end."""

from __future__ import annotations

import inspect
import logging
import math
import secrets
import signal
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tunefleet import _collector
from tunefleet._version import __version__
from tunefleet.backends import Backend
from tunefleet.backends._gpu_auto import smallest_share
from tunefleet.backends.local import LocalBackend
from tunefleet.config import RunConfig, TuneConfig, chdir_to_trial_dir, trial_log_files
from tunefleet.engine.commit import restore_callback_states
from tunefleet.engine.controller import Controller, ExperimentSpec
from tunefleet.engine.resume import (
    ResumeState,
    experiment_dir,
    held,
    run_config_json,
    stop_kind,
    tune_config_json,
)
from tunefleet.engine.trial_resources import per_trial_resources
from tunefleet.progress.live import StatusReporter, warnings_shown
from tunefleet.resources import normalize_resources
from tunefleet.schedulers import FIFOScheduler, TrialScheduler
from tunefleet.search import BasicVariantGenerator, Searcher
from tunefleet.search._base import sampled_path
from tunefleet.search._given import WithParamSpace
from tunefleet.stoppers import Stopper, make_stopper
from tunefleet.storage.checkpoint import CheckpointKeeper
from tunefleet.store import ExperimentStore
from tunefleet.store._check import DriverLock
from tunefleet.trainable import resource_request, resources_of, trainable_name, unwrap
from tunefleet.trial import StopCause, Trial

if TYPE_CHECKING:
    from tunefleet.storage.sync import ExperimentSync

logger = logging.getLogger("tunefleet")


def run_experiment(
    trainable: Any,
    param_space: dict[str, Any],
    tune_config: TuneConfig,
    run_config: RunConfig,
    resume: ResumeState | None = None,
    resume_url: str | None = None,
    trials_out: list[Trial] | None = None,
) -> str:
    """Run the experiment (or continue `resume`, kept at `resume_url` if remote); return its
    (local) directory. `trials_out` receives the run's own trial records (their configs
    and last results as sent, not read back from the store), for the results it returns."""
    with warnings_shown(run_config.verbose):
        return _run(trainable, param_space, tune_config, run_config, resume, resume_url, trials_out)


def _run(
    trainable: Any,
    param_space: dict[str, Any],
    tune_config: TuneConfig,
    run_config: RunConfig,
    resume: ResumeState | None,
    resume_url: str | None,
    trials_out: list[Trial] | None = None,
) -> str:
    from tunefleet.storage.location import parse_storage

    if tune_config.reuse_actors is None:  # Ray Tune's default: reuse for functions only
        inner = unwrap(trainable)[0]
        tune_config = replace(tune_config, reuse_actors=not inspect.isclass(inner))
    searcher = _searcher(tune_config, param_space)
    scheduler = _scheduler(tune_config)
    stopper = make_stopper(run_config.stop)
    storage = parse_storage(run_config.storage_path, run_config.storage_filesystem)
    if resume is not None:
        _restore_states(resume, searcher, scheduler, stopper)
        restore_callback_states(resume.callback_states, run_config.callbacks or [])
        name, path = resume.name, resume.path
        lock = DriverLock(path).__enter__()
    else:  # with remote storage, `path` is the local staging folder
        name, path, lock = experiment_dir(
            run_config.storage_path, run_config.name, trainable, storage
        )
    with held(lock):
        backend = _backend(trainable, name, path, tune_config, run_config)
        store = ExperimentStore(path)
        remote = _remote(store, name, storage, resume is not None, resume_url, run_config)
        if resume is None:
            meta = _meta(name, trainable, param_space, tune_config, run_config)
            meta["storage_url"] = remote.url if remote is not None else None
            store.write_meta(meta)
            prefix = str(meta["id_prefix"])
        else:
            _record_resume(store, resume, tune_config)
            prefix = resume.id_prefix
        store.flush()
        sync = _start_sync(path, remote, run_config, backend, store) if remote else None
        spec = _spec(name, path, prefix, trainable, backend, tune_config, run_config, resume)
        if remote is not None:
            spec.storage_url, spec.storage_filesystem = remote.url, remote.fs
        try:
            return _drive(
                spec, backend, store, searcher, scheduler, stopper, run_config, resume, trials_out
            )
        finally:
            if sync is not None:
                sync.close()  # the last upload, after the store is closed


def _remote(
    store: ExperimentStore,
    name: str,
    storage: Any,
    resumed: bool,
    resume_url: str | None,
    run_config: RunConfig,
) -> Any:
    """Where the experiment is kept in remote storage (`storage.location.Storage`), or None.

    A resumed experiment keeps the place it was started with (recorded in its meta),
    whatever `storage_path` says now.
    """
    from tunefleet.storage.location import Storage
    from tunefleet.storage.remote import remote_filesystem

    if not resumed:
        remote = None if storage is None else Storage(storage.join(name), storage.fs)
    else:
        url = resume_url or store.load_meta().get("storage_url")
        if not url:
            return None
        fs = storage.fs if storage is not None else run_config.storage_filesystem
        remote = Storage(str(url), remote_filesystem(str(url), fs).fs)
    return remote


def _start_sync(
    path: str, remote: Any, run_config: RunConfig, backend: Backend, store: ExperimentStore
) -> ExperimentSync:
    """Upload the experiment now (a wrong URL or credentials fail here), then periodically."""
    from tunefleet.storage.remote import register_filesystem
    from tunefleet.storage.sync import ExperimentSync

    config = run_config.sync_config
    sync = ExperimentSync(
        path,
        remote.url,
        register_filesystem(remote.url, remote.fs),  # checkpoints under it, in this process
        period=config.sync_period,
        timeout=config.sync_timeout,
        artifacts=config.sync_artifacts,
    )
    try:
        sync.start()
    except BaseException as exc:
        backend.shutdown()
        store.write_meta({"status": "failed", "ended_at": time.time(), "stop_reason": str(exc)})
        store.close()
        raise
    return sync


def _backend(
    trainable: Any, name: str, path: str, tune_config: TuneConfig, run_config: RunConfig
) -> Backend:
    from tunefleet.backends.simulated import SimulatedBackend, is_simulated

    if is_simulated(trainable):
        return SimulatedBackend(
            unwrap(trainable)[0],
            resources=resources_of(trainable),
            time_budget_s=tune_config.time_budget_s,
            stop=run_config.stop,
        )
    if run_config.backend == "ray":
        from tunefleet.backends.ray import RayBackend

        return RayBackend(
            trainable=trainable,
            experiment_name=name,
            experiment_path=path,
            reuse_actors=bool(tune_config.reuse_actors),
            ray_init=run_config.ray_init,
        )
    totals = None
    if run_config.resources is not None:
        given = normalize_resources(run_config.resources, "RunConfig.resources")
        totals = {k: v for k, v in given.items() if _given(run_config.resources, k)}
    backend = LocalBackend(
        trainable=trainable,
        experiment_name=name,
        experiment_path=path,
        reuse_actors=bool(tune_config.reuse_actors),
        resources=totals,
        memory_usage_threshold=run_config.failure_config.memory_usage_threshold,
        worker_start_timeout_s=run_config.failure_config.worker_start_timeout_s,
    )
    unfit = backend.unfit_reason(resources_of(trainable))
    if unfit is not None and resource_request(trainable) is None:  # else: checked per trial
        backend.shutdown()
        raise ValueError(
            f"No trial of {trainable_name(trainable)} can ever run on this machine: each {unfit}. "
            "Ask for less with tune.with_resources(...), or declare the machine's resources "
            "with RunConfig(resources={...})"
        )
    return backend


def _meta(
    name: str,
    trainable: Any,
    param_space: dict[str, Any],
    tune_config: TuneConfig,
    run_config: RunConfig,
) -> dict[str, Any]:
    """What the store records about a new experiment: enough to resume it."""
    from tunefleet.space import space_to_json

    return {
        "name": name,
        "trainable": trainable_name(trainable),
        "metric": tune_config.metric,
        "mode": tune_config.mode,
        "constraints": tune_config.constraints,
        "param_space": space_to_json(param_space),
        "num_samples": tune_config.num_samples,
        "created_at": time.time(),
        "status": "running",
        "searcher": type(tune_config.search_alg or BasicVariantGenerator()).__name__,
        "scheduler": type(tune_config.scheduler or FIFOScheduler()).__name__,
        "stop": run_config.stop if isinstance(run_config.stop, dict) else None,
        "stop_kind": stop_kind(run_config.stop),
        "resources_per_trial": None if resource_request(trainable) else resources_of(trainable),
        "id_prefix": new_id_prefix(),
        "tune_config": tune_config_json(tune_config),
        "run_config": run_config_json(run_config),
        "tunefleet_version": __version__,
    }


def _record_resume(store: ExperimentStore, resume: ResumeState, tune_config: TuneConfig) -> None:
    store.write_meta(
        {"status": "running", "resumed_at": time.time(), "num_samples": tune_config.num_samples}
    )
    for trial, what in resume.changed:
        store.update_trial(trial)
        store.add_event(trial.trial_id, "resume", {"action": what, "status": trial.status.value})


@_collector.paused()  # a searcher may rebuild its whole history (Optuna's study)
def _restore_states(
    resume: ResumeState, searcher: Searcher, scheduler: TrialScheduler, stopper: Stopper | None
) -> None:
    if resume.searcher_state is not None:
        searcher.set_state(resume.searcher_state)
    if resume.scheduler_state is not None:
        scheduler.set_state(resume.scheduler_state)
    if resume.stopper_state is not None and stopper is not None:
        stopper.set_state(resume.stopper_state)


def _spec(
    name: str,
    path: str,
    prefix: str,
    trainable: Any,
    backend: Backend,
    tune_config: TuneConfig,
    run_config: RunConfig,
    resume: ResumeState | None,
) -> ExperimentSpec:
    ckpt, failures = run_config.checkpoint_config, run_config.failure_config
    resources = resources_of(trainable)
    per_trial = per_trial_resources(trainable, backend.unfit_reason)
    return ExperimentSpec(
        name=name,
        path=path,
        trainable_name=trainable_name(trainable),
        resources=resources,
        metric=tune_config.metric,
        mode=tune_config.mode,
        num_samples=tune_config.num_samples,
        max_concurrent=_max_concurrent(tune_config, backend, None if per_trial else resources),
        time_budget_s=tune_config.time_budget_s,
        max_failures=failures.max_failures,
        node_loss_counts=failures.node_loss_counts,
        fail_fast=failures.fail_fast,
        trial_timeout_s=failures.trial_timeout_s,
        heartbeat_timeout_s=failures.heartbeat_timeout_s,
        nan_policy=failures.nan_policy,
        constraints=list(tune_config.constraints or []),
        elapsed_before_s=resume.elapsed_s if resume else 0.0,
        restart_from_scratch=set(resume.from_scratch) if resume else set(),
        retry_base=dict(resume.retry_base) if resume else {},
        stop_criteria=_flat_criteria(run_config.stop),
        checkpoint_frequency=ckpt.checkpoint_frequency,
        checkpoint_at_end=bool(ckpt.checkpoint_at_end),
        trial_name_creator=tune_config.trial_name_creator,
        trial_dirname_creator=tune_config.trial_dirname_creator,
        id_prefix=prefix,
        log_files=trial_log_files(run_config.log_to_file, "RunConfig.log_to_file"),
        chdir_to_trial_dir=chdir_to_trial_dir(),
        per_trial=per_trial,
    )


def _drive(
    spec: ExperimentSpec,
    backend: Backend,
    store: ExperimentStore,
    searcher: Searcher,
    scheduler: TrialScheduler,
    stopper: Stopper | None,
    run_config: RunConfig,
    resume: ResumeState | None,
    trials_out: list[Trial] | None = None,
) -> str:
    ckpt = run_config.checkpoint_config
    reporter = StatusReporter(
        verbose=run_config.verbose,
        metric=spec.metric,
        mode=spec.mode,
        constraints=spec.constraints,
        progress_reporter=run_config.progress_reporter,
    )
    controller = Controller(
        spec=spec,
        backend=backend,
        store=store,
        searcher=searcher,
        scheduler=scheduler,
        stopper=stopper,
        keeper=CheckpointKeeper(
            ckpt.num_to_keep, ckpt.checkpoint_score_attribute, ckpt.checkpoint_score_order
        ),
        callbacks=list(run_config.callbacks or []),
        reporter=reporter,
        trials=resume.trials if resume else None,
        clock=backend.clock,  # the simulated backend's is virtual
    )
    status = "failed"
    try:
        controller.run()
        interrupted = controller.stop_reason is StopCause.INTERRUPTED
        status = "interrupted" if interrupted else "finished"
        if trials_out is not None:
            trials_out.extend(controller.trial_list)
    finally:
        store.write_meta(
            {"status": status, "ended_at": time.time(), "stop_reason": controller.stop_reason}
        )
        store.close()
        reporter.finish(
            list(controller.trial_list), spec.path, controller.stop_reason, controller.progress()
        )
    if controller.ctrl_c.terminated:  # SIGTERM: wound down and closed; exit as killed by it
        raise SystemExit(128 + signal.SIGTERM)
    return spec.path


def _given(spec: dict[str, Any], key: str) -> bool:
    aliases = {"cpu": ("cpu", "cpus", "num_cpus"), "gpu": ("gpu", "gpus", "num_gpus")}
    return any(k.lower() in aliases.get(key, (key,)) for k in spec)


def _searcher(tune_config: TuneConfig, param_space: dict[str, Any]) -> Searcher:
    searcher = tune_config.search_alg or BasicVariantGenerator()
    if not isinstance(searcher, Searcher):
        raise TypeError(
            f"TuneConfig.search_alg={searcher!r} is not a tunefleet Searcher (see tunefleet.search)"
        )
    ok = searcher.set_search_properties(
        tune_config.metric,
        tune_config.mode,
        param_space,
        num_samples=tune_config.num_samples,
        constraints=tune_config.constraints,
    )
    if ok:
        return searcher
    sampled = sampled_path(param_space)
    if sampled is not None:  # Ray's rule: the searcher has a space of its own
        raise ValueError(
            f"{type(searcher).__name__} was already instantiated with a search space, and "
            f"param_space has unresolved parameters too ({sampled}): give the search space "
            "once, in the search algorithm (param_space may then hold only constants), or "
            "build the searcher without space= and pass param_space"
        )
    return WithParamSpace(searcher, param_space) if param_space else searcher


def _scheduler(tune_config: TuneConfig) -> TrialScheduler:
    scheduler = tune_config.scheduler or FIFOScheduler()
    if not isinstance(scheduler, TrialScheduler):
        raise TypeError(
            f"TuneConfig.scheduler={scheduler!r} is not a tunefleet TrialScheduler "
            "(see tunefleet.schedulers)"
        )
    if not scheduler.set_search_properties(tune_config.metric, tune_config.mode):
        raise ValueError(  # Ray Tune's rule and words
            f"You passed metric={tune_config.metric!r} or mode={tune_config.mode!r} to "
            f"TuneConfig(), but the scheduler {type(scheduler).__name__} was already given "
            "its own metric and mode. Either remove the arguments from your scheduler or "
            "from TuneConfig()."
        )
    return scheduler


def _max_concurrent(
    tune_config: TuneConfig, backend: Backend, resources: dict[str, float] | None
) -> int:
    """How many trials at once: what fits, capped by max_concurrent_trials.

    A cluster that grows and shrinks (the Ray backend), or trials whose resources differ
    (`resources` None), have no fixed limit: the backend says what fits now (`can_start`).
    """
    if backend.elastic or resources is None:
        return tune_config.max_concurrent_trials or sys.maxsize
    capacity = backend.capacity()
    resources = smallest_share(resources)  # gpu="auto": as many as 1/MAX_PER_GPU lets
    fits = math.inf
    for name, amount in resources.items():
        if amount > 0:
            fits = min(fits, capacity.get(name, 0.0) / amount)
    if math.isinf(fits):  # a trial that needs nothing: one per core
        fits = capacity.get("cpu", 1.0)
    limit = max(1, int(fits + 1e-9))
    if tune_config.max_concurrent_trials:  # None or 0: no limit
        limit = min(limit, tune_config.max_concurrent_trials)
    return limit


def _flat_criteria(stop: Any) -> dict[str, float]:
    """The numeric, flat-key part of a dict stop condition: trials check it themselves."""
    if not isinstance(stop, dict):
        return {}
    return {
        k: float(v)
        for k, v in stop.items()
        if isinstance(k, str)
        and "/" not in k
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
    }


def new_id_prefix() -> str:
    return secrets.token_hex(3)[:5]
