"""Run each conformance module as Ray Tune users write it, ported by `tunefleet port`.

The modules are Ray Tune programs (``from ray import tune`` ...). At collection each
one's source is ported with `port_source`; anything left unported fails collection,
naming the lines. The ported module gets pytest's assertion rewriting, is registered
as ``tests.conformance.<stem>``, and is pickled by value, so the trainables defined in
it reach the trial workers (which cannot import the Ray-form file).
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from _pytest.assertion.rewrite import rewrite_asserts

from tunefleet.cli.port import port_source


class PortedModule(pytest.Module):
    """A test module collected from its ported source."""

    def _getobj(self) -> Any:
        path = Path(self.path)
        name = f"{__package__}.{path.stem}"
        source = path.read_text(encoding="utf-8")
        try:
            ported = port_source(source, str(path))
        except ValueError as exc:
            raise self.CollectError(str(exc)) from None
        if ported.unported:
            lines = "\n".join(f"  {path}:{u.line}: {u.reason}: {u.code}" for u in ported.unported)
            raise self.CollectError(f"tunefleet port left lines unported:\n{lines}")
        tree = ast.parse(ported.text, filename=str(path))
        rewrite_asserts(tree, ported.text.encode("utf-8"), str(path), self.config)
        code = compile(tree, str(path), "exec", dont_inherit=True)
        module = types.ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        except Exception:
            del sys.modules[name]
            raise
        cloudpickle.register_pickle_by_value(module)
        return module


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    return PortedModule.from_parent(parent, path=module_path)
