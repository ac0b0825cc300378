"""The package's shape: no import circle, no import from a lower layer to a higher one,
every public module's exports pinned.

The import graph is read from the source (every import statement, including those
inside functions and under TYPE_CHECKING), so a lazy import cannot hide a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first; a module may import its own layer and those below it. The longest
# matching prefix places a module. docs/architecture.md draws the same layers.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "foundation",
        [
            "tunefleet._version",
            "tunefleet._state_log",  # StateLog: the append-only parts of a saved state
            "tunefleet._milestones",  # which results wait for the scheduler's decision
            "tunefleet._linger",  # the one thread that sends sessions' batched results
            "tunefleet._collector",  # no cycle collection while an experiment is read back
            "tunefleet.result",
            "tunefleet._metrics",
            "tunefleet._redact",
            "tunefleet._params_ref",
            "tunefleet._error",  # TuneError, raised below the tuner too
            "tunefleet.trial",
            "tunefleet.resources",
            "tunefleet.space",
            "tunefleet.storage",  # below trial.py (Trial.checkpoint); it needs only the above
        ],
    ),
    (
        "parts",
        [
            "tunefleet.store",
            "tunefleet.checkpoint",
            "tunefleet.stoppers",
            "tunefleet.stopper",
            "tunefleet.schedulers",
            "tunefleet.search",
            "tunefleet.session",
            "tunefleet.trainable",
        ],
    ),
    (
        "around the engine",
        [
            "tunefleet.backends",
            "tunefleet.progress",
            "tunefleet.callbacks",
            "tunefleet.logger",
            "tunefleet.config",
            "tunefleet.results",
            "tunefleet._analysis",
            "tunefleet.integration",
            "tunefleet.script",
            "tunefleet.utils",  # Ray's example trainables (tune.utils.mock_trainable)
        ],
    ),
    ("engine", ["tunefleet.engine"]),
    (
        "public API",
        [
            "tunefleet.tuner",
            "tunefleet._run_args",
            "tunefleet._registry",  # tune.register_trainable; names resolved by the tuner
            "tunefleet._experiments",  # tune.Experiment, tune.run_experiments (via run)
            "tunefleet",
        ],
    ),
    (
        "tools",
        [
            "tunefleet.cli",
            "tunefleet.cli.port",  # `tunefleet port`; reads tunefleet's modules by name
            "tunefleet.cli.port_map",
            "tunefleet.dashboard",
            "tunefleet.__main__",
        ],
    ),
]

# Wings whose modules are private although their names carry no underscore: the wing
# is the boundary (DESIGN.md section 4). Their public names are re-exported elsewhere.
PRIVATE_WINGS = ("engine", "storage", "progress", "script", "cli")

PINNED_EXPORTS: dict[str, set[str]] = {
    "tunefleet.backends": {"Backend", "Event", "Failed", "Finished", "Results", "TrialLaunch"},
    "tunefleet.backends.local": {"LocalBackend"},
    "tunefleet.backends.ray": {"RayBackend"},
    "tunefleet.backends.simulated": {"SimulatedBackend", "SimulatedTrainable", "is_simulated"},
    "tunefleet.callbacks": {
        "CSVLoggerCallback",
        "Callback",
        "CallbackList",
        "JsonLoggerCallback",
        "LoggerCallback",
        "MLflowLoggerCallback",
        "TBXLoggerCallback",
        "WandbLoggerCallback",
        "setup_mlflow",
        "setup_wandb",
    },
    "tunefleet.checkpoint": {"Checkpoint", "CheckpointWriteError"},
    "tunefleet.cli": {"main"},
    "tunefleet.config": {
        "CheckpointConfig",
        "FailureConfig",
        "RunConfig",
        "SyncConfig",
        "TuneConfig",
    },
    "tunefleet.dashboard": {"DashboardServer", "check_bind", "is_loopback", "write_report"},
    "tunefleet.integration": set(),
    "tunefleet.integration.huggingface": {
        "RayTrainReportCallback",
        "TuneReportCallback",
        "TuneReportCheckpointCallback",
    },
    "tunefleet.integration.keras": {"TuneReportCallback", "TuneReportCheckpointCallback"},
    "tunefleet.integration.lightgbm": {"TuneReportCallback", "TuneReportCheckpointCallback"},
    "tunefleet.integration.mlflow": {"MLflowLoggerCallback", "setup_mlflow"},
    "tunefleet.integration.lightning": {
        "TuneCallback",
        "TuneReportCallback",
        "TuneReportCheckpointCallback",
    },
    "tunefleet.integration.pytorch_lightning": {
        "TuneCallback",
        "TuneReportCallback",
        "TuneReportCheckpointCallback",
    },
    "tunefleet.integration.wandb": {"WandbLoggerCallback", "setup_wandb"},
    "tunefleet.integration.xgboost": {"TuneReportCallback", "TuneReportCheckpointCallback"},
    "tunefleet.logger": {
        "CSVLoggerCallback",
        "JsonLoggerCallback",
        "LoggerCallback",
        "TBXLoggerCallback",
        "pretty_print",
    },
    "tunefleet.resources": {"PlacementGroupFactory"},
    "tunefleet.result": {
        "AUTO_RESULT_KEYS",
        "DATE",
        "DEFAULT_METRIC",
        "DONE",
        "EPISODES_THIS_ITER",
        "EPISODES_TOTAL",
        "EXPR_PARAM_FILE",
        "EXPR_PARAM_PICKLE_FILE",
        "EXPR_PROGRESS_FILE",
        "EXPR_RESULT_FILE",
        "HOSTNAME",
        "ITERATIONS_SINCE_RESTORE",
        "NODE_IP",
        "PID",
        "SHOULD_CHECKPOINT",
        "TIMESTAMP",
        "TIMESTEPS_SINCE_RESTORE",
        "TIMESTEPS_THIS_ITER",
        "TIMESTEPS_TOTAL",
        "TIME_SINCE_RESTORE",
        "TIME_THIS_ITER_S",
        "TIME_TOTAL_S",
        "TRAINING_ITERATION",
        "TRIAL_ID",
    },
    "tunefleet.results": {"ExperimentAnalysis", "Result", "ResultGrid", "TrialError"},
    "tunefleet.schedulers": {
        "ASHAScheduler",
        "AsyncHyperBandScheduler",
        "Candidates",
        "Cluster",
        "Decision",
        "DistributeResources",
        "DistributeResourcesToTopJob",
        "Exploit",
        "FIFOScheduler",
        "HyperBandForBOHB",
        "HyperBandScheduler",
        "MedianStoppingRule",
        "PB2",
        "PopulationBasedTraining",
        "Resize",
        "ResourceChangingScheduler",
        "TrialScheduler",
        "pbt_schedule",
    },
    "tunefleet.search": {
        "AxSearch",
        "BasicVariantGenerator",
        "BayesOptSearch",
        "ConcurrencyLimiter",
        "FINISHED",
        "HEBOSearch",
        "HyperOptSearch",
        "NevergradSearch",
        "OptunaSearch",
        "QMCSearch",
        "Repeater",
        "Searcher",
        "TuneBOHB",
        "ZOOptSearch",
    },
    "tunefleet.session": {
        "TuneContext",
        "get_checkpoint",
        "get_context",
        "get_trial_dir",
        "get_trial_id",
        "get_trial_name",
        "report",
    },
    "tunefleet.space": {
        "Categorical",
        "Chooser",
        "Domain",
        "Float",
        "Function",
        "GRID_KEY",
        "Integer",
        "Normal",
        "Path",
        "PathKey",
        "RecursiveDependencyError",
        "SearchSpaceError",
        "choice",
        "flatten",
        "format_path",
        "generate_variants",
        "grid_axes",
        "grid_point",
        "grid_points",
        "grid_search",
        "grid_size",
        "has_domains",
        "lograndint",
        "loguniform",
        "parameter_name",
        "qlograndint",
        "qloguniform",
        "qrandint",
        "qrandn",
        "quniform",
        "randint",
        "randn",
        "resolve",
        "sample_from",
        "space_from_json",
        "space_to_json",
        "uniform",
        "validate_space",
    },
    "tunefleet.stopper": {
        "CombinedStopper",
        "DictStopper",
        "ExperimentPlateauStopper",
        "FunctionStopper",
        "MaximumIterationStopper",
        "NoopStopper",
        "Stopper",
        "TimeoutStopper",
        "TrialPlateauStopper",
        "make_stopper",
    },
    "tunefleet.stoppers": {
        "CombinedStopper",
        "DictStopper",
        "ExperimentPlateauStopper",
        "FunctionStopper",
        "MaximumIterationStopper",
        "NoopStopper",
        "Stopper",
        "TimeoutStopper",
        "TrialPlateauStopper",
        "make_stopper",
    },
    "tunefleet.store": {
        "DB_FILENAME",
        "ExperimentStore",
        "SCHEMA_VERSION",
        "StoreReader",
        "default_storage_path",
        "list_experiments",
        "resolve_experiment",
    },
    "tunefleet.trainable": {"Trainable", "with_parameters", "with_resources"},
    "tunefleet.trial": {"FailureKind", "FailureRecord", "StopCause", "Trial", "TrialStatus"},
    "tunefleet.tuner": {"TuneError", "Tuner", "run"},
    "tunefleet.utils": {"flatten_dict", "unflatten_dict"},
    "tunefleet.utils.mock_trainable": {"MyTrainableClass"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(SRC.glob("tunefleet/**/*.py"))}


def _owner(dotted: str) -> str | None:
    """The module of ours that `dotted` names (a name inside a module counts as it)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(_owner(a.name) for a in node.names if a.name.startswith("tunefleet"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*kept, *([node.module] if node.module else [])])
            if base == "tunefleet" or base.startswith("tunefleet."):
                # `from pkg import submodule` depends on the submodule, else on pkg
                found.update(
                    f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else _owner(base)
                    for a in node.names
                )
    # Importing a.b.c runs a/__init__ and a/b/__init__ first: those are dependencies too,
    # except the packages the importer itself lives in (already being imported).
    own = {module.rsplit(".", n)[0] for n in range(module.count(".") + 1)}
    for target in [m for m in found if m is not None]:
        parts = target.split(".")
        found.update(p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) not in own)
    found.discard(None)
    found.discard(module)
    return {m for m in found if m is not None}


GRAPH: dict[str, set[str]] = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[1]
            ):
                best = (index, len(prefix))
    return None if best is None else best[0]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_graph_is_read() -> None:
    # A reader that found nothing would pass every test below.
    assert "tunefleet.engine.controller" in GRAPH["tunefleet.engine.experiment"]
    assert "tunefleet.space._domains" in GRAPH["tunefleet.space._resolve"]
    assert len(MODULES) > 100


def test_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    circles = _circles(GRAPH)
    described = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(GRAPH[m] & set(c))}" for m in c)
        for c in circles
    ]
    assert circles == [], "\n".join(described)


# STYLE.md: modules stay near Optuna's size; past this a module holds more than one job.
MAX_LINES = 520


def test_no_module_is_long() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these modules by job: {long}"


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if _layer(m) is None)
    assert unplaced == [], f"place these modules in a layer of LAYERS: {unplaced}"


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    upward = []
    for module, imported in sorted(GRAPH.items()):
        low = _layer(module)
        for other in sorted(imported):
            high = _layer(other)
            if low is not None and high is not None and high > low:
                upward.append(f"{module} ({LAYERS[low][0]}) imports {other} ({LAYERS[high][0]})")
    assert upward == [], "\n".join(upward)


def _is_public(module: str) -> bool:
    parts = module.split(".")[1:]
    if not parts or any(p.startswith("_") for p in parts):
        return False  # `tunefleet` itself is pinned in test_public_api.py
    if parts[0] in PRIVATE_WINGS:
        return module == "tunefleet.cli"  # the command's entry point
    return True


def _static_all(module: str) -> set[str] | None:
    """`__all__` as the source writes it (a literal, or an alias module's import of one)."""
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "__all__" for a in node.names):
            return _static_all(str(node.module))
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = getattr(node, "value", None)
            return set(ast.literal_eval(value)) if value is not None else None
    return None


PUBLIC = sorted(m for m in MODULES if _is_public(m))


@pytest.mark.parametrize("module", PUBLIC)
def test_public_module_exports_are_pinned(module: str) -> None:
    assert module in PINNED_EXPORTS, f"{module} is public: pin its __all__ here"
    assert _static_all(module) == PINNED_EXPORTS[module]


def test_pinned_modules_exist() -> None:
    assert sorted(PINNED_EXPORTS) == PUBLIC
