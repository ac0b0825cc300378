"""Checkpoints: directories of files, written atomically with a manifest, and retention.

A `Checkpoint` is only a reference to a directory (local, or a URL in remote
storage: then `remote` does the remote side of each function here). `tune.report(...,
checkpoint=...)` calls `persist_checkpoint`, which copies the directory into
`<trial>/checkpoints/checkpoint_NNNNNN` through a temporary sibling: every file is
hashed while it is copied, a manifest (path, size, sha256 of each file) is written
last, everything is fsynced, and the directory is renamed into place. A reader
(or a resumed run) never sees a half-written checkpoint, and `verify_checkpoint`
detects one that was damaged afterwards. `CheckpointKeeper` decides which
checkpoints retention removes; `delete_checkpoints` removes them (both live in
`retention` and are re-exported here). See
docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tunefleet.storage.paths import is_url, local_path
from tunefleet.storage.retention import CHECKPOINT_NAME as _CHECKPOINT_NAME
from tunefleet.storage.retention import CheckpointKeeper as CheckpointKeeper
from tunefleet.storage.retention import delete_checkpoints as delete_checkpoints

logger = logging.getLogger("tunefleet")

_METADATA_FILE = ".tunefleet_checkpoint.json"
MANIFEST_FILE = ".tunefleet_manifest.json"
MANIFEST_VERSION = 1
_CHUNK = 1 << 20
_PENDING = 16  # chunks read ahead of the hashing thread (bounds memory to ~16 MB)
_WRITEBACK = 8 << 20  # start writing a file out every this many bytes
_BLOCK = 4096  # a file takes whole blocks on disk: used to estimate the space a copy needs
_RESERVE_MAX = 64 << 20  # leave this much (or 1% of the filesystem) for the store and logs
# Temporaries of an interrupted write or delete start with these; `remove_temporaries` clears them.
_TMP_PREFIXES = (".tmp_", ".old_", ".del_")


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
            from tunefleet.storage.remote import parse_storage

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
        if is_url(self.path):
            from tunefleet.storage.remote import download_checkpoint

            return download_checkpoint(self.path, target, self.filesystem)
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the checkpoint's files (a remote one is downloaded
        into a temporary directory, removed afterwards; a local one is not copied)."""
        if not is_url(self.path):
            yield self.path
            return
        with tempfile.TemporaryDirectory(prefix="checkpoint_") as tmp:
            yield self.to_directory(tmp)

    def get_metadata(self) -> dict[str, Any]:
        if is_url(self.path):
            from tunefleet.storage.remote import read_bytes

            raw = read_bytes(f"{self.path}/{_METADATA_FILE}", self.filesystem)
            return {} if raw is None else dict(json.loads(raw))
        meta_file = Path(self.path, _METADATA_FILE)
        if not meta_file.exists():
            return {}
        data: dict[str, Any] = json.loads(meta_file.read_text())
        return data

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        if is_url(self.path):
            from tunefleet.storage.remote import write_bytes

            write_bytes(f"{self.path}/{_METADATA_FILE}", json.dumps(metadata).encode())
            return
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


# -- writing ------------------------------------------------------------------------------


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


def persist_checkpoint(
    source: str, trial_dir: str, iteration: int, *, source_filesystem: Any = None
) -> str:
    """Copy `source` into the trial's checkpoints folder atomically; return the new path.

    Either may be a URL in remote storage (`source_filesystem` reaches a remote
    source); a remote copy is uploaded file by file with the manifest last, so a
    cut upload leaves a folder without a manifest, never a valid-looking one.

    The files are copied (and hashed in the same pass) into a hidden temporary
    sibling, the manifest is written last, all of it is fsynced, and the folder is
    renamed into place. A crash at any moment leaves either no new checkpoint or a
    complete one, never a half-written one under the final name.

    Raises:
        CheckpointWriteError: the copy failed (e.g. no space left); the temporary
            folder has been removed and earlier checkpoints are untouched.
    """
    if is_url(source) or is_url(trial_dir):
        from tunefleet.storage.remote import persist_remote

        return persist_remote(source, trial_dir, iteration, source_filesystem)
    root = os.path.join(trial_dir, "checkpoints")
    name = checkpoint_dir_name(iteration)
    final = os.path.join(root, name)
    if os.path.abspath(source) == os.path.abspath(final):
        return final
    if not os.path.isdir(source):
        raise ValueError(
            f"The checkpoint directory {source} no longer exists: keep it until report() "
            "returns (e.g. call tune.report inside the `with tempfile.TemporaryDirectory()`)"
        )
    tmp = os.path.join(root, f".tmp_{name}_{os.urandom(4).hex()}")
    needed = 0
    try:
        files = _list_source(source)
        needed = sum(-(-size // _BLOCK) * _BLOCK + _BLOCK for _, _, size in files) + 2 * _BLOCK
        created_root = not os.path.isdir(root)
        os.makedirs(root, exist_ok=True)
        if created_root:
            _fsync_path(trial_dir)
        _check_space(root, needed)
        os.mkdir(tmp)
        entries = _copy_tree(files, tmp)
        _write_manifest(tmp, entries)
        _fsync_tree(tmp)
        _replace(tmp, final)
        _fsync_path(root)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(exc, source, final, needed) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _list_source(source: str) -> list[tuple[str, str, int]]:
    """(absolute path, relative path, size) of each regular file, in a stable order."""
    out: list[tuple[str, str, int]] = []
    for dirpath, dirnames, filenames in os.walk(source, onerror=_raise, followlinks=True):
        dirnames.sort()
        for fname in sorted(filenames):
            full = os.path.join(dirpath, fname)
            rel = os.path.relpath(full, source).replace(os.sep, "/")
            if rel == MANIFEST_FILE:  # a restored checkpoint reported again: a new one is written
                continue
            st = os.stat(full)
            if not stat.S_ISREG(st.st_mode):
                logger.warning("checkpoint %s: skipped %s (not a regular file)", source, rel)
                continue
            out.append((full, rel, st.st_size))
        if not filenames and not dirnames and dirpath != source:
            out.append((dirpath, os.path.relpath(dirpath, source).replace(os.sep, "/") + "/", 0))
    return out


def _raise(exc: OSError) -> None:
    raise exc


def _copy_tree(files: list[tuple[str, str, int]], tmp: str) -> list[dict[str, Any]]:
    """Copy each file in one read pass, hashing it on the way; fsync them all.

    Hashing runs on a helper thread (sha256 releases the GIL) while the next
    chunks are written, and the kernel is asked to start writing each file out
    as it goes, so the fsyncs find little left to do: persisting costs about
    what a plain copy plus fsync costs.
    """
    copied: list[tuple[str, str, int, Any]] = []  # (rel, dst, size, sha256 object)
    pending: deque[Future[None]] = deque()
    with ThreadPoolExecutor(1, thread_name_prefix="tunefleet-sha256") as hasher:
        try:
            for full, rel, _ in files:
                dst = os.path.join(tmp, *rel.rstrip("/").split("/"))
                if rel.endswith("/"):  # an empty directory: recreated, not listed
                    os.makedirs(dst, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                digest = hashlib.sha256()
                size = _copy_file(full, dst, digest, hasher, pending)
                copied.append((rel, dst, size, digest))
            _fsync_all([dst for _, dst, _, _ in copied])  # while the hashing thread finishes
        finally:
            for hashing in pending:
                hashing.result()
    return [
        {"path": rel, "size": size, "sha256": digest.hexdigest()}
        for rel, _, size, digest in copied
        if rel != _METADATA_FILE  # user metadata may be rewritten later (set_metadata)
    ]


def _copy_file(
    src: str, dst: str, digest: Any, hasher: ThreadPoolExecutor, pending: deque[Future[None]]
) -> int:
    size = flushed = 0
    with open(src, "rb", buffering=0) as fin, open(dst, "xb", buffering=0) as fout:
        fd = fout.fileno()
        while chunk := fin.read(_CHUNK):
            if len(chunk) < _CHUNK and not pending:
                digest.update(chunk)  # small file: no thread hop
            else:
                pending.append(hasher.submit(digest.update, chunk))
                if len(pending) > _PENDING:
                    pending.popleft().result()
            _write_all(fd, chunk)
            size += len(chunk)
            if size - flushed >= _WRITEBACK:
                _start_writeback(fd, flushed, size - flushed)
                flushed = size
        _start_writeback(fd, flushed, 0)
    shutil.copymode(src, dst)
    return size


def _start_writeback(fd: int, offset: int, length: int) -> None:
    # On Linux, FADV_DONTNEED starts writing dirty pages out without waiting for them.
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def manifest_text(entries: list[dict[str, Any]]) -> str:
    """The manifest of a checkpoint holding `entries` (path, size, sha256 of each file)."""
    manifest = {
        "format": "tunefleet-checkpoint",
        "version": MANIFEST_VERSION,
        "created": time.time(),
        "files": entries,
    }
    return json.dumps(manifest, indent=1)


def _write_manifest(directory: str, entries: list[dict[str, Any]]) -> None:
    with open(os.path.join(directory, MANIFEST_FILE), "x") as f:
        f.write(manifest_text(entries))  # fsynced with the folders, by _fsync_tree


def _fsync_tree(top: str) -> None:
    """The manifest and every folder (files were fsynced as they were copied)."""
    _fsync_all([os.path.join(top, MANIFEST_FILE)] + [d for d, _, _ in os.walk(top)])


def _fsync_all(paths: list[str]) -> None:
    # Concurrent fsyncs share the filesystem's journal commits: 10 small files take
    # ~4 ms this way against ~45 ms one after the other.
    if len(paths) <= 1:
        for path in paths:
            _fsync_path(path)
        return
    with ThreadPoolExecutor(min(16, len(paths)), thread_name_prefix="tunefleet-fsync") as pool:
        for _ in pool.map(_fsync_path, paths):
            pass


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems cannot fsync a directory
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _replace(tmp: str, final: str) -> None:
    """Rename `tmp` to `final`; an existing `final` (a stale attempt's) is moved aside first."""
    if not os.path.lexists(final):
        os.rename(tmp, final)
        return
    old = os.path.join(
        os.path.dirname(final), f".old_{os.path.basename(final)}_{os.urandom(4).hex()}"
    )
    os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _disk_usage(path: str) -> tuple[int, int] | None:
    """(free bytes for us, total bytes) of the filesystem holding `path`, None if unknown."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    if st.f_blocks == 0:  # some network and FUSE filesystems report nothing
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _check_space(root: str, needed: int) -> None:
    """Refuse early rather than fill the disk that the store and the other trials share."""
    usage = _disk_usage(root)
    if usage is None:
        return
    free, total = usage
    reserve = min(_RESERVE_MAX, total // 100)
    if free < needed + reserve:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), root)


def _write_error(exc: OSError, source: str, final: str, needed: int) -> CheckpointWriteError:
    root = os.path.dirname(final)
    code = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    text = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename and exc.filename != root else ""
    usage = _disk_usage(root) if os.path.isdir(root) else None
    space = (
        f"{_size(usage[0])} free of {_size(usage[1])} on that filesystem"
        if usage is not None
        else "free space on that filesystem unknown"
    )
    previous = sorted(p for p in _names(root) if p != os.path.basename(final))
    kept = f"the previous checkpoint {previous[-1]} is intact" if previous else "no earlier one"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = (
            "Free space there (or set storage_path to a larger disk), keep fewer checkpoints "
            "(CheckpointConfig(num_to_keep=...)), or save less in each checkpoint"
        )
    else:
        advice = "Check that the trial directory is writable and the checkpoint readable"
    return CheckpointWriteError(
        exc.errno,
        f"Could not write checkpoint {final}: {text}"
        + (f" [{code}]" if code else "")
        + f"{where}. The checkpoint needs about {_size(needed)}; {space}; "
        f"nothing of it was kept and {kept}. {advice} (source: {source}).",
        final,
    )


def _names(root: str) -> list[str]:
    try:
        return [n for n in os.listdir(root) if _CHECKPOINT_NAME.fullmatch(n)]
    except OSError:
        return []


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def remove_temporaries(trial_dir: str) -> list[str]:
    """Remove what interrupted writes and deletes left in the trial's checkpoints folder.

    Call it when no attempt of the trial is running (before a restart or resume).
    """
    if is_url(trial_dir):
        from tunefleet.storage.remote import remove_remote_temporaries

        return remove_remote_temporaries(trial_dir)
    root = os.path.join(trial_dir, "checkpoints")
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if name.startswith(_TMP_PREFIXES):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                removed.append(os.path.join(root, name))
    return removed


# -- verifying ------------------------------------------------------------------------------


def verify_checkpoint(path: str, *, checksums: bool = True) -> str | None:
    """Check a persisted checkpoint against its manifest.

    Args:
        path: the checkpoint directory, or its URL in remote storage (there the
            files and sizes are checked, and each sha256 when it is downloaded).
        checksums: also compare each file's sha256 (reads every byte); False only
            checks that the files exist with the right sizes.

    Returns:
        None if the checkpoint is complete and intact, else a short reason such as
        ``"missing manifest (half-written?)"`` or ``"file model.pt: size 123 != 456"``.
    """
    if is_url(path):
        from tunefleet.storage.remote import verify_remote

        return verify_remote(path)
    if not os.path.isdir(path):
        return "directory missing"
    try:
        with open(os.path.join(path, MANIFEST_FILE), "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return "missing manifest (half-written?)"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest: {exc}"
    entries = manifest_entries(manifest)
    if isinstance(entries, str):
        return entries
    for rel, size, sha in entries:
        reason = _verify_entry(path, rel, size, sha, checksums)
        if reason is not None:
            return reason
    return None


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


def _verify_entry(root: str, rel: str, size: int, sha: str, checksums: bool) -> str | None:
    full = os.path.join(root, *rel.split("/"))
    try:
        actual = os.stat(full).st_size
    except OSError:
        return f"file {rel}: missing"
    if actual != size:
        return f"file {rel}: size {actual} != {size}"
    if checksums:
        digest = hashlib.sha256()
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        try:
            with open(full, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    digest.update(view[:n])
        except OSError as exc:
            return f"file {rel}: unreadable ({exc.strerror or exc})"
        if digest.hexdigest() != sha:
            return f"sha256 mismatch in {rel}"
    return None


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

