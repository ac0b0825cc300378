"""Checkpoints that cost the trial almost nothing: staged in `report()`, finished in the background.

`report()` only *stages* a checkpoint: it hard-links the files of the folder it is
handed into a hidden folder ``<trial>/checkpoints/.tmp_checkpoint_NNNNNN_<hex>``
(copying them only across filesystems, or where links are refused), or, for a folder
from `new_checkpoint_dir`, does nothing at all. `finish` then hashes each file,
writes the manifest, fsyncs, and renames the folder into place, on a background
thread of the worker (`Persister`, one at a time). Until it is done the checkpoint
is nobody's latest; a crash before leaves only a hidden temporary, which
`remove_temporaries` clears. See docs/checkpoints.md.

A hard link shares the file with the folder handed to `report()`: deleting that
folder afterwards only removes its names, but rewriting one of its files in place
rewrites the checkpoint's too. Hand `report()` a folder you no longer modify (as
Ray Tune documents); a file already linked into an earlier checkpoint (a folder
reused from one report to the next) is copied instead, with a warning, and
verification on restore catches a checkpoint changed after its manifest.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tunefleet.storage._format import (
    MANIFEST_FILE,
    METADATA_FILE,
    SourceFile,
    list_source,
    logger,
    manifest_entry,
    sha256_file,
)
from tunefleet.storage._local import (
    _check_space,
    _fsync_all,
    _fsync_path,
    _replace,
    _write_error,
    _write_manifest,
    space_needed,
    staging_folder,
)

ZERO_COPY_PREFIX = ".tmp_new_"
"""The folders of `new_checkpoint_dir` (a temporary's prefix: a crash leaves nothing named)."""

# os.link refuses: across filesystems, on filesystems without hard links, on files
# the user may read but not link (protected_hardlinks), past the link limit.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


def new_checkpoint_dir(trial_dir: str) -> str:
    """A fresh empty folder inside the trial's checkpoints folder, for the trainable to
    write a checkpoint into and hand to `report()`, which renames it into place."""
    root = os.path.join(trial_dir, "checkpoints")
    os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix=ZERO_COPY_PREFIX, dir=root)


def is_zero_copy(source: str, trial_dir: str) -> bool:
    """Whether `source` is a folder `new_checkpoint_dir(trial_dir)` made."""
    source = os.path.normpath(source)
    if not os.path.basename(source).startswith(ZERO_COPY_PREFIX):
        return False
    root = os.path.join(trial_dir, "checkpoints")
    return os.path.realpath(os.path.dirname(source)) == os.path.realpath(root)


@dataclass
class Staged:
    """A checkpoint's files gathered in a hidden folder on the target's filesystem."""

    folder: str  # the hidden folder holding the files
    final: str  # where `finish` renames it
    source: str  # the folder handed to report() (for error messages)
    linked: int = 0  # files hard-linked
    copied: int = 0  # files copied


class _Linker:
    """Hard-links files into staged folders; remembers the files it linked, so that a
    folder reused from one report to the next is copied (its earlier link is warned of)."""

    def __init__(self) -> None:
        self.linked: set[tuple[int, int]] = set()
        self.warned = False

    def link(self, f: SourceFile, dst: str) -> bool:
        st = os.stat(f.full)
        if (st.st_dev, st.st_ino) in self.linked:
            if not self.warned:
                self.warned = True
                logger.warning(
                    "checkpoint file %s was already hard-linked into an earlier checkpoint "
                    "of this trial: the folder handed to tune.report() is being reused, so "
                    "it is copied from now on; if it was rewritten in place, that earlier "
                    "checkpoint changed with it (verification will reject it). Hand report() "
                    "a fresh folder (tempfile.TemporaryDirectory() or "
                    "tune.get_context().new_checkpoint_dir()) each time",
                    f.full,
                )
            return False
        try:
            os.link(f.full, dst)
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            return False
        self.linked.add((st.st_dev, st.st_ino))
        return True


def stage(source: str, final: str, linker: _Linker | None, *, zero_copy: bool = False) -> Staged:
    """Gather the files of the local folder `source` next to `final` (links where
    `linker` allows, else copies); a `zero_copy` source is used as it is.

    Raises:
        CheckpointWriteError: a copy failed (e.g. no space left); nothing was kept.
        ValueError: `source` is missing or holds a symlink pointing outside it.
    """
    if not os.path.isdir(source):
        raise ValueError(
            f"The checkpoint directory {source} no longer exists: keep it until report() "
            "returns (e.g. call tune.report inside the `with tempfile.TemporaryDirectory()`)"
        )
    files = list_source(source)  # refuses a symlink out of the folder, for both paths
    if zero_copy:
        return Staged(source, final, source)
    root = os.path.dirname(final)
    tmp = staging_folder(final)
    staged = Staged(tmp, final, source)
    needed = 0
    try:
        if not os.path.isdir(root):
            os.makedirs(root, exist_ok=True)
            _fsync_path(os.path.dirname(root))  # the trial folder
        os.mkdir(tmp)
        for i, f in enumerate(files):
            dst = os.path.join(tmp, *f.rel.rstrip("/").split("/"))
            if f.rel.endswith("/"):  # an empty directory: recreated, not listed
                os.makedirs(dst, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            # user metadata is copied: set_metadata rewrites it, never the user's file
            if linker is not None and f.rel != METADATA_FILE and linker.link(f, dst):
                staged.linked += 1
                continue
            if not needed:  # the first copy: is there room for all that may follow?
                needed = space_needed(files[i:])
                _check_space(root, needed)
            shutil.copyfile(f.full, dst)
            shutil.copymode(f.full, dst)
            staged.copied += 1
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(exc, source, final, needed) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return staged


def finish(staged: Staged) -> str:
    """Hash the staged files, write the manifest, fsync all, rename into place; return
    the checkpoint's path. On failure the staged folder is removed.

    Raises:
        CheckpointWriteError: writing failed; nothing of it counts.
    """
    folder, final = staged.folder, staged.final
    try:
        entries, paths = [], []
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            paths.append(dirpath)
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, folder).replace(os.sep, "/")
                if rel == MANIFEST_FILE:  # a restored checkpoint's, copied in: replaced
                    os.remove(full)
                    continue
                paths.append(full)
                if rel != METADATA_FILE:  # user metadata may be rewritten (set_metadata)
                    sha, size = sha256_file(full)
                    entries.append(manifest_entry(rel, size, sha))
        _write_manifest(folder, entries)
        _fsync_all([*paths, os.path.join(folder, MANIFEST_FILE)])
        _replace(folder, final)
        _fsync_path(os.path.dirname(final))
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise _write_error(exc, staged.source, final, 0) from exc
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return final


Done = Callable[[str | None, BaseException | None], None]


class Persister:
    """Finishes staged checkpoints on a background thread, one at a time, in order.

    `start` waits for the one before (so memory and disk stay bounded and a later
    checkpoint is never recorded before an earlier one), then finishes `staged` on a
    new thread and calls `done(path, None)`, or `done(None, error)`, from it.
    """

    def __init__(self) -> None:
        self.linker = _Linker()
        self._thread: threading.Thread | None = None

    def start(self, staged: Staged, done: Done) -> None:
        self.wait()
        thread = threading.Thread(
            target=self._run, args=(staged, done), name="tunefleet-persist", daemon=True
        )
        self._thread = thread
        thread.start()

    def wait(self) -> None:
        """Return once no persist is in flight."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @staticmethod
    def _run(staged: Staged, done: Done) -> None:
        try:
            path = finish(staged)  # looked up at each call: a test may slow it down
        except BaseException as exc:
            done(None, exc)
            return
        done(path, None)
