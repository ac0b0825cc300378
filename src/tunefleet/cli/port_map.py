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
}

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

# Why a Ray name is left as is, by its first part after `ray.`.
UNPORTED_REASONS: dict[str, str] = {
    "init": "ray.init with a cluster address or a runtime_env: tunefleet runs trials on "
    "this machine (RunConfig(backend='ray') runs them on a Ray cluster)",
    "remote": "Ray core (tasks and actors) has no tunefleet counterpart",
    "get": "Ray core (object store) has no tunefleet counterpart",
    "put": "Ray core (object store) has no tunefleet counterpart",
    "data": "Ray Data has no tunefleet counterpart",
    "is_initialized": "ray.is_initialized has no tunefleet counterpart (no Ray cluster runs)",
}
