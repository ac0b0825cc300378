"""A trial that segfaults leaves its Python stack in its own stderr log (faulthandler)."""

from __future__ import annotations

import ctypes
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune


def crash_in_native_code(config: dict[str, Any]) -> None:
    tune.report(loss=1.0)
    if config["crash"]:
        ctypes.string_at(0)  # a real SIGSEGV: reads address 0
    print("no crash here", file=sys.stderr, flush=True)
    tune.report(loss=0.5)


def test_a_segfault_writes_the_python_stack_to_the_trials_stderr(storage: str) -> None:
    grid = tune.Tuner(
        crash_in_native_code,
        param_space={"crash": tune.grid_search([False, True])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    by_crash = {r.config["crash"]: r for r in grid}
    assert by_crash[False].error is None
    err = by_crash[True].error
    assert err is not None and err.failure.kind is tune.FailureKind.CRASH
    assert err.failure.signal == "SIGSEGV"
    tail = err.failure.stderr_tail or ""
    assert "Fatal Python error: Segmentation fault" in tail, tail
    assert "crash_in_native_code" in tail, tail
    assert "no crash here" not in tail, "only the crashing trial's own stderr"


_CRASHING_MODULE = """
import ctypes
import os

import tunefleet as tune


def crash_while_importing_here():
    if os.environ.get("CRASH_AT_IMPORT"):  # only in the worker: the driver imported it first
        ctypes.string_at(0)  # a real SIGSEGV while the worker loads the trainable


crash_while_importing_here()


def trainable(config):
    tune.report(loss=1.0)
"""


def test_a_segfault_while_a_worker_imports_the_trainable_shows_the_python_stack(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "segfaults_at_import.py").write_text(_CRASHING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("segfaults_at_import")
    monkeypatch.setenv("CRASH_AT_IMPORT", "1")  # workers inherit it; this driver imported it
    with pytest.raises(RuntimeError) as caught:
        tune.Tuner(
            module.trainable,
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        ).fit()
    text = str(caught.value)
    assert "Fatal Python error: Segmentation fault" in text, text
    assert "segfaults_at_import.py" in text and "crash_while_importing_here" in text, text


def test_a_log_tail_keeps_a_deep_stacks_header(tmp_path: Path) -> None:
    from tunefleet.backends._attempt import stderr_tail

    log = tmp_path / "workers.log"
    stack = [f'  File "m{i}.py", line {i} in f{i}' for i in range(40)]
    log.write_text("\n".join(["noise"] * 10 + ["Fatal Python error: Segmentation fault", *stack]))
    tail = stderr_tail(str(log)) or ""
    assert tail.startswith("Fatal Python error: Segmentation fault"), tail  # not 20 lines
    assert tail.endswith("line 39 in f39")
    far = ["Traceback (most recent call last):", *(f"line {i}" for i in range(100))]
    log.write_text("\n".join(far))
    assert stderr_tail(str(log)) == "\n".join(far[-20:]), "a header too far: the last 20 lines"
