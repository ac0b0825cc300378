"""A searcher's state in a file or a folder (`Searcher.save` / `restore` and the
`_dir` forms): JSON, never a pickle, so loading one runs no code.

The file holds the searcher's class name, metric, mode, search space (when it is a
tunefleet space), the spec it was given (num_samples, constraints) and `get_state()`.
`restore_from_dir` also reads a Tuner's experiment directory, whose database keeps
the searcher's state of the last step.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
from typing import Any

from tunefleet.space import space_to_json

# `searcher` below is a tunefleet.search.Searcher: not imported, since _base calls here
Searcher = Any

_FORMAT = "tunefleet-searcher-state"
_VERSION = 1
_WRAPPERS = ("ConcurrencyLimiter", "Repeater")


def write_state(searcher: Searcher, path: str | os.PathLike[str]) -> None:
    """Write the searcher's file to `path` atomically (a crash leaves the old one)."""
    target = os.path.abspath(os.fspath(path))
    data = {
        "format": _FORMAT,
        "version": _VERSION,
        "searcher": type(searcher).__name__,
        "metric": searcher.metric,
        "mode": searcher.mode,
        "space": _space_json(searcher.searched_space()),
        "spec": searcher._saved_spec(),
        "state": searcher.get_state(),
    }
    text = json.dumps(data, allow_nan=False)
    folder = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=".searcher-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _space_json(space: dict[str, Any] | None) -> Any:
    """The space as JSON, or None when it holds what JSON cannot (a library's objects)."""
    if space is None:
        return None
    try:
        data = space_to_json(space)
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return data


def read_state(searcher: Searcher, path: str | os.PathLike[str]) -> None:
    """Load the file `write_state` wrote into `searcher` (of the same class)."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{type(searcher).__name__}.restore: no file at {where!r}"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{type(searcher).__name__}.restore: {where!r} is not a searcher state written by "
            f"save() (tunefleet writes JSON; a Ray Tune pickle cannot be read): {exc}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(
            f"{type(searcher).__name__}.restore: {where!r} is not a searcher state written "
            "by save()"
        )
    apply_saved(searcher, data, where)


def apply_saved(searcher: Searcher, data: dict[str, Any], where: str) -> None:
    """Restore `searcher` from the content of a state file (`where`: for messages)."""
    if data.get("version") != _VERSION:
        raise ValueError(
            f"{where}: searcher state version {data.get('version')!r} is not supported "
            f"(expected {_VERSION})"
        )
    owner = type(searcher).__name__
    state, saved_by = data["state"], data.get("searcher")
    while saved_by != owner and saved_by in _WRAPPERS and isinstance(state.get("searcher"), dict):
        # a wrapper's state holds the wrapped searcher's: restore that one (Ray's save does)
        state, saved_by = state["searcher"], None
        data = {**data, "state": state, "searcher": owner}
    if saved_by is not None and saved_by != owner:
        raise ValueError(
            f"{where} holds the state of a {data.get('searcher')}; it cannot be restored "
            f"into a {owner}: construct a {data.get('searcher')}"
        )
    searcher._restore_space(data)
    searcher.set_state(data["state"])


def restore_from_dir(searcher: Searcher, folder: str | os.PathLike[str]) -> None:
    """The newest ``searcher-state-*.json`` in `folder`, else the experiment there."""
    root = os.path.expanduser(os.fspath(folder))
    pattern = os.path.join(glob.escape(root), searcher.CKPT_FILE_TMPL.format("*"))
    files = sorted(glob.glob(pattern), key=os.path.getmtime)
    if files:
        read_state(searcher, files[-1])
        return
    from tunefleet.store import DB_FILENAME, StoreReader

    if not os.path.isfile(os.path.join(root, DB_FILENAME)):
        raise RuntimeError(
            f"{type(searcher).__name__}.restore_from_dir: found neither a searcher state "
            f"({searcher.CKPT_FILE_TMPL.format('*')}) nor an experiment in {root!r}"
        )
    with StoreReader(root) as reader:
        meta, state = reader.meta(), reader.state("searcher")
    if state is None:
        raise RuntimeError(f"the experiment in {root!r} has saved no searcher state yet")
    tune_config = meta.get("tune_config") or {}
    spec = {k: tune_config[k] for k in ("num_samples", "constraints") if k in tune_config}
    data = {
        "format": _FORMAT,
        "version": _VERSION,
        "searcher": meta.get("searcher"),
        "metric": meta.get("metric"),
        "mode": meta.get("mode"),
        "space": meta.get("param_space") or None,
        "spec": spec,
        "state": state,
    }
    apply_saved(searcher, data, f"the experiment in {root!r}")
