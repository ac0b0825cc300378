"""`tunefleet run SCRIPT ...`: tune a program without changing it (see docs/script_tuning.md).

    tunefleet run train.py --space space.yaml --metric val_loss --mode min \\
        --scheduler asha --num-samples 50 --stop training_iteration=20 -- --epochs 20
    tunefleet run --config run.yaml --num-samples 10   # flags override the file

`load_run` merges the run file and the flags into plain settings (each value
checked, errors naming the file or flag, the key path, the value and the rule);
`build_tuner` turns them into a `Tuner` over a `ScriptTrainable`.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import os
import shutil
from pathlib import Path
from typing import Any

from tunefleet.script.program import CONFIG_STYLES, ScriptCommand, ScriptTrainable
from tunefleet.script.space import SpecError, load_yaml, parse_space, parse_value

SCHEDULERS = {
    "fifo": "FIFOScheduler",
    "asha": "ASHAScheduler",
    "async_hyperband": "AsyncHyperBandScheduler",
    "hyperband": "HyperBandScheduler",
    "hb_bohb": "HyperBandForBOHB",
    "median": "MedianStoppingRule",
    "pbt": "PopulationBasedTraining",
    "pb2": "PB2",
}
SEARCHERS = {
    "random": "BasicVariantGenerator",
    "optuna": "OptunaSearch",
    "hyperopt": "HyperOptSearch",
    "bayesopt": "BayesOptSearch",
    "bohb": "TuneBOHB",
    "qmc": "QMCSearch",
}
_MAX_T_FROM_STOP = ("asha", "async_hyperband", "hyperband", "hb_bohb")
# run-file key -> the flag that overrides it
KEYS = {
    "script": "SCRIPT",
    "command": None,
    "args": "-- ARGS",
    "space": "--space",
    "metric": "--metric",
    "mode": "--mode",
    "scheduler": "--scheduler",
    "search": "--search",
    "num_samples": "--num-samples",
    "max_concurrent": "--max-concurrent",
    "resources": "--cpus-per-trial/--gpus-per-trial/--memory-per-trial",
    "stop": "--stop",
    "time_budget_s": "--time-budget",
    "max_failures": "--max-failures",
    "storage": "--storage",
    "name": "--name",
    "config_style": "--config-style",
    "working_dir": "--workdir",
    "kill_grace_s": "--kill-grace",
    "env": None,
    "verbose": "--verbose",
}


class _RunParser(argparse.ArgumentParser):
    """Everything after the first ``--`` goes to the script, untouched."""

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        args = list(args or [])
        rest: list[str] | None = None
        if "--" in args:
            at = args.index("--")
            args, rest = args[:at], args[at + 1 :]
        ns, extras = super().parse_known_args(args, namespace)
        ns.script_args = rest
        return ns, extras


def add_run_command(sub: Any) -> None:
    text = "tune a script or program (any language) over a search space"
    saved = sub._parser_class
    sub._parser_class = _RunParser  # argparse has no per-parser class argument
    try:
        cmd = sub.add_parser(
            "run",
            help=text,
            description=text + "; see docs/script_tuning.md",
            epilog="Arguments after -- are passed to the script, before the config's.",
        )
    finally:
        sub._parser_class = saved
    cmd.add_argument("script", nargs="?", metavar="SCRIPT", help="a .py file or an executable")
    cmd.add_argument("--config", metavar="RUN.yaml", help="a run file; flags override it")
    cmd.add_argument("--space", metavar="SPACE.yaml", help="the search space")
    cmd.add_argument("--metric", help="the metric to optimize")
    cmd.add_argument("--mode", choices=["min", "max"])
    cmd.add_argument("--scheduler", help=f"one of {', '.join(SCHEDULERS)} (default fifo)")
    cmd.add_argument("--scheduler-option", action="append", metavar="KEY=VALUE", default=[])
    cmd.add_argument("--search", help=f"one of {', '.join(SEARCHERS)} (default random)")
    cmd.add_argument("--search-option", action="append", metavar="KEY=VALUE", default=[])
    cmd.add_argument("--num-samples", type=int)
    cmd.add_argument("--cpus-per-trial", type=float)
    cmd.add_argument("--gpus-per-trial", type=float)
    cmd.add_argument("--memory-per-trial", help='e.g. "2GB"')
    cmd.add_argument("--max-concurrent", type=int)
    cmd.add_argument("--stop", action="append", metavar="KEY=VALUE", default=[])
    cmd.add_argument("--time-budget", type=float, metavar="SECONDS")
    cmd.add_argument("--max-failures", type=int, help="retries per trial (from its checkpoint)")
    cmd.add_argument("--name", help="the experiment's name")
    cmd.add_argument("--storage", help="where experiments are stored")
    cmd.add_argument("--config-style", choices=CONFIG_STYLES, help="how the config is passed")
    cmd.add_argument("--workdir", help="where the script runs (default: the trial's folder)")
    cmd.add_argument("--kill-grace", type=float, metavar="SECONDS", help="SIGTERM to SIGKILL")
    cmd.add_argument("--verbose", type=int, choices=[0, 1, 2])
    cmd.set_defaults(run=_run, script_args=None)


def _run(args: argparse.Namespace) -> int:
    settings = load_run(args)
    tuner = build_tuner(settings)
    grid = tuner.fit()  # its summary names the best config and where results are
    return 1 if grid.num_errors else 0


# -- settings -----------------------------------------------------------------------------
def load_run(args: argparse.Namespace) -> dict[str, Any]:
    """The run file's settings with the flags over them; paths made absolute.

    Each value is kept with where it came from (``_where[key]``) for error messages.
    """
    settings: dict[str, Any] = {}
    where: dict[str, str] = {}
    if args.config:
        path = Path(args.config)
        data = load_yaml(path, "--config")
        if not isinstance(data, dict):
            raise SpecError(
                f"{path}: a run file is a mapping of settings (script:, space:, metric:, ...), "
                f"got {type(data).__name__}"
            )
        base = path.resolve().parent
        for key, value in data.items():
            if key not in KEYS:
                close = difflib.get_close_matches(str(key), list(KEYS), n=1)
                hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(KEYS)}"
                raise SpecError(f"{path}: {key}: not a run setting{hint}")
            settings[key] = _absolute(key, value, base)
            where[key] = f"{path}: {key}"
    cwd = Path.cwd()
    flags: dict[str, Any] = {
        "script": args.script,
        "args": args.script_args,
        "space": args.space,
        "metric": args.metric,
        "mode": args.mode,
        "num_samples": args.num_samples,
        "max_concurrent": args.max_concurrent,
        "time_budget_s": args.time_budget,
        "max_failures": args.max_failures,
        "storage": args.storage,
        "name": args.name,
        "config_style": args.config_style,
        "working_dir": args.workdir,
        "kill_grace_s": args.kill_grace,
        "verbose": args.verbose,
    }
    for key, value in flags.items():
        if value is not None:
            settings[key] = _absolute(key, value, cwd)
            where[key] = KEYS[key] or key
    if args.script is not None:
        settings.pop("command", None)
    for key, flag, given, default in (
        ("scheduler", "--scheduler", args.scheduler, "fifo"),
        ("search", "--search", args.search, "random"),
    ):
        options = _named(settings.get(key), where.get(key, flag)) if key in settings else {}
        if given is not None:
            options["name"] = given
            where[key] = flag
        for item in getattr(args, f"{key}_option"):
            name, value = _key_value(item, f"{flag}-option")
            options[name] = parse_value(value)
            where.setdefault(key, f"{flag}-option")
        if options:
            options.setdefault("name", default)
            settings[key] = options
    resources = dict(_mapping(settings.get("resources"), where.get("resources", "")) or {})
    for name, value in (
        ("cpu", args.cpus_per_trial),
        ("gpu", args.gpus_per_trial),
        ("memory", args.memory_per_trial),
    ):
        if value is not None:
            resources[name] = value
            where["resources"] = f"--{name}{'s' if name != 'memory' else ''}-per-trial"
    if resources:
        settings["resources"] = resources
    if args.stop:
        stop = {}
        for item in args.stop:
            name, value = _key_value(item, "--stop")
            stop[name] = parse_value(value)
        settings["stop"] = stop
        where["stop"] = "--stop"
    settings["_where"] = where
    return settings


def _absolute(key: str, value: Any, base: Path) -> Any:
    """Paths in a run file are relative to its folder; on the command line, to the cwd.

    The script runs in its trial's folder, so the items of `command` and `args` that
    name an existing file or folder (relative to `base`) are made absolute too.
    """
    if key in ("script", "space", "storage", "working_dir") and isinstance(value, str):
        if key == "script" and "/" not in value and not (base / value).exists():
            return value  # a program on PATH
        if key == "working_dir" and value == "trial":
            return value
        return str((base / os.path.expanduser(value)).resolve())
    if key in ("command", "args") and isinstance(value, list):
        return [_existing(item, base) for item in value]
    return value


def _existing(item: Any, base: Path) -> Any:
    if not isinstance(item, str) or not item or item.startswith("-") or item.startswith("/"):
        return item
    path = base / item
    return str(path.resolve()) if path.exists() else item


def _key_value(item: str, flag: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise SpecError(f"{flag} {item!r}: use KEY=VALUE, e.g. {flag} training_iteration=20")
    return name.strip(), value


def _named(value: Any, where: str) -> dict[str, Any]:
    """``asha`` or ``{name: asha, grace_period: 2}`` as one mapping."""
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, dict):
        return dict(value)
    raise SpecError(f"{where}: give a name or a mapping with name: and options, got {value!r}")


def _mapping(value: Any, where: str) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    raise SpecError(f"{where}: must be a mapping, got {type(value).__name__} {value!r}")


# -- building the tuner ---------------------------------------------------------------------
def build_tuner(settings: dict[str, Any]) -> Any:
    """A `Tuner` for the settings of `load_run`."""
    import tunefleet as tune

    where: dict[str, str] = settings["_where"]

    def at(key: str) -> str:
        return where.get(key, key)

    command = _command(settings, at)
    space_value = settings.get("space")
    if isinstance(space_value, str):
        space = parse_space(load_yaml(Path(space_value), "--space"), space_value)
    else:
        space = parse_space(space_value, f"{at('space')}")
    metric, mode = settings.get("metric"), settings.get("mode")
    _check_str(metric, at("metric"))
    if mode not in (None, "min", "max"):
        raise SpecError(f"{at('mode')}: must be min or max, got {mode!r}")
    stop = _stop(settings.get("stop"), at("stop"))
    scheduler = _scheduler(settings.get("scheduler"), at("scheduler"), stop)
    searcher = _plugin(settings.get("search"), at("search"), SEARCHERS, "tunefleet.search")
    if metric is not None and mode is None:
        raise SpecError(f"{at('metric')}: give --mode min or --mode max with --metric")
    if mode is not None and metric is None:
        raise SpecError(f"{at('mode')}: give --metric too, the metric to {mode}imize")
    for key, default in (("scheduler", "fifo"), ("search", "random")):
        name = _named(settings[key], at(key)).get("name") if settings.get(key) else default
        if metric is None and name != default:
            raise SpecError(
                f"{at(key)}: {name} needs the metric to optimize: give --metric and --mode"
            )
    trainable: Any = ScriptTrainable(command)
    resources = settings.get("resources")
    if resources is not None:
        try:
            trainable = tune.with_resources(trainable, _mapping(resources, at("resources")) or {})
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{at('resources')}: {exc}") from exc
    try:
        return tune.Tuner(
            trainable,
            param_space=space,
            tune_config=tune.TuneConfig(
                metric=metric,
                mode=mode,
                scheduler=scheduler,
                search_alg=searcher,
                num_samples=_int(settings.get("num_samples", 1), at("num_samples"), 1),
                max_concurrent_trials=_int_or_none(
                    settings.get("max_concurrent"), at("max_concurrent"), 1
                ),
                time_budget_s=_number_or_none(settings.get("time_budget_s"), at("time_budget_s")),
            ),
            run_config=tune.RunConfig(
                name=settings.get("name"),
                storage_path=settings.get("storage"),
                stop=stop or None,
                verbose=_int(settings.get("verbose", 1), at("verbose"), 0),
                failure_config=tune.FailureConfig(
                    max_failures=_int(settings.get("max_failures", 0), at("max_failures"), -1)
                ),
            ),
        )
    except (TypeError, ValueError) as exc:
        raise SpecError(str(exc)) from exc


def _command(settings: dict[str, Any], at: Any) -> ScriptCommand:
    script, command = settings.get("script"), settings.get("command")
    if script is None and command is None:
        raise SpecError("give the script to run: tunefleet run SCRIPT, or script: in --config")
    if command is not None:
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(a, (str, int, float)) for a in command)
        ):
            raise SpecError(
                f"{at('command')}: must be a non-empty list of strings, got {command!r}"
            )
        argv = [str(a) for a in command]
    else:
        _check_str(script, at("script"))
        argv = [str(script)]
    argv[0] = _program(argv[0], at("script" if command is None else "command"))
    extra = settings.get("args") or []
    if not isinstance(extra, list):
        raise SpecError(f"{at('args')}: must be a list of arguments, got {extra!r}")
    style = settings.get("config_style", "args")
    if style not in CONFIG_STYLES:
        raise SpecError(f"{at('config_style')}: must be one of {', '.join(CONFIG_STYLES)}")
    env = _mapping(settings.get("env"), at("env")) or {}
    workdir = settings.get("working_dir")
    if workdir is not None:
        _check_str(workdir, at("working_dir"))
    grace = _number_or_none(settings.get("kill_grace_s"), at("kill_grace_s"))
    return ScriptCommand(
        argv=[*argv, *(str(a) for a in extra)],
        python=argv[0].endswith(".py"),
        config_style=style,
        working_dir=None if workdir in (None, "trial") else workdir,
        env={str(k): str(v) for k, v in env.items()},
        kill_grace_s=3.0 if grace is None else grace,
        launch_dir=str(Path.cwd()),
    )


def _program(program: str, where: str) -> str:
    path = Path(program)
    if path.suffix == ".py":
        if not path.is_file():
            raise SpecError(f"{where}: {program}: no such file")
        return str(path.resolve())
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise SpecError(
                f"{where}: {program} is not executable: chmod +x it, or give "
                f"command: [bash, {path.name}] in the run file"
            )
        return str(path.resolve())
    found = shutil.which(program) if "/" not in program else None
    if found is None:
        raise SpecError(f"{where}: {program}: no such file, and no program of that name on PATH")
    return found


def _stop(value: Any, where: str) -> dict[str, float]:
    stop = _mapping(value, where) or {}
    for key, bound in stop.items():
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise SpecError(
                f"{where}: {key}={bound!r}: a stop condition is METRIC=NUMBER, "
                "e.g. training_iteration=20"
            )
    return {str(k): v for k, v in stop.items()}


def _scheduler(value: Any, where: str, stop: dict[str, float]) -> Any:
    if value is None:
        return None
    options = _named(value, where)
    name = options.get("name")
    if name in _MAX_T_FROM_STOP and "max_t" not in options and "training_iteration" in stop:
        options["max_t"] = stop["training_iteration"]  # the stop condition is the budget
    if name in ("pbt", "pb2") and "hyperparam_mutations" in options:
        options["hyperparam_mutations"] = parse_space(
            options["hyperparam_mutations"], f"{where}: hyperparam_mutations"
        )
    return _plugin(options, where, SCHEDULERS, "tunefleet.schedulers")


def _plugin(value: Any, where: str, known: dict[str, str], module: str) -> Any:
    """Build the scheduler or searcher `value` names, checking its options by name."""
    if value is None:
        return None
    options = _named(value, where)
    name = options.pop("name", None)
    if name not in known:
        close = difflib.get_close_matches(str(name), list(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise SpecError(f"{where}: unknown name {name!r}{hint}; one of: {', '.join(known)}")
    import importlib

    try:
        cls = getattr(importlib.import_module(module), known[name])
    except ImportError as exc:
        raise SpecError(f"{where}: {name}: {exc}") from exc
    params = inspect.signature(cls.__init__).parameters
    accepted = [p for p in params if p not in ("self", "metric", "mode") and not p.startswith("_")]
    for key in options:
        if key in ("metric", "mode"):
            raise SpecError(f"{where}: {name} takes metric and mode from the run's own settings")
        if key not in accepted:
            raise SpecError(
                f"{where}: {key}: not an option of {name} ({known[name]}); "
                f"options: {', '.join(accepted)}"
            )
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}: {name}: {exc}") from exc
    except ImportError as exc:
        raise SpecError(f"{where}: {name}: {exc}") from exc


def _check_str(value: Any, where: str) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise SpecError(f"{where}: must be a non-empty string, got {value!r}")


def _int(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(f"{where}: must be an integer >= {low}, got {value!r}")
    return value


def _int_or_none(value: Any, where: str, low: int) -> int | None:
    return None if value is None else _int(value, where, low)


def _number_or_none(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SpecError(f"{where}: must be a number > 0, got {value!r}")
    return float(value)
