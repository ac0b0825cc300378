"""Checkpoints in remote storage (fsspec), and which `Filesystem` a path or URL is on.

With a `storage_path` that is a URL (``s3://``, ``gs://``, ..., see docs/storage.md):

- trials write their checkpoints straight to
  ``<url>/<name>/trials/<trial>/checkpoints/checkpoint_NNNNNN/``
  (`RemoteFilesystem.persist`): every file first, the manifest last, so an upload
  cut at any moment leaves a folder without a manifest, which `filesystem.verify`
  rejects, and the previous checkpoint stays the latest valid one;
- while `sync.ExperimentSync` keeps the remote copy of the experiment, retention
  deletes of its checkpoints wait (`DeferredDeletes`) until a database snapshot
  taken after they were asked for has been uploaded, so the remote copy of the
  database does not point at deleted checkpoints.

`filesystem_for(path)` is the one place a filesystem comes from: `LOCAL` for a
local path; for a URL, the one registered for it in this process
(`register_filesystem`: the experiment's `RunConfig(storage_filesystem=...)`, e.g.
``s3fs.S3FileSystem(endpoint_url=...)``), else what fsspec makes of the URL with its
own configuration and the environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from tunefleet.storage._format import (
    CHUNK,
    MANIFEST_FILE,
    METADATA_FILE,
    CheckpointWriteError,
    list_source,
    manifest_entry,
    manifest_text,
    sha256_file,
)
from tunefleet.storage._local import LOCAL
from tunefleet.storage.filesystem import Filesystem, verify
from tunefleet.storage.location import object_store, parse_storage, strip
from tunefleet.storage.paths import is_url

logger = logging.getLogger("tunefleet")


class RemoteFilesystem(Filesystem):
    """Remote storage through an fsspec filesystem `fs`: paths are URLs."""

    local: ClassVar[bool] = False

    def __init__(self, fs: Any) -> None:
        self.fs = fs
        # Set while an ExperimentSync keeps the experiment under this filesystem's URL.
        self.deletes: DeferredDeletes | None = None

    def path(self, url: str) -> str:
        """The location of `url` inside `fs` (no protocol, no trailing ``/``)."""
        return strip(self.fs, url)

    def join(self, folder: str, *names: str) -> str:
        return "/".join((folder.rstrip("/"), *names))

    def canonical(self, path: str) -> str:
        return path.rstrip("/")

    def sizes(self, folder: str) -> Mapping[str, int] | None:
        # An object store keeps an object whole or not at all: sizes find what a cut upload leaves.
        return self.files_under(self.path(folder)) or None

    def files_under(self, path: str) -> dict[str, int]:
        """Relative path -> size of every file under the folder `path` (fresh, not cached)."""
        self.fs.invalidate_cache(path)
        try:
            found = self.fs.find(path, detail=True)
        except FileNotFoundError:
            return {}
        prefix = path + "/"
        return {
            name[len(prefix) :]: int(info.get("size") or 0)
            for name, info in found.items()
            if name.startswith(prefix) and info.get("type", "file") == "file"
        }

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(self.path(path), "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
        return str(digest.hexdigest())

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self.path(path)))
        except FileNotFoundError:
            return None

    def write_bytes(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(self.path(path), data)

    def persist(self, source: str, final: str) -> str:
        try:
            return self._upload(source, final)
        except Exception as exc:
            raise CheckpointWriteError(
                exc.errno if isinstance(exc, OSError) else None,
                f"Could not write checkpoint {final}: {type(exc).__name__}: {exc}. Nothing of it "
                "counts (it has no manifest) and earlier checkpoints are untouched. Check that "
                "storage_path is reachable and writable (endpoint, bucket, credentials) "
                f"(source: {source}).",
                final,
            ) from exc

    def _upload(self, source: str, url: str) -> str:
        """Files first, manifest last.

        Each file's sha256 is computed before the upload; the manifest, uploaded last,
        lists them. The manifest of an earlier upload of the same name is deleted
        first, so until the new one lands the folder is invalid, never a mix that looks
        valid (files it does not list are ignored, and go with the folder). Empty
        folders are not kept (object stores have none).
        """
        dest = self.path(url)
        local: list[str] = []
        remote: list[str] = []
        entries: list[dict[str, Any]] = []
        for full, rel, _ in list_source(source):
            if rel.endswith("/"):
                continue
            sha, size = sha256_file(full)
            local.append(full)
            remote.append(f"{dest}/{rel}")
            if rel != METADATA_FILE:  # user metadata may be rewritten later (set_metadata)
                entries.append(manifest_entry(rel, size, sha))
        if self.deletes is not None:  # deletes waiting in this folder run now; this name's goes
            self.deletes.claim(url.rsplit("/", 1)[0], keep=url)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(f"{dest}/{MANIFEST_FILE}")
        if not object_store(self.fs):
            for folder in sorted({p.rsplit("/", 1)[0] for p in remote} | {dest}):
                self.fs.makedirs(folder, exist_ok=True)
        if local:
            self.fs.put(local, remote)
        self.fs.pipe_file(f"{dest}/{MANIFEST_FILE}", manifest_text(entries).encode())
        return url

    def download(self, path: str, target: str) -> str:
        """If the checkpoint has a manifest, the copy is checked against it (sha256)."""
        where = self.path(path)
        files = self.files_under(where)
        if not files:
            raise FileNotFoundError(f"Checkpoint {path}: nothing is stored there")
        for rel in files:
            if rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
                raise ValueError(f"Checkpoint {path}: the stored name {rel!r} leaves its folder")
        os.makedirs(target, exist_ok=True)
        rels = sorted(files)
        self.fs.get([f"{where}/{rel}" for rel in rels], [LOCAL.join(target, r) for r in rels])
        if MANIFEST_FILE in files:
            reason = verify(LOCAL, target)
            if reason is not None:
                raise ValueError(
                    f"Checkpoint {path} is damaged: {reason} (found after downloading it)"
                )
        return target

    def delete(self, path: str) -> str | None:
        if self.deletes is not None:
            self.deletes.defer(path)
        else:
            self.remove_folder(path)
        return None

    def remove_folder(self, url: str, files: dict[str, int] | None = None) -> None:
        """Delete a checkpoint folder, its manifest first: a cut delete leaves it invalid."""
        path = self.path(url)
        files = self.files_under(path) if files is None else files
        if MANIFEST_FILE in files:
            self.fs.rm_file(f"{path}/{MANIFEST_FILE}")
        rest = [f"{path}/{rel}" for rel in sorted(files) if rel != MANIFEST_FILE]
        if rest:
            self.fs.rm(rest)
        if not object_store(self.fs):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=True)
        self.fs.invalidate_cache(path)

    def remove_temporaries(self, trial_dir: str) -> list[str]:
        """Deletes checkpoint folders without a manifest (uploads cut by a crash), and runs
        the trial's deferred deletes now: the next attempt may write those names again."""
        root = self.join(trial_dir, "checkpoints")
        if self.deletes is not None:
            self.deletes.claim(root)
        folders: dict[str, dict[str, int]] = {}
        for rel, size in self.files_under(self.path(root)).items():
            folder, _, inner = rel.partition("/")
            if inner:
                folders.setdefault(folder, {})[inner] = size
        removed = []
        for folder, files in sorted(folders.items()):
            if MANIFEST_FILE not in files:
                self.remove_folder(f"{root}/{folder}", files)
                removed.append(f"{root}/{folder}")
        return removed


class DeferredDeletes:
    """Deletes of remote checkpoints that wait for the experiment's next database upload.

    `sync.ExperimentSync` attaches one to the experiment's `RemoteFilesystem` while it
    runs: a delete is then only recorded (`defer`), and runs after the upload of a
    database snapshot taken after it was asked for (`next_snapshot`, then
    `run_due`), so the remote database never points at a deleted checkpoint.
    `claim` runs the deletes under a folder at once, before a trial writes there
    again.
    """

    def __init__(self, remove: Callable[[str], None]) -> None:
        self._remove = remove
        # Guards _pending, and is held while a delete runs: a write under the same name
        # (claim) waits for it.
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}  # url -> snapshot generation when it was deferred
        self._generation = 0

    def defer(self, url: str) -> None:
        with self._lock:
            self._pending.setdefault(url.rstrip("/"), self._generation)

    def claim(self, folder: str, keep: str | None = None) -> None:
        """Run the deferred deletes under `folder` now, except `keep` (about to be written)."""
        prefix = folder.rstrip("/") + "/"
        with self._lock:
            for url in [u for u in self._pending if u.startswith(prefix)]:
                del self._pending[url]
                if url != keep:
                    self._delete(url)

    def next_snapshot(self) -> int:
        """A database snapshot is about to be taken; its generation, for `run_due`."""
        with self._lock:
            self._generation += 1
            return self._generation

    def run_due(self, generation: int) -> None:
        """Run the deletes deferred before snapshot `generation` (now uploaded)."""
        with self._lock:
            due = [u for u, g in self._pending.items() if g < generation]
        for url in due:  # one at a time: the driver never waits for more than one
            with self._lock:
                if self._pending.get(url, generation) < generation:
                    del self._pending[url]
                    self._delete(url)

    def _delete(self, url: str) -> None:
        try:
            self._remove(url)
        except Exception as exc:
            logger.warning("could not delete checkpoint %s: %s: %s", url, type(exc).__name__, exc)


# -- which filesystem reaches a path (per process) ------------------------------------------

_registered: dict[str, RemoteFilesystem] = {}


def register_filesystem(url: str, fs: Any) -> RemoteFilesystem:
    """Reach the URLs under `url` through the fsspec filesystem `fs` in this process.

    Returns the `RemoteFilesystem` they get from `filesystem_for`: the one already
    registered over `url` if it has the same `fs`, so its state (deferred deletes)
    is kept.
    """
    found = _lookup(url)
    filesystem = found if found is not None and found.fs is fs else RemoteFilesystem(fs)
    _registered[url.rstrip("/")] = filesystem
    return filesystem


def _lookup(url: str) -> RemoteFilesystem | None:
    """The filesystem of the longest registered prefix of `url` (whole path segments)."""
    key = url.rstrip("/")
    floor = key.find("://") + 3
    while len(key) > floor:
        found = _registered.get(key)
        if found is not None:
            return found
        key = key[: max(key.rfind("/"), 0)]
    return None


def remote_filesystem(url: str, filesystem: Any = None) -> RemoteFilesystem:
    """The filesystem reaching the remote `url`: over `filesystem` (fsspec) if given, else
    the one registered for it, else fsspec's default for the URL."""
    found = _lookup(url)
    if found is not None and (filesystem is None or found.fs is filesystem):
        return found
    if filesystem is not None:
        return RemoteFilesystem(filesystem)
    storage = parse_storage(url, where="path")
    assert storage is not None
    return RemoteFilesystem(storage.fs)


def filesystem_for(path: str, filesystem: Any = None) -> Filesystem:
    """The filesystem `path` is on: `LOCAL` for a local path, else `remote_filesystem`."""
    return remote_filesystem(path, filesystem) if is_url(path) else LOCAL
