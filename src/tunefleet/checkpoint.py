"""Checkpoints: directories of files, copied atomically into a trial's storage.

A `Checkpoint` is only a reference to a directory. `tune.report(...,
checkpoint=...)` copies the directory into `<trial>/checkpoints/checkpoint_NNNNNN`
through a temporary sibling and a rename, so a reader (or a resumed run) never
sees a half-written checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_METADATA_FILE = ".tunefleet_checkpoint.json"


class Checkpoint:
    """A directory holding a trial's saved state.

    Example:
        >>> import tempfile, tunefleet as tune
        >>> d = tempfile.mkdtemp()
        >>> ckpt = tune.Checkpoint.from_directory(d)
        >>> with ckpt.as_directory() as path:
        ...     assert path == d
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """Refer to an existing directory (nothing is copied yet)."""
        if not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory({os.fspath(path)!r}): not a directory")
        return cls(path)

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the checkpoint's files into `path` (a new temporary directory if None)."""
        target = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="checkpoint_")
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the checkpoint's files (no copy for local ones)."""
        yield self.path

    def get_metadata(self) -> dict[str, Any]:
        meta_file = Path(self.path, _METADATA_FILE)
        if not meta_file.exists():
            return {}
        data: dict[str, Any] = json.loads(meta_file.read_text())
        return data

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        Path(self.path, _METADATA_FILE).write_text(json.dumps(metadata))

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"


def checkpoint_dir_name(iteration: int) -> str:
    return f"checkpoint_{iteration:06d}"


def persist_checkpoint(source: str, trial_dir: str, iteration: int) -> str:
    """Copy `source` into the trial's checkpoints folder atomically; return the new path.

    The copy goes to a hidden temporary sibling first and is renamed into place, so
    a crash mid-copy leaves the previous checkpoint as the latest valid one.
    """
    root = os.path.join(trial_dir, "checkpoints")
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, checkpoint_dir_name(iteration))
    if os.path.abspath(source) == os.path.abspath(final):
        return final
    tmp = os.path.join(root, f".tmp_{os.urandom(4).hex()}")
    shutil.copytree(source, tmp)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    return final


def delete_checkpoint(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


class CheckpointKeeper:
    """Applies `CheckpointConfig` retention: keep the best N (and always the latest).

    Args:
        num_to_keep: how many checkpoints per trial to keep; None keeps all.
        score_attribute: metric that ranks checkpoints; None ranks by age.
        score_order: "max" or "min".
    """

    def __init__(
        self,
        num_to_keep: int | None = None,
        score_attribute: str | None = None,
        score_order: str = "max",
    ) -> None:
        self.num_to_keep = num_to_keep
        self.score_attribute = score_attribute
        self.sign = 1.0 if score_order == "max" else -1.0
        self._kept: dict[str, list[tuple[float, int, str]]] = {}
        self._counter = 0

    def add(self, trial_id: str, path: str, result: dict[str, Any]) -> list[str]:
        """Record a new checkpoint; delete and return the ones that fall out."""
        self._counter += 1
        kept = [k for k in self._kept.setdefault(trial_id, []) if k[2] != path]
        kept.append((self._score(result), self._counter, path))
        self._kept[trial_id] = kept
        if self.num_to_keep is None or len(kept) <= self.num_to_keep:
            return []
        latest = kept[-1]
        ranked = sorted(kept[:-1], key=lambda k: (k[0], k[1]))  # worst first
        doomed = ranked[: len(kept) - self.num_to_keep]
        self._kept[trial_id] = [k for k in kept if k not in doomed or k is latest]
        for _, _, old in doomed:
            delete_checkpoint(old)
        return [old for _, _, old in doomed]

    def discard(self, path: str) -> None:
        """A checkpoint that arrived after its trial was stopped: not kept."""
        delete_checkpoint(path)

    def _score(self, result: dict[str, Any]) -> float:
        if self.score_attribute is None:
            return float(self._counter)
        value = result.get(self.score_attribute)
        try:
            score = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return float("-inf")
        return self.sign * score if math.isfinite(score) else float("-inf")
