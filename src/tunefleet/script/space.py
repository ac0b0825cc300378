"""Search spaces written as data (YAML or JSON), for `tunefleet run`.

    lr: {loguniform: [1e-4, 1e-1]}        # tune.loguniform(1e-4, 1e-1)
    layers: {randint: [1, 5]}              # 1..4 (upper exclusive, like Ray)
    act: {choice: [relu, tanh]}
    bs: {grid_search: [16, 32]}
    dropout: {quniform: {lower: 0.0, upper: 0.5, q: 0.1}}   # arguments by name
    model: {width: {choice: [64, 128]}, depth: 3}           # nested keys nest
    epochs: 20                                              # plain values are constants

A mapping with exactly one key that names a domain is that domain; its value is
the list of positional arguments or a mapping of arguments by name. Any other
mapping is a nested part of the config. Errors name the file, the key path, the
value and the rule: ``space.yaml: lr: uniform needs [lower, upper], got [1]``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tunefleet import space as _space

DOMAINS: dict[str, Callable[..., Any]] = {
    name: getattr(_space, name)
    for name in (
        "uniform",
        "quniform",
        "loguniform",
        "qloguniform",
        "randn",
        "qrandn",
        "randint",
        "qrandint",
        "lograndint",
        "qlograndint",
    )
}
_SPECIAL = ("choice", "grid_search")
ALL_DOMAINS = (*DOMAINS, *_SPECIAL)


class SpecError(ValueError):
    """Bad input in a run file, a space file or a command-line option."""


# YAML 1.1 reads 1e-4 (no dot) as a string; floats as YAML 1.2 and JSON write them.
_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_loader: Any = None


def _yaml_loader() -> Any:
    """PyYAML's safe loader, reading floats such as 1e-4 as numbers."""
    global _loader
    if _loader is None:
        yaml: Any = importlib.import_module("yaml")

        class Loader(yaml.SafeLoader):  # type: ignore[misc]
            pass

        Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
        _loader = Loader
    return _loader


def load_yaml(path: Path, what: str) -> Any:
    """Read a YAML (or JSON) file; errors name the file, the line and the problem."""
    if not path.is_file():
        raise SpecError(f"{what} {path}: no such file")
    try:
        yaml: Any = importlib.import_module("yaml")
    except ImportError as exc:  # pragma: no cover - PyYAML is a dependency
        raise SpecError(f"{what} {path}: reading YAML needs PyYAML (pip install pyyaml)") from exc
    try:
        text = path.read_text(encoding="utf-8")
        return yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} {path}: not a text file ({exc.reason})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{what} {path}: not valid YAML{where}: {problem}") from exc


def parse_value(text: str) -> Any:
    """A command-line value as YAML would read it: ``3`` an int, ``1e-3`` a float, ``[1, 2]``."""
    yaml: Any = importlib.import_module("yaml")
    try:
        value = yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass
    except yaml.YAMLError:
        return text
    return text if value is None and text.strip() not in ("null", "~") else value


def parse_space(data: Any, source: str) -> dict[str, Any]:
    """Turn the data form of a space into tunefleet domains; `source` names it in errors."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a search space is a mapping of names to values or domains, "
            f"got {type(data).__name__} {_show(data)}"
        )
    return {str(k): _node(v, source, (str(k),)) for k, v in data.items()}


def _node(value: Any, source: str, path: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        named = [k for k in value if k in ALL_DOMAINS]
        if named and len(value) == 1:
            return _domain(str(named[0]), value[named[0]], source, path)
        if named:
            others = sorted(str(k) for k in value if k not in named)
            raise SpecError(
                f"{source}: {_where(path)}: a domain is a mapping with one key "
                f"({named[0]}: ...), got more keys: {others}; to pass arguments by name "
                f"write {{{named[0]}: {{lower: ..., upper: ...}}}}"
            )
        return {str(k): _node(v, source, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_node(v, source, (*path, str(i))) for i, v in enumerate(value)]
    return value


def _domain(name: str, args: Any, source: str, path: tuple[str, ...]) -> Any:
    where = f"{source}: {_where(path)}"
    if name in _SPECIAL:
        if not isinstance(args, list) or not args:
            raise SpecError(f"{where}: {name} needs a non-empty list of values, got {_show(args)}")
        values = [_node(v, source, (*path, str(i))) for i, v in enumerate(args)]
        try:
            return _space.choice(values) if name == "choice" else _space.grid_search(values)
        except ValueError as exc:
            raise SpecError(f"{where}: {exc}") from exc
    func = DOMAINS[name]
    params = list(inspect.signature(func).parameters.values())
    required = [p.name for p in params if p.default is p.empty]
    names = [p.name for p in params]
    shape = _shape(name, required, names)
    if isinstance(args, list):
        if not len(required) <= len(args) <= len(names):
            raise SpecError(f"{where}: {name} needs {shape}, got {_show(args)}")
        kwargs = dict(zip(names, args, strict=False))
    elif isinstance(args, dict):
        unknown = sorted(str(k) for k in args if k not in names)
        missing = [n for n in required if n not in args]
        if unknown or missing:
            problem = f"unknown {unknown}" if unknown else f"missing {missing}"
            raise SpecError(f"{where}: {name} takes {shape}: {problem}, got {_show(args)}")
        kwargs = {str(k): v for k, v in args.items()}
    elif args is None and not required:
        kwargs = {}
    else:
        raise SpecError(f"{where}: {name} needs {shape}, got {_show(args)}")
    try:
        return func(**kwargs)
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{where}: {exc}") from exc


def _shape(name: str, required: list[str], names: list[str]) -> str:
    optional = [n for n in names if n not in required]
    text = "[" + ", ".join(required)
    if optional:
        text += ", " + ", ".join(f"{n}?" for n in optional)
    return text + "]"


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _show(value: Any) -> str:
    """A value as the user wrote it (YAML flow style, roughly), shortened."""
    if isinstance(value, list):
        text = "[" + ", ".join(_show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    elif value is None:
        text = "nothing"
    else:
        text = str(value) if not isinstance(value, str) else value or "''"
    return text if len(text) <= 120 else text[:117] + "..."
