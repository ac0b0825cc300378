"""Checkpoints: directories of files, written atomically with a manifest, and retention.

A `Checkpoint` is only a reference to a directory. `tune.report(...,
checkpoint=...)` calls `persist_checkpoint`, which copies the directory into
`<trial>/checkpoints/checkpoint_NNNNNN` through a temporary sibling: every file is
hashed while it is copied, a manifest (path, size, sha256 of each file) is written
last, everything is fsynced, and the directory is renamed into place. A reader
(or a resumed run) never sees a half-written checkpoint, and `verify_checkpoint`
detects one that was damaged afterwards. `CheckpointKeeper` decides which
checkpoints retention removes; `delete_checkpoints` removes them. See
docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tunefleet._metrics import metric_value

logger = logging.getLogger("tunefleet")

_METADATA_FILE = ".tunefleet_checkpoint.json"
MANIFEST_FILE = ".tunefleet_manifest.json"
MANIFEST_VERSION = 1
_CHUNK = 1 << 20
_PENDING = 16  # chunks read ahead of the hashing thread (bounds memory to ~16 MB)
_WRITEBACK = 8 << 20  # start writing a file out every this many bytes
_BLOCK = 4096  # a file takes whole blocks on disk: used to estimate the space a copy needs
_RESERVE_MAX = 64 << 20  # leave this much (or 1% of the filesystem) for the store and logs
_CHECKPOINT_NAME = re.compile(r"checkpoint_\d+")
# Temporaries of an interrupted write or delete start with these; `remove_temporaries` clears them.
_TMP_PREFIXES = (".tmp_", ".old_", ".del_")


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


def persist_checkpoint(source: str, trial_dir: str, iteration: int) -> str:
    """Copy `source` into the trial's checkpoints folder atomically; return the new path.

    The files are copied (and hashed in the same pass) into a hidden temporary
    sibling, the manifest is written last, all of it is fsynced, and the folder is
    renamed into place. A crash at any moment leaves either no new checkpoint or a
    complete one, never a half-written one under the final name.

    Raises:
        CheckpointWriteError: the copy failed (e.g. no space left); the temporary
            folder has been removed and earlier checkpoints are untouched.
    """
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


def _write_manifest(directory: str, entries: list[dict[str, Any]]) -> None:
    manifest = {
        "format": "tunefleet-checkpoint",
        "version": MANIFEST_VERSION,
        "created": time.time(),
        "files": entries,
    }
    with open(os.path.join(directory, MANIFEST_FILE), "x") as f:
        json.dump(manifest, f, indent=1)  # fsynced with the folders, by _fsync_tree


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
        path: the checkpoint directory.
        checksums: also compare each file's sha256 (reads every byte); False only
            checks that the files exist with the right sizes.

    Returns:
        None if the checkpoint is complete and intact, else a short reason such as
        ``"missing manifest (half-written?)"`` or ``"file model.pt: size 123 != 456"``.
    """
    if not os.path.isdir(path):
        return "directory missing"
    try:
        with open(os.path.join(path, MANIFEST_FILE), "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return "missing manifest (half-written?)"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest: {exc}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return "malformed manifest"
    version = manifest.get("version")
    if not isinstance(version, int) or version > MANIFEST_VERSION:
        return (
            f"manifest version {version!r} not supported (this tunefleet reads {MANIFEST_VERSION})"
        )
    for entry in manifest["files"]:
        reason = _verify_entry(path, entry, checksums)
        if reason is not None:
            return reason
    return None


def _verify_entry(root: str, entry: Any, checksums: bool) -> str | None:
    try:
        rel, size, sha = str(entry["path"]), int(entry["size"]), str(entry["sha256"])
    except (TypeError, KeyError, ValueError):
        return f"malformed manifest entry {entry!r}"
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts:
        return f"manifest entry {rel!r} points outside the checkpoint"
    full = os.path.join(root, *parts)
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


# -- retention ------------------------------------------------------------------------------


def delete_checkpoints(paths: Iterable[str]) -> list[tuple[str, str]]:
    """Delete checkpoint folders; return ``(path, reason)`` for each that failed. Never raises.

    A folder is first renamed to a hidden name, so an interrupted delete never
    leaves a partial checkpoint under a checkpoint's name. Only folders named
    ``checkpoint_NNNNNN`` are deleted; a path that is already gone is not a failure.
    """
    failures: list[tuple[str, str]] = []
    for path in paths:
        try:
            if not _CHECKPOINT_NAME.fullmatch(os.path.basename(os.path.normpath(path))):
                failures.append((path, "not a checkpoint folder (checkpoint_NNNNNN); not deleted"))
                continue
            if not os.path.lexists(path):
                continue
            if os.path.islink(path) or not os.path.isdir(path):
                failures.append((path, "not a directory; not deleted"))
                continue
            trash = os.path.join(
                os.path.dirname(os.path.normpath(path)), f".del_{os.urandom(4).hex()}"
            )
            os.rename(path, trash)
            shutil.rmtree(trash)
        except Exception as exc:  # a retention delete must never take the driver down
            failures.append((path, f"{type(exc).__name__}: {exc}"))
    return failures


class CheckpointKeeper:
    """Applies `CheckpointConfig` retention: keep the N best (or latest N), and always the latest.

    The keeper only decides: `add` returns the paths that fall out, and the caller
    deletes them with `delete_checkpoints` once the store has recorded the new
    checkpoint (so a crash in between never leaves the store pointing at nothing).

    Args:
        num_to_keep: how many checkpoints per trial to keep; None keeps all. The
            latest is kept besides the N best, so N+1 may remain.
        score_attribute: metric that ranks checkpoints; None keeps the latest N.
            Results without it, or with a non-finite value, rank last.
        score_order: "max" or "min".

    Example:
        >>> k = CheckpointKeeper(1, "acc", "max")
        >>> k.add("t1", "c1", {"acc": 0.9}), k.add("t1", "c2", {"acc": 0.5})
        ([], [])
        >>> k.add("t1", "c3", {"acc": 0.7})
        ['c2']
    """

    def __init__(
        self,
        num_to_keep: int | None = None,
        score_attribute: str | None = None,
        score_order: str = "max",
    ) -> None:
        if num_to_keep is not None and num_to_keep < 1:
            raise ValueError(f"num_to_keep={num_to_keep!r} must be a positive integer or None")
        if score_order not in ("max", "min"):
            raise ValueError(f"score_order={score_order!r} must be 'max' or 'min'")
        self.num_to_keep = num_to_keep
        self.score_attribute = score_attribute
        self.sign = 1.0 if score_order == "max" else -1.0
        self._kept: dict[str, list[tuple[float, int, str]]] = {}  # oldest first
        self._paths: set[str] = set()  # every kept path, for `is_kept`
        self._counter = 0

    @classmethod
    def from_config(cls, config: Any) -> CheckpointKeeper:
        """From a `tune.CheckpointConfig`."""
        return cls(
            config.num_to_keep, config.checkpoint_score_attribute, config.checkpoint_score_order
        )

    def add(self, trial_id: str, path: str, result: dict[str, Any]) -> list[str]:
        """Record a new checkpoint; return the paths that retention drops (deletes nothing)."""
        self._counter += 1
        kept = [k for k in self._kept.get(trial_id, []) if k[2] != path]
        kept.append((self._score(result), self._counter, path))
        self._paths.add(path)
        if self.num_to_keep is None or len(kept) <= self.num_to_keep:
            self._kept[trial_id] = kept
            return []
        latest = kept[-1]
        best = sorted(kept, key=lambda k: (k[0], k[1]), reverse=True)[: self.num_to_keep]
        keep = {id(k) for k in best} | {id(latest)}
        self._kept[trial_id] = [k for k in kept if id(k) in keep]
        dropped = [k[2] for k in kept if id(k) not in keep]
        self._paths.difference_update(dropped)
        return dropped

    def is_kept(self, path: str) -> bool:
        """Whether `path` is a kept checkpoint now (a name can be written again after a
        rewind or a PBT exploit: a deletion queued for the old one must then not run)."""
        return path in self._paths

    def kept(self, trial_id: str) -> list[str]:
        """The trial's kept checkpoints, newest first (for `latest_valid`)."""
        return [k[2] for k in reversed(self._kept.get(trial_id, []))]

    def forget(self, trial_id: str, path: str) -> None:
        """Stop tracking a checkpoint (e.g. one that failed verification); deletes nothing."""
        self._kept[trial_id] = [k for k in self._kept.get(trial_id, []) if k[2] != path]
        self._paths.discard(path)

    def discard(self, path: str) -> None:
        """Delete a checkpoint that arrived after its trial was stopped (never recorded).

        A path that is kept for some trial is left alone: a stale attempt may have
        written under the same name as the current attempt's recorded checkpoint.
        """
        if self.is_kept(path):
            logger.debug("not discarding %s: it is a kept checkpoint", path)
            return
        for failed, reason in delete_checkpoints([path]):
            logger.warning("could not delete checkpoint %s: %s", failed, reason)

    def _score(self, result: dict[str, Any]) -> float:
        if self.score_attribute is None:
            return float(self._counter)
        score = metric_value(result, self.score_attribute)
        if score is None or not math.isfinite(score):
            return -math.inf
        return self.sign * score
