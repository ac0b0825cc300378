"""What `tunefleet port` rewrites: Ray Tune's module paths and names, and tunefleet's.

Data only; `tunefleet.cli.port` reads it. A name that a mapped Ray module exports is
looked up under the same name in the tunefleet module (``ray.tune.Tuner`` ->
``tunefleet.Tuner``) unless `NAMES` says otherwise; a name tunefleet does not have is
left as is and listed as not ported. Add a row here when tunefleet gains a Ray module.
"""

from __future__ import annotations

_SEARCHERS = (
    "optuna",
    "hyperopt",
    "bayesopt",
    "bohb",
    "basic_variant",
    "concurrency_limiter",
    "repeater",
    "nevergrad",
    "hebo",
    "zoopt",
    "ax",
    "searcher",
    "search_generator",
    "variant_generator",
)
_SCHEDULERS = (
    "pb2",
    "resource_changing_scheduler",
    "async_hyperband",
    "hyperband",
    "hb_bohb",
    "median_stopping_rule",
    "pbt",
    "trial_scheduler",
)
_STOPPERS = (
    "stopper",
    "experiment_plateau",
    "function_stopper",
    "maximum_iteration",
    "noop",
    "timeout",
    "trial_plateau",
)
_LOGGERS = ("tensorboardx", "json", "csv", "logger")
_FRAMEWORKS = ("keras", "lightgbm", "xgboost", "lightning", "pytorch_lightning", "huggingface")

# Ray module path -> the tunefleet module that holds the same names.
MODULES: dict[str, str] = {
    "ray.tune": "tunefleet",
    "ray.tune.tune": "tunefleet",
    "ray.tune.tuner": "tunefleet",
    "ray.tune.tune_config": "tunefleet.config",
    "ray.tune.result_grid": "tunefleet.results",
    "ray.tune.analysis": "tunefleet.results",
    "ray.tune.analysis.experiment_analysis": "tunefleet.results",
    "ray.tune.result": "tunefleet.result",
    "ray.tune.error": "tunefleet",
    "ray.tune.callback": "tunefleet",
    "ray.tune.trainable": "tunefleet.trainable",
    "ray.tune.trainable.trainable": "tunefleet.trainable",
    "ray.tune.trainable.util": "tunefleet.trainable",
    "ray.tune.experiment": "tunefleet.trial",
    "ray.tune.experiment.trial": "tunefleet.trial",
    "ray.tune.experiment.experiment": "tunefleet",  # tune.Experiment
    "ray.tune.registry": "tunefleet",  # tune.register_trainable
    "ray.tune.execution.placement_groups": "tunefleet.resources",
    # what a ResourceChangingScheduler allocation function gets as its first argument
    "ray.tune.execution.tune_controller": "tunefleet.schedulers",
    "ray.tune.utils": "tunefleet.utils",
    "ray.tune.utils.mock_trainable": "tunefleet.utils.mock_trainable",
    "ray.tune.search": "tunefleet.search",
    "ray.tune.search.sample": "tunefleet.space",
    **{f"ray.tune.search.{lib}": "tunefleet.search" for lib in _SEARCHERS},
    "ray.tune.schedulers": "tunefleet.schedulers",
    **{f"ray.tune.schedulers.{mod}": "tunefleet.schedulers" for mod in _SCHEDULERS},
    "ray.tune.stopper": "tunefleet.stopper",
    **{f"ray.tune.stopper.{mod}": "tunefleet.stopper" for mod in _STOPPERS},
    "ray.tune.logger": "tunefleet.logger",
    **{f"ray.tune.logger.{mod}": "tunefleet.logger" for mod in _LOGGERS},
    "ray.tune.integration": "tunefleet.integration",
    **{f"ray.tune.integration.{fw}": f"tunefleet.integration.{fw}" for fw in _FRAMEWORKS},
    "ray.train": "tunefleet",
    "ray.train.context": "tunefleet.session",
    "ray.train.lightning": "tunefleet.integration.lightning",
    "ray.train.huggingface.transformers": "tunefleet.integration.huggingface",
    "ray.air": "tunefleet",
    "ray.air.config": "tunefleet.config",
    "ray.air.checkpoint": "tunefleet",
    "ray.air.session": "tunefleet.session",
    "ray.air.result": "tunefleet.results",
    "ray.air.integrations": "tunefleet.callbacks",
    "ray.air.integrations.mlflow": "tunefleet.callbacks",
    "ray.air.integrations.wandb": "tunefleet.callbacks",
    "ray.air.integrations.comet": "tunefleet.callbacks",
    "ray.air.integrations.keras": "tunefleet.integration.keras",
    "ray.air.constants": "tunefleet.result",
    "ray.train.constants": "tunefleet.result",
    "ray.tune.progress_reporter": "tunefleet",
    "ray.tune.syncer": "tunefleet",
    "ray.tune.context": "tunefleet.session",
    "ray.tune.utils.util": "tunefleet.utils",
    "ray.tune.trainable.trainable_fn_utils": "tunefleet",  # report, get_checkpoint
    # Ray 2.0-2.2's deprecated aliases of ray.tune.search / .search.sample / .experiment
    "ray.tune.suggest": "tunefleet.search",
    **{f"ray.tune.suggest.{lib}": "tunefleet.search" for lib in _SEARCHERS},
    "ray.tune.sample": "tunefleet.space",
    "ray.tune.trial": "tunefleet.trial",
    # Ray's vendored copy of cloudpickle: tunefleet depends on cloudpickle itself
    "ray.cloudpickle": "cloudpickle",
}

# Ray packages whose other sub-modules hold the package's names (Ray's
# `ray.tune.search.optuna.optuna_search` is re-exported by `ray.tune.search.optuna`): a
# sub-module MODULES does not list is looked up in the nearest listed one under these.
PACKAGES: frozenset[str] = frozenset(
    {
        "ray.tune.search",
        "ray.tune.suggest",
        "ray.tune.schedulers",
        "ray.tune.stopper",
        "ray.tune.logger",
        "ray.tune.utils",
        "ray.tune.trainable",
        "ray.tune.analysis",
        "ray.tune.integration",
        "ray.air.integrations",
    }
)

# (Ray module, name) -> (tunefleet module, name): where a name lives elsewhere or is
# spelled differently in tunefleet.
NAMES: dict[tuple[str, str], tuple[str, str]] = {
    ("ray.train.context", "TrainContext"): ("tunefleet", "TuneContext"),
    ("ray.train", "TrainContext"): ("tunefleet", "TuneContext"),
    ("ray.air.integrations.keras", "ReportCheckpointCallback"): (
        "tunefleet.integration.keras",
        "TuneReportCheckpointCallback",
    ),
    ("ray.tune.execution.tune_controller", "TuneController"): ("tunefleet.schedulers", "Cluster"),
    ("ray.tune.search.variant_generator", "generate_variants"): (
        "tunefleet.space",
        "generate_variants",
    ),
    ("ray.tune.search.variant_generator", "RecursiveDependencyError"): (
        "tunefleet.space",
        "RecursiveDependencyError",
    ),
    ("ray.tune.callback", "CallbackList"): ("tunefleet.callbacks", "CallbackList"),
    ("ray.tune.experiment", "Experiment"): ("tunefleet", "Experiment"),
    ("ray.tune.integration.keras", "ReportCheckpointCallback"): (
        "tunefleet.integration.keras",
        "TuneReportCheckpointCallback",
    ),
}

# tunefleet's sub-modules reached as attributes without an import (`tunefleet.search`),
# as after `from ray import tune`; any other is imported by the ported file.
ATTRIBUTE_MODULES: frozenset[str] = frozenset(
    {
        "tunefleet.search",
        "tunefleet.schedulers",
        "tunefleet.stopper",
        "tunefleet.stoppers",
        "tunefleet.logger",
        "tunefleet.callbacks",
        "tunefleet.integration",
        "tunefleet.utils",
    }
)

# `ray.init(...)` is dropped when it only starts a local Ray (trials run on this machine
# without one): its address is one of these (None: no address given) and it passes
# none of INIT_KEPT_KEYWORDS. `ray.shutdown()` is always dropped.
LOCAL_ADDRESSES: frozenset[str | None] = frozenset({None, "local"})
INIT_KEPT_KEYWORDS: frozenset[str] = frozenset({"runtime_env"})

_CORE_TASKS = "Ray core (tasks and actors) has no tunefleet counterpart"
_CORE_OBJECTS = (
    "Ray core (object store) has no tunefleet counterpart: pass large objects to trials "
    "with tune.with_parameters"
)
_CORE_CLUSTER = "Ray core (cluster and runtime state) has no tunefleet counterpart"
_TRAIN = (
    "Ray Train's distributed trainers (TorchTrainer, ScalingConfig, dataset shards) have "
    "no tunefleet counterpart: tune a function or Trainable class that runs the training "
    "itself (docs/from_ray_tune.md, 'What is not there')"
)
_INTERNAL = "a Ray internal module (not public API) has no tunefleet counterpart"

# Why a Ray name is left as is, by the longest dotted prefix of its Ray path.
UNPORTED_REASONS: dict[str, str] = {
    "ray.init": "ray.init that may join a Ray cluster (an address other than 'local', or "
    "a runtime_env): tunefleet runs trials on this machine without Ray; drop the call, or "
    "run them on a Ray cluster with RunConfig(backend='ray')",
    "ray.is_initialized": "ray.is_initialized has no tunefleet counterpart (no Ray cluster runs)",
    **dict.fromkeys(
        (
            "ray.remote",
            "ray.remote_function",
            "ray.method",
            "ray.actor",
            "ray.kill",
            "ray.get_actor",
        ),
        _CORE_TASKS,
    ),
    **dict.fromkeys(
        ("ray.get", "ray.put", "ray.wait", "ray.cancel", "ray.ObjectRef", "ray.types"),
        _CORE_OBJECTS,
    ),
    **dict.fromkeys(
        (
            "ray.get_runtime_context",
            "ray.runtime_context",
            "ray.get_gpu_ids",
            "ray.available_resources",
            "ray.cluster_resources",
            "ray.nodes",
            "ray.timeline",
        ),
        _CORE_CLUSTER,
    ),
    "ray.exceptions": "Ray core's exceptions have no tunefleet counterpart (a failed "
    "trial's exception is its Result.error)",
    "ray.util": "Ray's utilities (ray.util) have no tunefleet counterpart",
    "ray.data": "Ray Data has no tunefleet counterpart",
    "ray.rllib": "RLlib has no tunefleet counterpart: tune a function or Trainable class "
    "that trains the agent",
    "ray.serve": "Ray Serve has no tunefleet counterpart",
    **dict.fromkeys(
        (
            "ray.train.torch",
            "ray.train.tensorflow",
            "ray.train.horovod",
            "ray.train.xgboost",
            "ray.train.lightgbm",
            "ray.train.trainer",
            "ray.train.base_trainer",
            "ray.train.data_parallel_trainer",
            "ray.train.backend",
            "ray.train.v2",
            "ray.train.ScalingConfig",
            "ray.train.DataConfig",
            "ray.train.get_dataset_shard",
            "ray.air.ScalingConfig",
            "ray.air.config.ScalingConfig",
            "ray.air.config.DatasetConfig",
        ),
        _TRAIN,
    ),
    "ray.tune.examples": "Ray's example helpers (ray.tune.examples) are not part of "
    "tunefleet: copy what the program uses from them into it",
    **dict.fromkeys(
        (
            "ray.tune.execution",
            "ray.tune.impl",
            "ray.tune.experimental",
            "ray.tune.cli",
            "ray.air.execution",
        ),
        _INTERNAL,
    ),
}

# Why a Ray name is left as is, by the name itself (wherever Ray defines it), when no
# prefix above says.
UNPORTED_NAME_REASONS: dict[str, str] = {
    **dict.fromkeys(
        ("Logger", "JsonLogger", "CSVLogger", "TBXLogger", "UnifiedLogger"),
        "Ray's legacy Logger classes are not there: pass tunefleet.logger's "
        "JsonLoggerCallback / CSVLoggerCallback / TBXLoggerCallback (or a LoggerCallback "
        "of your own) in RunConfig(callbacks=...)",
    ),
    "wrap_function": "wrap_function (a function trainable driven by hand as a class) is "
    "not there: run the function with Tuner, or write a tune.Trainable",
    "Syncer": "a custom Syncer is not there: give RunConfig an fsspec storage_filesystem "
    "(docs/storage.md)",
    **dict.fromkeys(
        (
            "RayDDPStrategy",
            "RayFSDPStrategy",
            "RayDeepSpeedStrategy",
            "RayLightningEnvironment",
            "RayTrainReportCallback",
            "prepare_trainer",
        ),
        _TRAIN,
    ),
}
