"""Checkpoints that cost the trial almost nothing (issue 18).

`report()` hard-links a checkpoint's files (copying them only across filesystems) and
leaves the hashing, fsync, manifest and rename to a background thread; a folder from
`tune.get_context().new_checkpoint_dir()` is renamed, not copied. The checkpoint is
recorded only once it is persisted, in order; a worker killed mid-persist leaves the
previous checkpoint as the latest.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.session import TrialSession, TuneContext
from tunefleet.storage import _staged
from tunefleet.storage.checkpoint import verify_checkpoint
from tunefleet.store import StoreReader
from tunefleet.trial import TrialStatus


def leftovers(trial_dir: str | Path) -> list[str]:
    root = Path(trial_dir, "checkpoints")
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".")) if root.exists() else []


def wait_for(path: Path) -> None:
    """Wait for a file another thread or process writes (an event, not a delay)."""
    while not path.exists():
        time.sleep(0.005)


def run(trainable: Any, storage: str, config: dict[str, Any], max_failures: int = 0) -> Any:
    grid = tune.Tuner(
        trainable,
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=max_failures),
        ),
    ).fit()
    with StoreReader(grid.experiment_path) as reader:
        (trial,) = reader.trials()
        return trial, reader.checkpoints(trial.trial_id), reader.results(trial.trial_id)


# -- hard links on the same filesystem, copies across ---------------------------------------


def reports_from_a_temporary_folder(config: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(dir=config["source_root"]) as d:
        Path(d, "weights.bin").write_bytes(b"w" * 100_000)
        Path(config["inode"]).write_text(str(os.stat(Path(d, "weights.bin")).st_ino))
        tune.report({"step": 1}, checkpoint=tune.Checkpoint.from_directory(d))


def test_same_filesystem_links_the_files_instead_of_copying(storage: str, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    config = {"source_root": str(tmp_path / "src"), "inode": str(tmp_path / "inode")}
    trial, ((iteration, path, _),), _ = run(reports_from_a_temporary_folder, storage, config)
    assert trial.status is TrialStatus.TERMINATED and iteration == 1
    kept = Path(path, "weights.bin")
    assert os.stat(kept).st_ino == int(Path(config["inode"]).read_text())  # the same file
    assert kept.read_bytes() == b"w" * 100_000  # the user's folder is gone, the file is not
    assert verify_checkpoint(path) is None
    assert leftovers(trial.path) == []


def test_another_filesystem_is_copied(storage: str, tmp_path: Path) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: no second filesystem to put the source on")
    if os.stat("/dev/shm").st_dev == os.stat(storage).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the test's storage")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as source_root:
        config = {"source_root": source_root, "inode": str(tmp_path / "inode")}
        trial, ((_, path, _),), _ = run(reports_from_a_temporary_folder, storage, config)
    kept = Path(path, "weights.bin")
    assert os.stat(kept).st_ino != int(Path(config["inode"]).read_text())
    assert kept.read_bytes() == b"w" * 100_000
    assert verify_checkpoint(path) is None
    assert leftovers(trial.path) == []


# -- the zero-copy folder -------------------------------------------------------------------


def writes_into_new_checkpoint_dir(config: dict[str, Any]) -> None:
    d = tune.get_context().new_checkpoint_dir()
    Path(d, "weights.bin").write_bytes(b"z" * 100_000)
    Path(config["seen"]).write_text(f"{d}\n{os.stat(Path(d, 'weights.bin')).st_ino}")
    tune.report({"step": 1}, checkpoint=tune.Checkpoint.from_directory(d))
    tune.get_context().new_checkpoint_dir()  # never reported: removed at the trial's end


def test_new_checkpoint_dir_is_renamed_into_place(storage: str, tmp_path: Path) -> None:
    config = {"seen": str(tmp_path / "seen")}
    trial, ((_, path, _),), _ = run(writes_into_new_checkpoint_dir, storage, config)
    folder, inode = Path(config["seen"]).read_text().split("\n")
    assert Path(folder).parent == Path(trial.path, "checkpoints")
    assert Path(folder).name.startswith(".") and not os.path.exists(folder)  # renamed away
    assert os.stat(Path(path, "weights.bin")).st_ino == int(inode)  # not copied
    assert verify_checkpoint(path) is None
    assert leftovers(trial.path) == []  # the unused one is gone too


# -- order, and nothing recorded before it is persisted ----------------------------------------


def reports_quickly(config: dict[str, Any]) -> None:
    for step in range(1, 13):
        if step % 2:
            with tempfile.TemporaryDirectory() as d:
                Path(d, "step").write_text(str(step))
                tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report({"step": step})


def test_quick_reports_record_results_and_checkpoints_in_order(storage: str) -> None:
    trial, checkpoints, results = run(reports_quickly, storage, {})
    assert [r["step"] for r in results] == list(range(1, 13))
    assert [it for it, _, _ in checkpoints] == list(range(1, 13, 2))
    for iteration, path, metrics in checkpoints:
        assert metrics["step"] == iteration
        assert Path(path, "step").read_text() == str(iteration)
        assert verify_checkpoint(path) is None
    assert leftovers(trial.path) == []


def session(tmp_path: Path, sent: list[tuple[dict[str, Any], str | None]]) -> TrialSession:
    context = TuneContext("t", "t", str(tmp_path / "trial"), "e", 0, {"cpu": 1.0})
    return TrialSession(
        context=context,
        send=sent.extend,
        poll_control=lambda block: None,
        checkpoint=None,
        iteration=0,
        time_total=0.0,
        sync=False,
        stop_criteria={},
    )


def test_results_wait_behind_a_checkpoint_being_persisted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    original = _staged.finish

    def slow(staged: _staged.Staged) -> str:
        assert gate.wait(60)
        return original(staged)

    monkeypatch.setattr(_staged, "finish", slow)
    sent: list[tuple[dict[str, Any], str | None]] = []
    s = session(tmp_path, sent)
    source = tmp_path / "src"
    source.mkdir()
    (source / "w").write_bytes(b"1")
    s.report({"a": 1}, tune.Checkpoint.from_directory(source))
    s.report({"a": 2}, None)
    s.send_now({"a": 3}, None)
    assert sent == []  # nothing, not even the later results, before the checkpoint is persisted
    assert not os.path.exists(tmp_path / "trial" / "checkpoints" / "checkpoint_000001")
    gate.set()
    assert s.settle() is None
    s.close()
    assert [(item["a"], path) for item, path in sent] == [
        (1, str(tmp_path / "trial" / "checkpoints" / "checkpoint_000001")),
        (2, None),
        (3, None),
    ]


def test_a_folder_rewritten_in_place_is_copied_and_the_damage_caught(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[tuple[dict[str, Any], str | None]] = []
    s = session(tmp_path, sent)
    source = tmp_path / "reused"
    source.mkdir()
    (source / "w").write_bytes(b"first")
    s.report({"a": 1}, tune.Checkpoint.from_directory(source))
    assert s.settle() is None  # persisted (and hashed) before the user rewrites the file
    with open(source / "w", "wb") as f:  # in place: the same inode as checkpoint 1's file
        f.write(b"second")
    with caplog.at_level(logging.WARNING, logger="tunefleet"):
        s.report({"a": 2}, tune.Checkpoint.from_directory(source))
        assert s.settle() is None
    s.close()
    (_, first), (_, second) = sent
    assert first is not None and second is not None
    assert "already hard-linked into an earlier checkpoint" in caplog.text
    assert os.stat(Path(second, "w")).st_ino != os.stat(source / "w").st_ino  # copied
    assert Path(second, "w").read_bytes() == b"second" and verify_checkpoint(second) is None
    assert verify_checkpoint(first) is not None  # not silent: restore skips it


# -- a worker killed mid-persist ----------------------------------------------------------------


def killed_while_persisting(config: dict[str, Any]) -> None:
    if (restored := tune.get_checkpoint()) is not None:
        Path(config["restored"]).write_text(Path(restored.path, "step").read_text())
        return
    with tempfile.TemporaryDirectory() as d:
        Path(d, "step").write_text("1")
        tune.report({"step": 1}, checkpoint=tune.Checkpoint.from_directory(d))
    original, waiting = _staged.finish, Path(config["waiting"])

    def slow(staged: _staged.Staged) -> str:
        if staged.final.endswith("checkpoint_000002"):
            waiting.write_text(staged.folder)
            wait_for(Path(config["gate"]))  # the test never opens it: killed before
        return original(staged)

    _staged.finish = slow  # this worker process only
    with tempfile.TemporaryDirectory() as d:
        Path(d, "step").write_text("2")
        tune.report({"step": 2}, checkpoint=tune.Checkpoint.from_directory(d))
    wait_for(waiting)  # the persist of checkpoint 2 is under way
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_mid_persist_resumes_from_the_previous_checkpoint(
    storage: str, tmp_path: Path
) -> None:
    config = {
        "restored": str(tmp_path / "restored"),
        "waiting": str(tmp_path / "waiting"),
        "gate": str(tmp_path / "gate"),
    }
    trial, checkpoints, results = run(killed_while_persisting, storage, config, max_failures=1)
    assert trial.status is TrialStatus.TERMINATED
    assert Path(config["restored"]).read_text() == "1"
    assert [it for it, _, _ in checkpoints] == [1]
    assert [r["step"] for r in results] == [1]  # the result held behind checkpoint 2: lost
    assert not os.path.exists(Path(config["waiting"]).read_text())  # its temporary: removed
    assert leftovers(trial.path) == []
