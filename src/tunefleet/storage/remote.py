"""Remote storage: a `storage_path` that is an fsspec URL (``s3://``, ``gs://``, ...).

With such a storage path (see docs/storage.md):

- the experiment's local folder (database, trial logs) is a *staging* folder under
  `default_storage_path()`, and `ExperimentSync` copies it to ``<url>/<name>/``: a
  consistent snapshot of the database (SQLite's backup API) when the run starts,
  every `SyncConfig.sync_period` seconds and at the end, and the trial files that
  changed (logs);
- trials write their checkpoints straight to
  ``<url>/<name>/trials/<trial>/checkpoints/checkpoint_NNNNNN/`` (`upload_checkpoint`):
  every file first, the manifest last, so an upload cut at any moment leaves a
  folder without a manifest, which `verify_remote` rejects, and the previous
  checkpoint stays the latest valid one;
- retention deletes of remote checkpoints wait until a database snapshot taken
  after they were dropped has been uploaded (`ExperimentSync.defer`), so the remote
  copy of the database does not point at deleted checkpoints;
- `fetch_experiment` downloads the database (and trial logs) into a local staging
  folder, from which `Tuner.restore(url)` continues, on this machine or another.

The filesystem is `RunConfig(storage_filesystem=...)` (an fsspec filesystem, e.g.
``s3fs.S3FileSystem(endpoint_url=...)``), remembered for the URLs under the storage
path (`register_filesystem`), or else what fsspec makes of the URL with its own
configuration and the environment. fsspec is imported only when a URL is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunefleet.storage.checkpoint import (
    _METADATA_FILE,
    MANIFEST_FILE,
    CheckpointWriteError,
    _list_source,
    checkpoint_dir_name,
    manifest_entries,
    manifest_text,
    persist_checkpoint,
    verify_checkpoint,
)
from tunefleet.storage.paths import is_url

if TYPE_CHECKING:
    from tunefleet.storage.sync import ExperimentSync

logger = logging.getLogger("tunefleet")
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
# Stores where a put replaces an object whole, and folders do not exist.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
_CHUNK = 1 << 20
_ONE_SLASH = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")  # "s3:/b"; not "C:/" (one letter)


@dataclass(frozen=True)
class Storage:
    """A remote location: its canonical URL (no trailing ``/``) and the filesystem reaching it."""

    url: str
    fs: Any

    @property
    def path(self) -> str:
        """The location inside `fs` (the URL without its protocol)."""
        return strip(self.fs, self.url)

    def join(self, *parts: str) -> str:
        return "/".join((self.url, *parts))


def parse_storage(
    value: Any,
    filesystem: Any = None,
    *,
    where: str = "RunConfig.storage_path",
    fs_where: str = "RunConfig.storage_filesystem",
) -> Storage | None:
    """The remote storage `value` names; None for a local path (or no path).

    A URL (``s3://bucket/prefix``) is remote. With `filesystem` (an fsspec
    filesystem), `value` is a path in it, with or without the protocol; a local
    filesystem means a local path.

    Raises:
        ValueError: the value is not usable (unknown protocol, no bucket, ...), named.
        ImportError: fsspec or the protocol's implementation is missing; names the extra.
        TypeError: `filesystem` is not an fsspec filesystem.
    """
    if filesystem is not None:
        _check_filesystem(filesystem, fs_where)
    if value is None:
        if filesystem is not None:
            raise ValueError(
                f"{fs_where} is given but {where} is not: give the location in that "
                "filesystem, e.g. storage_path='s3://bucket/experiments'"
            )
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{where}={value!r} is not valid: give a local path or a URL such as "
            "'s3://bucket/experiments'"
        )
    if value.startswith("file:") or (filesystem is None and not is_url(value)):
        typo = _ONE_SLASH.match(value)
        if typo is not None and not value.startswith("file:"):
            fixed = f"{typo.group(1)}://{value[typo.end() :]}"
            raise ValueError(
                f"{where}={value!r} is not valid: it looks like a URL with one '/' too few; "
                f"did you mean {fixed!r}?"
            )
        return None
    protocol = value.split("://", 1)[0].lower() if is_url(value) else None
    if filesystem is None:
        assert protocol is not None
        fs, path = _from_url(value, protocol, where)
    else:
        fs = filesystem
        if "file" in _protocols(fs) or "local" in _protocols(fs):
            return None
        if protocol is not None and protocol not in _protocols(fs):
            raise ValueError(
                f"{where}={value!r} does not match {fs_where} ({type(fs).__name__}, "
                f"protocol {' or '.join(_protocols(fs))})"
            )
        path = strip(fs, value)
    if not path.strip("/"):
        raise ValueError(
            f"{where}={value!r} is not valid: it names no bucket or folder "
            "(e.g. 's3://bucket/experiments')"
        )
    return Storage(str(fs.unstrip_protocol(path)).rstrip("/"), fs)


def _fsspec(value: str, protocol: str | None, where: str) -> Any:
    try:
        return importlib.import_module("fsspec")
    except ImportError as exc:
        raise ImportError(
            f"{where}={value!r} needs fsspec (and its implementation of {protocol!r}): "
            f"{_install_hint(protocol)}"
        ) from exc


def _install_hint(protocol: str | None) -> str:
    extra = _EXTRAS.get(protocol or "")
    if extra is not None:
        return f'pip install "tunefleet[{extra}]"'
    return f"install fsspec and its implementation of {protocol!r} (see fsspec's documentation)"


def _from_url(value: str, protocol: str, where: str) -> tuple[Any, str]:
    fsspec = _fsspec(value, protocol, where)
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        raise ImportError(
            f"{where}={value!r} needs fsspec's implementation of {protocol!r}, which is not "
            f"installed: {_install_hint(protocol)} ({exc})"
        ) from exc
    except ValueError as exc:
        raise ValueError(
            f"{where}={value!r} is not valid: {protocol!r} is not a protocol fsspec knows "
            "(e.g. s3, gs, abfs, hdfs, sftp)"
        ) from exc
    try:
        fs, path = fsspec.core.url_to_fs(value)
    except Exception as exc:  # the implementation's own complaint about the URL
        raise ValueError(f"{where}={value!r} is not valid: {type(exc).__name__}: {exc}") from exc
    return fs, str(path).rstrip("/")


def _check_filesystem(filesystem: Any, where: str) -> None:
    fsspec = _fsspec("", None, where)
    if not isinstance(filesystem, fsspec.AbstractFileSystem):
        ray_hint = (
            " (Ray Tune takes a pyarrow filesystem here; tunefleet takes fsspec's)"
            if type(filesystem).__module__.startswith("pyarrow")
            else ""
        )
        raise TypeError(
            f"{where}={filesystem!r} is not an fsspec filesystem{ray_hint}: pass e.g. "
            "s3fs.S3FileSystem(endpoint_url=...), or leave it out to use fsspec's defaults"
        )


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def strip(fs: Any, url: str) -> str:
    return str(fs._strip_protocol(url)).rstrip("/")


def object_store(fs: Any) -> bool:
    return any(p in _OBJECT_STORES for p in _protocols(fs))


# -- which filesystem reaches a URL (per process) -------------------------------------------

_filesystems: dict[str, Any] = {}
_syncs: dict[str, ExperimentSync] = {}


def register_filesystem(url: str, fs: Any) -> None:
    """Reach the URLs under `url` through `fs` in this process (e.g. a custom endpoint)."""
    _filesystems[url.rstrip("/")] = fs


def _lookup(table: dict[str, Any], url: str) -> Any:
    """The entry of the longest registered prefix of `url` (whole path segments), or None."""
    key = url.rstrip("/")
    floor = key.find("://") + 3
    while len(key) > floor:
        found = table.get(key)
        if found is not None:
            return found
        key = key[: max(key.rfind("/"), 0)]
    return None


def filesystem_for(url: str, filesystem: Any = None) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) of the remote `url`."""
    fs = filesystem if filesystem is not None else _lookup(_filesystems, url)
    if fs is None:
        storage = parse_storage(url, where="path")
        assert storage is not None
        fs = storage.fs
    return fs, strip(fs, url)


def files_under(fs: Any, path: str) -> dict[str, int]:
    """Relative path -> size of every file under the folder `path` (fresh, not cached)."""
    fs.invalidate_cache(path)
    try:
        found = fs.find(path, detail=True)
    except FileNotFoundError:
        return {}
    prefix = path + "/"
    return {
        name[len(prefix) :]: int(info.get("size") or 0)
        for name, info in found.items()
        if name.startswith(prefix) and info.get("type", "file") == "file"
    }


# -- checkpoints ------------------------------------------------------------------------------


def persist_remote(
    source: str, trial_dir: str, iteration: int, source_filesystem: Any = None
) -> str:
    """`checkpoint.persist_checkpoint` where the source or the trial folder is a URL."""
    name = checkpoint_dir_name(iteration)
    if is_url(source):
        if is_url(trial_dir) and source.rstrip("/") == _checkpoint_url(trial_dir, name):
            return source.rstrip("/")  # a restored checkpoint reported again as it is
        with tempfile.TemporaryDirectory(prefix="tunefleet_checkpoint_") as tmp:
            download_checkpoint(source, tmp, source_filesystem)
            if is_url(trial_dir):
                return persist_remote(tmp, trial_dir, iteration)
            return persist_checkpoint(tmp, trial_dir, iteration)
    if not os.path.isdir(source):
        raise ValueError(
            f"The checkpoint directory {source} no longer exists: keep it until report() "
            "returns (e.g. call tune.report inside the `with tempfile.TemporaryDirectory()`)"
        )
    url = _checkpoint_url(trial_dir, name)
    try:
        return upload_checkpoint(source, url)
    except Exception as exc:
        errno_ = exc.errno if isinstance(exc, OSError) else None
        raise CheckpointWriteError(
            errno_,
            f"Could not write checkpoint {url}: {type(exc).__name__}: {exc}. Nothing of it "
            "counts (it has no manifest) and earlier checkpoints are untouched. Check that "
            "storage_path is reachable and writable (endpoint, bucket, credentials) "
            f"(source: {source}).",
            url,
        ) from exc


def _checkpoint_url(trial_dir: str, name: str) -> str:
    return f"{trial_dir.rstrip('/')}/checkpoints/{name}"


def upload_checkpoint(source: str, url: str) -> str:
    """Copy the local folder `source` to the remote folder `url`: files first, manifest last.

    Each file's sha256 is computed before the upload; the manifest, uploaded last,
    lists them. The manifest of an earlier upload of the same name is deleted
    first, so until the new one lands the folder is invalid, never a mix that looks
    valid (files it does not list are ignored, and go with the folder). Empty
    folders are not kept (object stores have none).
    """
    fs, dest = filesystem_for(url)
    local: list[str] = []
    remote: list[str] = []
    entries: list[dict[str, Any]] = []
    for full, rel, _ in _list_source(source):
        if rel.endswith("/"):
            continue
        sha, size = _sha256(full)
        local.append(full)
        remote.append(f"{dest}/{rel}")
        if rel != _METADATA_FILE:  # user metadata may be rewritten later (set_metadata)
            entries.append({"path": rel, "size": size, "sha256": sha})
    sync = _lookup(_syncs, url)
    if sync is not None:  # deletes waiting in this folder run now; this name's is dropped
        sync.claim(url.rsplit("/", 1)[0], keep=url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(f"{dest}/{MANIFEST_FILE}")
    if not object_store(fs):
        for folder in sorted({p.rsplit("/", 1)[0] for p in remote} | {dest}):
            fs.makedirs(folder, exist_ok=True)
    if local:
        fs.put(local, remote)
    fs.pipe_file(f"{dest}/{MANIFEST_FILE}", manifest_text(entries).encode())
    return url


def _sha256(path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def download_checkpoint(url: str, target: str, filesystem: Any = None) -> str:
    """Download the remote checkpoint `url` into the local folder `target`; return `target`.

    If it has a manifest, the downloaded files are checked against it (sha256).

    Raises:
        FileNotFoundError: nothing is stored at `url`.
        ValueError: a file does not match the manifest, or a name leaves the folder.
    """
    fs, path = filesystem_for(url, filesystem)
    files = files_under(fs, path)
    if not files:
        raise FileNotFoundError(f"Checkpoint {url}: nothing is stored there")
    for rel in files:
        if rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
            raise ValueError(f"Checkpoint {url}: the stored name {rel!r} leaves its folder")
    os.makedirs(target, exist_ok=True)
    rels = sorted(files)
    fs.get([f"{path}/{rel}" for rel in rels], [os.path.join(target, *r.split("/")) for r in rels])
    if MANIFEST_FILE in files:
        reason = verify_checkpoint(target)
        if reason is not None:
            raise ValueError(f"Checkpoint {url} is damaged: {reason} (found after downloading it)")
    return target


def verify_remote(url: str) -> str | None:
    """`verify_checkpoint` for a remote checkpoint: manifest, files and sizes.

    The sha256 of each file is checked when the checkpoint is downloaded
    (`download_checkpoint`), not here: that would download it twice. An object
    store keeps an object whole or not at all, so sizes find what an interrupted
    upload leaves.
    """
    fs, path = filesystem_for(url)
    sizes = files_under(fs, path)
    if not sizes:
        return "directory missing"
    if MANIFEST_FILE not in sizes:
        return "missing manifest (half-written?)"
    try:
        manifest = json.loads(fs.cat_file(f"{path}/{MANIFEST_FILE}"))
    except (OSError, ValueError) as exc:
        return f"unreadable manifest: {exc}"
    entries = manifest_entries(manifest)
    if isinstance(entries, str):
        return entries
    for rel, size, _ in entries:
        actual = sizes.get(rel)
        if actual is None:
            return f"file {rel}: missing"
        if actual != size:
            return f"file {rel}: size {actual} != {size}"
    return None


def delete_remote(urls: list[str]) -> list[tuple[str, str]]:
    """Delete remote checkpoints (or defer it, see `ExperimentSync.defer`); never raises."""
    failures: list[tuple[str, str]] = []
    for url in urls:
        try:
            sync = _lookup(_syncs, url)
            if sync is not None:
                sync.defer(url)
            else:
                remove_folder(*filesystem_for(url))
        except Exception as exc:  # a retention delete must never take the driver down
            failures.append((url, f"{type(exc).__name__}: {exc}"))
    return failures


def remove_folder(fs: Any, path: str, files: dict[str, int] | None = None) -> None:
    """Delete a remote checkpoint folder, its manifest first: a cut delete leaves it invalid."""
    files = files_under(fs, path) if files is None else files
    if MANIFEST_FILE in files:
        fs.rm_file(f"{path}/{MANIFEST_FILE}")
    rest = [f"{path}/{rel}" for rel in sorted(files) if rel != MANIFEST_FILE]
    if rest:
        fs.rm(rest)
    if not object_store(fs):
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=True)
    fs.invalidate_cache(path)


def remove_remote_temporaries(trial_dir: str) -> list[str]:
    """`checkpoint.remove_temporaries` for a remote trial folder.

    Deletes checkpoint folders without a manifest (uploads cut by a crash), and runs
    the trial's deferred deletes now: the next attempt may write those names again.
    Call it when no attempt of the trial runs.
    """
    root = f"{trial_dir.rstrip('/')}/checkpoints"
    sync = _lookup(_syncs, root)
    if sync is not None:
        sync.claim(root)
    fs, path = filesystem_for(root)
    folders: dict[str, dict[str, int]] = {}
    for rel, size in files_under(fs, path).items():
        folder, _, inner = rel.partition("/")
        if inner:
            folders.setdefault(folder, {})[inner] = size
    removed = []
    for folder, files in sorted(folders.items()):
        if MANIFEST_FILE not in files:
            remove_folder(fs, f"{path}/{folder}", files)
            removed.append(f"{root}/{folder}")
    return removed


def read_bytes(url: str, filesystem: Any = None) -> bytes | None:
    """The content of a remote file, None if it does not exist."""
    fs, path = filesystem_for(url, filesystem)
    try:
        return bytes(fs.cat_file(path))
    except FileNotFoundError:
        return None


def write_bytes(url: str, data: bytes, filesystem: Any = None) -> None:
    fs, path = filesystem_for(url, filesystem)
    fs.pipe_file(path, data)
