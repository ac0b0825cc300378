"""What a checkpoint is on any filesystem: its names, its manifest, the error of a failed write.

The lowest layer of `tunefleet.storage`: it imports nothing else of tunefleet, and
every other storage module may import it. A checkpoint is a folder
``<trial>/checkpoints/checkpoint_NNNNNN/`` holding the trial's files and a manifest
(`MANIFEST_FILE`: path, size and sha256 of each file), written last. See
docs/checkpoints.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import time
from typing import Any, NamedTuple

logger = logging.getLogger("tunefleet")

METADATA_FILE = ".tunefleet_checkpoint.json"
"""The user's metadata (`Checkpoint.set_metadata`); not in the manifest: it may be rewritten."""
MANIFEST_FILE = ".tunefleet_manifest.json"
MANIFEST_VERSION = 1
CHECKPOINT_NAME = re.compile(r"checkpoint_\d+")
TMP_PREFIXES = (".tmp_", ".old_", ".del_")
"""Temporaries of an interrupted write or delete start with these (`remove_temporaries`)."""
CHUNK = 1 << 20


def checkpoint_dir_name(iteration: int) -> str:
    return f"checkpoint_{iteration:06d}"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, quota, permissions...).

    Raised from `tune.report()`. Nothing of the failed write is left behind and the
    previous checkpoint is untouched, so a retry resumes from it.
    """

    def __init__(self, err: int | None, message: str, path: str) -> None:
        super().__init__(err, message, path)
        self.message = message

    def __str__(self) -> str:
        return self.message


# Its public home (and the name failure records show): defined here, below the writers.
CheckpointWriteError.__module__ = "tunefleet.storage.checkpoint"


class SourceFile(NamedTuple):
    """A file of a local folder about to become a checkpoint."""

    full: str  # absolute path; an empty folder's path (rel then ends with "/")
    rel: str  # path inside the folder, "/"-separated
    size: int


def list_source(source: str) -> list[SourceFile]:
    """Each regular file (and empty folder) of the local folder `source`, in a stable order.

    A manifest already there (a restored checkpoint reported again) is left out: the
    copy gets a new one. A symlink that stays inside `source` is followed (the copy
    holds the file or folder it points to, never a link).

    Raises:
        ValueError: a symlink points outside `source`, or to a folder holding it (a loop).
    """
    root = os.path.realpath(source)
    out: list[SourceFile] = []
    for dirpath, dirnames, filenames in os.walk(source, onerror=_raise, followlinks=True):
        dirnames.sort()
        for name in dirnames:  # before os.walk descends into a linked folder
            _check_source_link(source, root, os.path.join(dirpath, name), folder=True)
        for fname in sorted(filenames):
            full = os.path.join(dirpath, fname)
            rel = os.path.relpath(full, source).replace(os.sep, "/")
            if rel == MANIFEST_FILE:
                continue
            _check_source_link(source, root, full, folder=False)
            st = os.stat(full)
            if not stat.S_ISREG(st.st_mode):
                logger.warning("checkpoint %s: skipped %s (not a regular file)", source, rel)
                continue
            out.append(SourceFile(full, rel, st.st_size))
        if not filenames and not dirnames and dirpath != source:
            rel = os.path.relpath(dirpath, source).replace(os.sep, "/") + "/"
            out.append(SourceFile(dirpath, rel, 0))
    return out


def _raise(exc: OSError) -> None:
    raise exc


def _inside(path: str, root: str) -> bool:
    """Whether the resolved `path` is `root` or lies under it (both resolved)."""
    return os.path.commonpath([path, root]) == root


def _check_source_link(source: str, root: str, full: str, *, folder: bool) -> None:
    if not os.path.islink(full):
        return
    rel = os.path.relpath(full, source).replace(os.sep, "/")
    target = os.path.realpath(full)
    if not _inside(target, root):
        raise ValueError(
            f"checkpoint {source}: symlink {rel} -> {os.readlink(full)} points outside the "
            f"checkpoint directory (to {target}); a checkpoint must hold its files, so copy "
            "the file into the directory instead of linking to it"
        )
    if folder and _inside(os.path.realpath(os.path.dirname(full)), target):
        raise ValueError(
            f"checkpoint {source}: symlink {rel} -> {os.readlink(full)} points to a folder "
            "that holds it (a loop); remove the link"
        )


def link_outside(folder: str) -> str | None:
    """Why the local checkpoint `folder` must not be used: the first symlink in it
    (listed in its manifest or not) that points outside it; None if there is none.

    Example:
        >>> import tempfile; link_outside(tempfile.mkdtemp()) is None
        True
    """
    root = os.path.realpath(folder)
    for dirpath, dirnames, filenames in os.walk(folder):  # links are not followed
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not _inside(os.path.realpath(full), root):
                rel = os.path.relpath(full, folder).replace(os.sep, "/")
                return f"symlink {rel} points outside the checkpoint (to {os.readlink(full)})"
    return None


def manifest_entry(rel: str, size: int, sha256: str) -> dict[str, Any]:
    return {"path": rel, "size": size, "sha256": sha256}


def manifest_text(entries: list[dict[str, Any]]) -> str:
    """The manifest of a checkpoint holding `entries` (`manifest_entry` of each file)."""
    manifest = {
        "format": "tunefleet-checkpoint",
        "version": MANIFEST_VERSION,
        "created": time.time(),
        "files": entries,
    }
    return json.dumps(manifest, indent=1)


def manifest_entries(manifest: Any) -> list[tuple[str, int, str]] | str:
    """The ``(path, size, sha256)`` a manifest lists, or why it cannot be used."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return "malformed manifest"
    version = manifest.get("version")
    if not isinstance(version, int) or version > MANIFEST_VERSION:
        return (
            f"manifest version {version!r} not supported (this tunefleet reads {MANIFEST_VERSION})"
        )
    entries = []
    for entry in manifest["files"]:
        try:
            rel, size, sha = str(entry["path"]), int(entry["size"]), str(entry["sha256"])
        except (TypeError, KeyError, ValueError):
            return f"malformed manifest entry {entry!r}"
        if rel.startswith("/") or ".." in rel.split("/"):
            return f"manifest entry {rel!r} points outside the checkpoint"
        entries.append((rel, size, sha))
    return entries


def sha256_file(path: str) -> tuple[str, int]:
    """(sha256 hex digest, size) of the local file `path`, read once.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            digest.update(view[:n])
            size += n
    return digest.hexdigest(), size
