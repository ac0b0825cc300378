"""Checkpoints on the local disk: atomic writes (copy, hash, fsync, rename), deletes, checks.

`LocalFilesystem.persist` copies a folder into ``<trial>/checkpoints/checkpoint_NNNNNN``
through a temporary sibling: every file is hashed while it is copied, the manifest
is written last, everything is fsynced, and the folder is renamed into place. A
reader (or a resumed run) never sees a half-written checkpoint. See
docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

from tunefleet.storage._format import (
    CHECKPOINT_NAME,
    CHUNK,
    MANIFEST_FILE,
    METADATA_FILE,
    TMP_PREFIXES,
    CheckpointWriteError,
    SourceFile,
    link_outside,
    list_source,
    manifest_entry,
    manifest_text,
    sha256_file,
)
from tunefleet.storage.filesystem import Filesystem

_PENDING = 16  # chunks read ahead of the hashing thread (bounds memory to ~16 MB)
_WRITEBACK = 8 << 20  # start writing a file out every this many bytes
_BLOCK = 4096  # a file takes whole blocks on disk: used to estimate the space a copy needs
_RESERVE_MAX = 64 << 20  # leave this much (or 1% of the filesystem) for the store and logs


class LocalFilesystem(Filesystem):
    """The local disk (`LOCAL`, the one instance): paths are local paths."""

    local: ClassVar[bool] = True

    def join(self, folder: str, *names: str) -> str:
        return os.path.join(folder, *(part for name in names for part in name.split("/")))

    def canonical(self, path: str) -> str:
        return os.path.abspath(path)

    def sizes(self, folder: str) -> Mapping[str, int] | None:
        return _Sizes(folder) if os.path.isdir(folder) else None

    def sha256(self, path: str) -> str:
        return sha256_file(path)[0]

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_bytes(self, path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)

    def persist(self, source: str, final: str) -> str:
        root = os.path.dirname(final)
        tmp = staging_folder(final)
        needed = 0
        try:
            files = list_source(source)
            needed = space_needed(files) + 2 * _BLOCK
            created_root = not os.path.isdir(root)
            os.makedirs(root, exist_ok=True)
            if created_root:
                _fsync_path(os.path.dirname(root))  # the trial folder
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

    def escaping_link(self, folder: str) -> str | None:
        if os.path.islink(folder):  # tunefleet writes a checkpoint as a real folder
            return f"the checkpoint folder is a symlink (to {os.readlink(folder)})"
        return link_outside(folder)

    def download(self, path: str, target: str) -> str:
        escape = link_outside(path)
        if escape is not None:
            raise ValueError(f"checkpoint {path} not copied: {escape}")
        shutil.copytree(path, target, dirs_exist_ok=True)
        return target

    def delete(self, path: str) -> str | None:
        # Renamed to a hidden name first: a cut delete leaves no part under a checkpoint's name.
        if not os.path.lexists(path):
            return None
        if os.path.islink(path) or not os.path.isdir(path):
            return "not a directory; not deleted"
        trash = os.path.join(os.path.dirname(os.path.normpath(path)), f".del_{os.urandom(4).hex()}")
        os.rename(path, trash)
        shutil.rmtree(trash)
        return None

    def remove_temporaries(self, trial_dir: str) -> list[str]:
        root = os.path.join(trial_dir, "checkpoints")
        removed = []
        with contextlib.suppress(OSError):
            for name in os.listdir(root):
                if name.startswith(TMP_PREFIXES):
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                    removed.append(os.path.join(root, name))
        return removed


LOCAL = LocalFilesystem()


class _Sizes(Mapping[str, int]):
    """The sizes of the files under a local folder, each looked up (stat) when asked for."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __getitem__(self, rel: str) -> int:
        try:
            return os.stat(LOCAL.join(self.folder, rel)).st_size
        except OSError:
            raise KeyError(rel) from None

    def __iter__(self) -> Iterator[str]:
        for dirpath, _, filenames in os.walk(self.folder):
            for fname in filenames:
                rel = os.path.relpath(os.path.join(dirpath, fname), self.folder)
                yield rel.replace(os.sep, "/")

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _copy_tree(files: list[SourceFile], tmp: str) -> list[dict[str, Any]]:
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
        manifest_entry(rel, size, digest.hexdigest())
        for rel, _, size, digest in copied
        if rel != METADATA_FILE  # user metadata may be rewritten later (set_metadata)
    ]


def _copy_file(
    src: str, dst: str, digest: Any, hasher: ThreadPoolExecutor, pending: deque[Future[None]]
) -> int:
    size = flushed = 0
    with open(src, "rb", buffering=0) as fin, open(dst, "xb", buffering=0) as fout:
        fd = fout.fileno()
        while chunk := fin.read(CHUNK):
            if len(chunk) < CHUNK and not pending:
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
        return [n for n in os.listdir(root) if CHECKPOINT_NAME.fullmatch(n)]
    except OSError:
        return []


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def staging_folder(final: str) -> str:
    """A hidden, unique sibling of `final` where its checkpoint is written first."""
    root = os.path.dirname(final)
    return os.path.join(root, f".tmp_{os.path.basename(final)}_{os.urandom(4).hex()}")


def space_needed(files: Iterable[SourceFile]) -> int:
    """Bytes on disk that copies of `files` take at most (whole blocks, one more each)."""
    return sum(-(-f.size // _BLOCK) * _BLOCK + _BLOCK for f in files)
