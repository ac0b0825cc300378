"""Where `tunefleet port` finds a Ray name's counterpart, and why it has none.

Lookups in `tunefleet.cli.port_map`'s tables and in tunefleet's own modules (imported by
name, so a name is mapped only where tunefleet has it).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

from tunefleet.cli.port_map import (
    MODULES,
    NAMES,
    PACKAGES,
    UNPORTED_NAME_REASONS,
    UNPORTED_REASONS,
)


def is_ray(module: str | None) -> bool:
    return module is not None and (module == "ray" or module.startswith("ray."))


@functools.cache
def exists(module: str, name: str | None = None) -> bool:
    """Whether tunefleet has `module` (and `name` in it); a missing framework is trusted."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        return not (missing == module or module.startswith(missing + "."))
    except ImportError:  # the module needs a framework that is not installed here
        return True
    if name is None or hasattr(mod, name):
        return True
    return hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None


def module_of(ray_module: str, guess: bool = True) -> str | None:
    """The tunefleet module holding `ray_module`'s names: its MODULES row; else, when it may
    be a module (`guess`), that of the nearest listed module in one of the PACKAGES, if the
    parts on the way are public module names (lower case) and not names tunefleet has."""
    if ray_module in MODULES or not guess:
        return MODULES.get(ray_module)
    parts = ray_module.split(".")
    for depth in range(len(parts) - 1, 2, -1):
        below = parts[depth:]
        if any(p.startswith("_") or not p.islower() for p in below):
            return None
        parent = ".".join(parts[:depth])
        if parent in MODULES and any(
            parent == package or parent.startswith(package + ".") for package in PACKAGES
        ):
            found = MODULES[parent]
            return None if exists(found, below[0]) else found
    return None


@functools.cache
def _public() -> frozenset[str]:
    """The names tunefleet's top level exports (`tunefleet.__all__`)."""
    return frozenset(importlib.import_module("tunefleet").__all__)


def counterpart(ray_module: str, name: str) -> tuple[str, str] | None:
    """Where `ray_module.name` lives in tunefleet, or None if tunefleet has no such name.

    A name the mapped module lacks but tunefleet's top level exports is that one
    (`ray.tune.search.grid_search` is `tunefleet.grid_search`).
    """
    default = module_of(ray_module)
    if default is None:
        return None
    module, new_name = NAMES.get((ray_module, name), (default, name))
    if exists(module, new_name):
        return module, new_name
    return ("tunefleet", name) if name in _public() else None


def no_counterpart(ray_path: str) -> str:
    """Why `ray_path` stays: by its longest listed prefix, its name, or a private part."""
    parts = ray_path.split(".")
    for depth in range(len(parts), 0, -1):
        reason = UNPORTED_REASONS.get(".".join(parts[:depth]))
        if reason is not None:
            return reason
    if parts[-1] in UNPORTED_NAME_REASONS:
        return UNPORTED_NAME_REASONS[parts[-1]]
    if any(p.startswith("_") and not p.endswith("__") for p in parts[1:]):
        return f"{ray_path} is a Ray internal (not public API): tunefleet has no counterpart"
    return f"tunefleet has no counterpart of {ray_path}"


def from_import(head: str, names: list[str], indent: str | None) -> str:
    """`from M import a, b` (or `import M as x`); one name a line in parentheses where the
    statement it replaces spans lines (`indent`: its indentation; None: on one line)."""
    if not names:
        return head
    if indent is None or len(names) == 1:
        return f"{head} {', '.join(names)}"
    inner = "".join(f"{indent}    {name},\n" for name in names)
    return f"{head} (\n{inner}{indent})"
