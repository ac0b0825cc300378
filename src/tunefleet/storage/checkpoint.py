"""Checkpoints: directories of files, written atomically with a manifest, and retention.

A `Checkpoint` is only a reference to a directory: a local path, or a URL in remote
storage. `tune.report(..., checkpoint=...)` calls `persist_checkpoint`, which copies
the directory into `<trial>/checkpoints/checkpoint_NNNNNN` so that a reader (or a
resumed run) never sees a half-written checkpoint, and `verify_checkpoint` detects
one that was damaged afterwards. Each function here takes the `Filesystem` the path
is on from `remote.filesystem_for` and leaves the work to it: `_local` writes
atomically on a disk, `remote` uploads manifest last; `filesystem.verify` checks
either. `CheckpointKeeper` decides which checkpoints retention removes;
`delete_checkpoints` removes them (both live in `retention` and are re-exported
here). See docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from tunefleet.storage._format import MANIFEST_FILE as MANIFEST_FILE
from tunefleet.storage._format import METADATA_FILE, link_outside
from tunefleet.storage._format import CheckpointWriteError as CheckpointWriteError
from tunefleet.storage._format import checkpoint_dir_name as checkpoint_dir_name
from tunefleet.storage.filesystem import Filesystem, verify
from tunefleet.storage.location import parse_storage
from tunefleet.storage.paths import is_url, local_path
from tunefleet.storage.remote import filesystem_for
from tunefleet.storage.retention import CheckpointKeeper as CheckpointKeeper
from tunefleet.storage.retention import delete_checkpoints as delete_checkpoints


class Checkpoint:
    """A directory holding a trial's saved state: a local path, or a URL in remote storage.

    A remote checkpoint (``s3://...``) is downloaded by `as_directory` and
    `to_directory`, and checked against its manifest on the way. `filesystem` (an
    fsspec filesystem) reaches it; by default, the one given as the experiment's
    `storage_filesystem`, else fsspec's default for the URL.

    Example:
        >>> import tempfile, tunefleet as tune
        >>> d = tempfile.mkdtemp()
        >>> ckpt = tune.Checkpoint.from_directory(d)
        >>> with ckpt.as_directory() as path:
        ...     assert path == d
    """

    def __init__(self, path: str | os.PathLike[str], filesystem: Any = None) -> None:
        self.path = local_path(os.fspath(path))
        self.filesystem = filesystem
        if filesystem is not None and not is_url(self.path):
            storage = parse_storage(self.path, filesystem, where="path", fs_where="filesystem")
            self.path = storage.url if storage is not None else self.path

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """Refer to an existing local directory (nothing is copied yet)."""
        if is_url(os.fspath(path)):
            raise ValueError(
                f"Checkpoint.from_directory({os.fspath(path)!r}) takes a local directory; "
                "refer to a checkpoint in remote storage with tune.Checkpoint(url)"
            )
        if not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory({os.fspath(path)!r}): not a directory")
        return cls(path)

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the checkpoint's files into `path` (a new temporary directory if None)."""
        target = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="checkpoint_")
        return self._filesystem().download(self.path, target)

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the checkpoint's files (a remote one is downloaded
        into a temporary directory, removed afterwards; a local one is not copied).

        Raises:
            ValueError: a symlink in the local directory points outside it.
        """
        fs = self._filesystem()
        if fs.local:
            escape = link_outside(self.path) if os.path.isdir(self.path) else None
            if escape is not None:
                raise ValueError(f"Checkpoint {self.path} refused: {escape}")
            yield self.path
            return
        with tempfile.TemporaryDirectory(prefix="checkpoint_") as tmp:
            yield fs.download(self.path, tmp)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        """A checkpoint holding `data` (Ray 2.0-2.6's dict checkpoint), written into a new
        temporary directory: JSON when the dict reads back equal, else a pickle."""
        if not isinstance(data, dict):
            raise TypeError(
                f"Checkpoint.from_dict(data): data must be a dict, got {type(data).__name__}"
            )
        directory = tempfile.mkdtemp(prefix="checkpoint_")
        write_dict_state(data, directory)
        return cls(directory)

    def to_dict(self) -> dict[str, Any]:
        """The dict a checkpoint made by `from_dict` (or by a class trainable's
        `save_checkpoint` returning a dict) holds."""
        with self.as_directory() as directory:
            state = read_dict_state(directory)
        if state is None:
            raise ValueError(
                f"Checkpoint.to_dict(): {self.path} holds files, not a dict checkpoint; "
                "read it with checkpoint.as_directory() or to_directory()"
            )
        return state

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge `metadata` into the checkpoint's metadata, as Ray's does."""
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def get_metadata(self) -> dict[str, Any]:
        fs = self._filesystem()
        raw = fs.read_bytes(fs.join(self.path, METADATA_FILE))
        return {} if raw is None else dict(json.loads(raw))

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        fs = self._filesystem()
        fs.write_bytes(fs.join(self.path, METADATA_FILE), json.dumps(metadata).encode())

    def _filesystem(self) -> Filesystem:
        return filesystem_for(self.path, self.filesystem)

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"


_STATE_JSON = ".tunefleet_state.json"
_STATE_PICKLE = ".tunefleet_state.pkl"


def write_dict_state(state: dict[str, Any], directory: str) -> None:
    """Write a dict checkpoint's data into `directory`: JSON when it reads back equal
    (plain data), else a pickle (tensors, arrays, tuples, int keys: the user's own
    objects, read back only by their own code)."""
    try:
        text = json.dumps(state)
        plain = json.loads(text) == state
    except (TypeError, ValueError):
        plain = False
    if plain:
        with open(os.path.join(directory, _STATE_JSON), "w") as f:
            f.write(text)
        return
    with open(os.path.join(directory, _STATE_PICKLE), "wb") as f:
        pickle.dump(state, f)


def read_dict_state(directory: str) -> dict[str, Any] | None:
    """The dict `write_dict_state` wrote into `directory`, or None if there is none."""
    path = os.path.join(directory, _STATE_JSON)
    if os.path.exists(path):
        with open(path) as f:
            state: dict[str, Any] = json.load(f)
        return state
    path = os.path.join(directory, _STATE_PICKLE)
    if os.path.exists(path):
        with open(path, "rb") as f:
            loaded: dict[str, Any] = pickle.load(f)
        return loaded
    return None


def checkpoint_path(trial_dir: str, iteration: int) -> str:
    """Where `persist_checkpoint` puts the trial's checkpoint of `iteration` (no IO)."""
    return filesystem_for(trial_dir).join(trial_dir, "checkpoints", checkpoint_dir_name(iteration))


def persist_checkpoint(
    source: str, trial_dir: str, iteration: int, *, source_filesystem: Any = None
) -> str:
    """Copy `source` into the trial's checkpoints folder atomically; return the new path.

    Either may be a URL in remote storage (`source_filesystem` reaches a remote
    source, which is downloaded first); a remote copy is uploaded file by file with
    the manifest last, so a cut upload leaves a folder without a manifest, never a
    valid-looking one.

    Locally, the files are copied (and hashed in the same pass) into a hidden
    temporary sibling, the manifest is written last, all of it is fsynced, and the
    folder is renamed into place. A crash at any moment leaves either no new
    checkpoint or a complete one, never a half-written one under the final name.

    Raises:
        CheckpointWriteError: the copy failed (e.g. no space left); the temporary
            folder has been removed and earlier checkpoints are untouched.
    """
    target = filesystem_for(trial_dir)
    final = checkpoint_path(trial_dir, iteration)
    origin = filesystem_for(source, source_filesystem)
    if origin.canonical(source) == target.canonical(final):
        return final  # a restored checkpoint reported again as it is
    if not origin.local:
        with tempfile.TemporaryDirectory(prefix="tunefleet_checkpoint_") as tmp:
            return target.persist(origin.download(source, tmp), final)
    if not os.path.isdir(source):
        raise ValueError(
            f"The checkpoint directory {source} no longer exists: keep it until report() "
            "returns (e.g. call tune.report inside the `with tempfile.TemporaryDirectory()`)"
        )
    return target.persist(source, final)


def remove_temporaries(trial_dir: str) -> list[str]:
    """Remove what interrupted writes and deletes left in the trial's checkpoints folder.

    Locally, the hidden temporaries of cut writes and deletes; remotely, checkpoint
    folders without a manifest (uploads cut by a crash), after running the trial's
    deferred deletes. Call it when no attempt of the trial is running (before a
    restart or resume).
    """
    return filesystem_for(trial_dir).remove_temporaries(trial_dir)


def verify_checkpoint(path: str, *, checksums: bool = True) -> str | None:
    """Check a persisted checkpoint against its manifest (see `filesystem.verify`).

    Args:
        path: the checkpoint directory, or its URL in remote storage (there the
            files and sizes are checked, and each sha256 when it is downloaded).
        checksums: also compare each file's sha256 (reads every byte); False only
            checks that the files exist with the right sizes.

    Returns:
        None if the checkpoint is complete and intact, else a short reason such as
        ``"missing manifest (half-written?)"`` or ``"file model.pt: size 123 != 456"``.
    """
    return verify(filesystem_for(path), path, checksums=checksums)


def latest_valid(
    paths_newest_first: Iterable[str | None], *, checksums: bool = True
) -> tuple[str | None, list[tuple[str, str]]]:
    """The first checkpoint that verifies, and ``(path, reason)`` for each one skipped.

    `checksums=False` checks files and sizes only (no file is read), for a quick
    check of checkpoints this run wrote itself.

    Example:
        >>> latest_valid([])
        (None, [])
    """
    skipped: list[tuple[str, str]] = []
    for path in paths_newest_first:
        if not path:
            continue
        reason = verify_checkpoint(path, checksums=checksums)
        if reason is None:
            return path, skipped
        skipped.append((path, reason))
    return None, skipped
