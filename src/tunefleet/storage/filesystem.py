"""The filesystem checkpoints live on, as one interface, and the one check of a checkpoint.

A `Filesystem` is the local disk (`_local.LocalFilesystem`) or remote storage
reached through fsspec (`remote.RemoteFilesystem`); `remote.filesystem_for(path)`
gives the one a path or URL is on. Writing, downloading, deleting and verifying a
checkpoint go through it, so each is written once over the interface, or once per
filesystem where the two must differ (an atomic rename on a disk, manifest-last
uploads to an object store). `verify` checks a checkpoint against its manifest on
either.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from tunefleet.storage._format import MANIFEST_FILE, manifest_entries


class Filesystem(ABC):
    """Where checkpoints are kept. Paths are what the filesystem takes: local paths or URLs."""

    local: ClassVar[bool]
    """Paths are local: a checkpoint is used in place, and `verify` reads its files to
    compare checksums (a remote one's are compared when it is downloaded: reading
    them here would download it twice)."""

    @abstractmethod
    def join(self, folder: str, *names: str) -> str:
        """The path of `names` (each may hold ``/``) inside `folder`."""

    @abstractmethod
    def canonical(self, path: str) -> str:
        """`path` in one spelling, to tell whether two paths name the same folder."""

    @abstractmethod
    def sizes(self, folder: str) -> Mapping[str, int] | None:
        """Size of each file under `folder` by its ``/``-separated relative path; None if
        there is no such folder (remote: nothing stored under it)."""

    @abstractmethod
    def sha256(self, path: str) -> str:
        """The sha256 hex digest of the file `path`.

        Raises:
            OSError: it cannot be read.
        """

    @abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The content of the file `path`; None if it does not exist."""

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Replace the content of the file `path` with `data`."""

    @abstractmethod
    def persist(self, source: str, final: str) -> str:
        """Copy the local folder `source` to the checkpoint folder `final`, manifest
        last, so that no reader ever takes a partial copy for a checkpoint; return `final`.

        Raises:
            CheckpointWriteError: the copy failed; nothing of it counts, and the other
                checkpoints are untouched.
        """

    @abstractmethod
    def download(self, path: str, target: str) -> str:
        """Copy the checkpoint at `path` into the local folder `target`; return `target`.

        Raises:
            FileNotFoundError: nothing is stored at `path` (remote).
            ValueError: the copy does not match the checkpoint's manifest (remote).
        """

    @abstractmethod
    def delete(self, path: str) -> str | None:
        """Delete the checkpoint folder `path` so that a cut delete never leaves a valid-
        looking part; None when done (or already gone), else why it was left alone.

        Raises:
            Exception: the delete failed (the caller reports it).
        """

    def escaping_link(self, folder: str) -> str | None:
        """Why the checkpoint `folder` leads outside itself (a symlink that points out of
        it), or None. Object stores hold no symlinks: by default, None."""
        return None

    @abstractmethod
    def remove_temporaries(self, trial_dir: str) -> list[str]:
        """Remove what interrupted writes and deletes left in the trial's checkpoints
        folder; return what was removed. Only when no attempt of the trial runs."""


def verify(fs: Filesystem, path: str, *, checksums: bool = True) -> str | None:
    """Check the checkpoint at `path` on `fs` against its manifest.

    Args:
        fs: the filesystem `path` is on.
        path: the checkpoint folder.
        checksums: also compare each file's sha256 on a local filesystem (reads every
            byte); False only checks that the files exist with the right sizes.

    Returns:
        None if the checkpoint is complete and intact, else a short reason such as
        ``"missing manifest (half-written?)"`` or ``"file model.pt: size 123 != 456"``.
    """
    sizes = fs.sizes(path)
    if sizes is None:
        return "directory missing"
    if MANIFEST_FILE not in sizes:
        return "missing manifest (half-written?)"
    escape = fs.escaping_link(path)
    if escape is not None:
        return escape
    try:
        raw = fs.read_bytes(fs.join(path, MANIFEST_FILE))
        manifest = None if raw is None else json.loads(raw)
    except (OSError, ValueError) as exc:
        return f"unreadable manifest: {exc}"
    if raw is None:  # deleted since it was listed
        return "missing manifest (half-written?)"
    entries = manifest_entries(manifest)
    if isinstance(entries, str):
        return entries
    for rel, size, sha in entries:
        actual = sizes.get(rel)
        if actual is None:
            return f"file {rel}: missing"
        if actual != size:
            return f"file {rel}: size {actual} != {size}"
        if checksums and fs.local:
            try:
                digest = fs.sha256(fs.join(path, rel))
            except OSError as exc:
                return f"file {rel}: unreadable ({exc.strerror or exc})"
            if digest != sha:
                return f"sha256 mismatch in {rel}"
    return None
