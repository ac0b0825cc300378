"""The remote copy of an experiment: database snapshots, trial files, deferred deletes.

`ExperimentSync` keeps ``<storage_path URL>/<name>/`` up to date from the local
staging folder while the experiment runs; `fetch_experiment` brings it back into a
staging folder for `Tuner.restore(url)`. See `remote` and docs/storage.md.

With such a storage path, the experiment's local folder (database, trial logs) is a
*staging* folder under `default_storage_path()`, and `ExperimentSync` copies it to
``<url>/<name>/``: a consistent snapshot of the database (SQLite's backup API) when
the run starts, every `SyncConfig.sync_period` seconds and at the end, and the
trial files that changed (logs). Checkpoints are not in the staging folder: trials
write them to the bucket themselves (`remote.RemoteFilesystem`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

from tunefleet.storage.location import Storage, object_store
from tunefleet.storage.paths import experiment_dirname, safe_child
from tunefleet.storage.remote import DeferredDeletes, RemoteFilesystem

logger = logging.getLogger("tunefleet")

DB_FILE = "experiment.db"


def snapshot_database(db: str, out: str) -> None:
    """A consistent copy of the SQLite database `db` (even while it is written) at `out`."""
    if not os.path.isfile(db):
        raise FileNotFoundError(f"No experiment database at {db}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out)
    src = sqlite3.connect(db, timeout=30.0)
    try:
        dst = sqlite3.connect(out)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            dst.close()
    finally:
        src.close()


def fetch_experiment(storage: Storage, staging_root: str) -> str:
    """Download the experiment at `storage` into a local staging folder; return the folder.

    The folder is ``<staging_root>/<name>``. If it already holds this experiment's
    database, as new as the remote one or newer (this machine ran it last), it is
    used as it is; an older copy is replaced; another experiment of the same name
    is left alone and a new folder is used.

    Raises:
        FileNotFoundError: there is no experiment database at `storage`.
    """
    fs, path = storage.fs, storage.path
    os.makedirs(staging_root, exist_ok=True)
    download = tempfile.mkdtemp(prefix=".tunefleet_fetch_", dir=staging_root)
    try:
        db = os.path.join(download, DB_FILE)
        try:
            fs.get_file(f"{path}/{DB_FILE}", db)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"No tunefleet experiment at {storage.url}: it holds no {DB_FILE}"
            ) from exc
        name, prefix, seq = _identity(db)
        local = Path(safe_child(staging_root, experiment_dirname(name)))
        here = None
        if (local / DB_FILE).is_file():
            try:
                here = _identity(str(local / DB_FILE))
            except ValueError as exc:  # unreadable: left alone, like another experiment's
                logger.warning("%s; the experiment is fetched into a new folder", exc)
                here = ("", "", -1)
        if here is not None and here[1] == prefix and here[2] >= seq:
            return str(local)  # this machine's own copy, as new or newer
        if here is not None and here[1] != prefix:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            local = Path(safe_child(staging_root, f"{name}_{stamp}"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{local / DB_FILE}{suffix}").unlink(missing_ok=True)
        local.mkdir(parents=True, exist_ok=True)
        os.replace(db, local / DB_FILE)
        _fetch_trial_files(RemoteFilesystem(fs), path, local)
        return str(local)
    finally:
        shutil.rmtree(download, ignore_errors=True)


def _identity(db: str) -> tuple[str, str, int]:
    """(name, id_prefix, last event number) of an experiment database."""
    conn = sqlite3.connect(Path(db).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{db} is not a tunefleet experiment database: {exc}") from exc
    finally:
        conn.close()
    if "name" not in meta:
        raise ValueError(f"{db} holds no experiment (it was never started)")
    return str(meta["name"]), str(meta.get("id_prefix", "")), int(seq)


def _fetch_trial_files(remote: RemoteFilesystem, path: str, local: Path) -> None:
    """The trial folders' files (logs), so that a resumed run appends to them."""
    files = [
        rel
        for rel in remote.files_under(f"{path}/trials")
        if rel.split("/")[1:2] != ["checkpoints"]
        and not any(p in ("", ".", "..") for p in rel.split("/"))
    ]
    if files:
        remote.fs.get(
            [f"{path}/trials/{rel}" for rel in files],
            [str(local.joinpath("trials", *rel.split("/"))) for rel in files],
        )


class ExperimentSync:
    """Keeps the remote copy of one experiment: database snapshots, trial files, deletes.

    `start()` uploads the database at once (so a wrong URL, bucket or credential
    fails before any trial runs), then a thread uploads a snapshot every `period`
    seconds, and `close()` a last one. Trial files (logs) that changed are uploaded
    with each snapshot when `artifacts` is true.

    While it runs, retention deletes of checkpoints through `filesystem` (the one
    this process reaches the experiment's URL with) are deferred
    (`remote.DeferredDeletes`): each runs after the upload of a snapshot taken after
    it was asked for, so the remote database never points at a deleted checkpoint.
    """

    def __init__(
        self,
        local: str,
        remote: str,
        filesystem: RemoteFilesystem,
        *,
        period: float,
        timeout: float,
        artifacts: bool,
    ) -> None:
        self.local = local
        self.remote = remote.rstrip("/")
        self.filesystem = filesystem
        self.fs, self.path = filesystem.fs, filesystem.path(self.remote)
        self.period = period
        self.timeout = timeout
        self.artifacts = artifacts
        self._deletes = DeferredDeletes(filesystem.remove_folder)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: dict[str, tuple[int, int]] = {}  # trial file -> (size, mtime) uploaded
        self._warned: set[str] = set()

    def start(self) -> None:
        try:
            self._upload_database()
        except Exception as exc:
            raise OSError(
                f"Could not write the experiment to {self.remote}: {type(exc).__name__}: {exc}. "
                "Check storage_path (bucket, prefix) and how it is reached (endpoint and "
                "credentials: RunConfig.storage_filesystem, or fsspec's configuration and the "
                "environment)"
            ) from exc
        self.filesystem.deletes = self._deletes
        self._thread = threading.Thread(target=self._loop, name="tunefleet-sync", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Upload a last snapshot (waiting `timeout` seconds at most) and stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout)
            if self._thread.is_alive():
                logger.warning(
                    "The last upload of the experiment to %s did not finish within "
                    "sync_timeout=%gs; the local copy at %s is complete",
                    self.remote,
                    self.timeout,
                    self.local,
                )
        if self.filesystem.deletes is self._deletes:
            self.filesystem.deletes = None

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sync()
        self.sync(final=True)

    def sync(self, *, final: bool = False) -> None:
        """Upload a database snapshot, then run the deletes it allows, then trial files."""
        generation = self._deletes.next_snapshot()
        try:
            self._upload_database()
        except Exception as exc:
            self._warn(f"could not upload the experiment database to {self.remote}", exc)
            if final:
                logger.warning("The complete experiment is at %s", self.local)
            return
        self._deletes.run_due(generation)
        if self.artifacts:
            try:
                self._upload_trial_files()
            except Exception as exc:
                self._warn(f"could not upload trial files to {self.remote}", exc)

    def _upload_database(self) -> None:
        folder = os.path.join(self.local, ".tunefleet")
        os.makedirs(folder, exist_ok=True)
        snapshot = os.path.join(folder, f"{DB_FILE}.upload")
        snapshot_database(os.path.join(self.local, DB_FILE), snapshot)
        try:
            target = f"{self.path}/{DB_FILE}"
            if object_store(self.fs):  # a put replaces the object whole
                self.fs.put_file(snapshot, target)
            else:
                self.fs.makedirs(self.path, exist_ok=True)
                self.fs.put_file(snapshot, target + ".tmp")
                self.fs.mv(target + ".tmp", target)
        finally:
            os.unlink(snapshot)

    def _upload_trial_files(self) -> None:
        trials = os.path.join(self.local, "trials")
        changed: list[tuple[str, str, tuple[int, int]]] = []
        for dirpath, dirnames, filenames in os.walk(trials):
            top = os.path.dirname(dirpath) == trials  # a trial folder: its checkpoints stay
            dirnames[:] = [
                d for d in dirnames if not d.startswith(".") and not (top and d == "checkpoints")
            ]
            for fname in filenames:
                full = os.path.join(dirpath, fname)
                if fname.startswith(".") or not os.path.isfile(full):
                    continue
                st = os.stat(full)
                key = os.path.relpath(full, self.local).replace(os.sep, "/")
                if self._seen.get(key) != (st.st_size, st.st_mtime_ns):
                    changed.append((full, key, (st.st_size, st.st_mtime_ns)))
        if not changed:
            return
        remote = [f"{self.path}/{key}" for _, key, _ in changed]
        if not object_store(self.fs):
            for folder in sorted({p.rsplit("/", 1)[0] for p in remote}):
                self.fs.makedirs(folder, exist_ok=True)
        self.fs.put([full for full, _, _ in changed], remote)
        for _, key, sig in changed:
            self._seen[key] = sig

    def _warn(self, what: str, exc: Exception) -> None:
        text = f"{what}: {type(exc).__name__}: {exc}"
        if text in self._warned:
            return
        self._warned.add(text)
        logger.warning("%s (retried every sync_period=%gs)", text, self.period)
