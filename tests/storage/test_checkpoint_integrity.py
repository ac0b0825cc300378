"""Checkpoints that hold: manifest, verification, fallback, retention, disk full.

The disk-full tests mount a real small tmpfs (they need root or CAP_SYS_ADMIN and
are skipped otherwise); the kill test SIGKILLs a real writer mid-copy.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tunefleet as tune
from tunefleet.storage import _local
from tunefleet.storage import checkpoint as ckpt_mod
from tunefleet.storage.checkpoint import (
    MANIFEST_FILE,
    CheckpointKeeper,
    CheckpointWriteError,
    delete_checkpoints,
    latest_valid,
    persist_checkpoint,
    remove_temporaries,
    verify_checkpoint,
)
from tunefleet.store import StoreReader
from tunefleet.trial import FailureKind, TrialStatus


def make_source(root: Path, files: dict[str, bytes]) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


def leftovers(trial_dir: str | Path) -> list[str]:
    root = Path(trial_dir, "checkpoints")
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".")) if root.exists() else []


# -- atomic, verified writes ----------------------------------------------------------------


def test_persist_writes_a_manifest_of_every_file_and_verifies(tmp_path: Path) -> None:
    src = make_source(
        tmp_path / "src",
        {"model.pt": os.urandom(3_000_000), "opt/state.bin": b"abc", "empty.txt": b""},
    )
    (tmp_path / "src" / "logs" / "none").mkdir(parents=True)  # an empty folder travels too
    path = persist_checkpoint(src, str(tmp_path / "trial"), 7)

    assert path == str(tmp_path / "trial" / "checkpoints" / "checkpoint_000007")
    manifest = json.loads(Path(path, MANIFEST_FILE).read_text())
    assert manifest["format"] == "tunefleet-checkpoint" and manifest["version"] == 1
    files = {e["path"]: (e["size"], e["sha256"]) for e in manifest["files"]}
    assert set(files) == {"empty.txt", "model.pt", "opt/state.bin"}
    assert files["opt/state.bin"][0] == 3
    assert Path(path, "opt", "state.bin").read_bytes() == b"abc"
    assert Path(path, "logs", "none").is_dir()
    assert verify_checkpoint(path) is None
    assert verify_checkpoint(path, checksums=False) is None
    assert leftovers(tmp_path / "trial") == []


def test_reporting_a_restored_checkpoint_writes_a_fresh_manifest(tmp_path: Path) -> None:
    src = make_source(tmp_path / "src", {"w.bin": b"1"})
    first = persist_checkpoint(src, str(tmp_path / "trial"), 1)
    Path(first, "w.bin").write_bytes(b"2")  # restored, changed, reported again
    second = persist_checkpoint(first, str(tmp_path / "trial"), 2)
    assert verify_checkpoint(second) is None
    assert verify_checkpoint(first) == "sha256 mismatch in w.bin"


def test_user_metadata_may_change_without_invalidating(tmp_path: Path) -> None:
    src = make_source(tmp_path / "src", {"w.bin": b"1"})
    tune.Checkpoint(src).set_metadata({"epoch": 1})
    path = persist_checkpoint(src, str(tmp_path / "trial"), 1)
    ckpt = tune.Checkpoint(path)
    assert ckpt.get_metadata() == {"epoch": 1}
    ckpt.set_metadata({"epoch": 1, "note": "best"})
    assert verify_checkpoint(path) is None


def test_a_stale_checkpoint_of_the_same_iteration_is_replaced(tmp_path: Path) -> None:
    trial = str(tmp_path / "trial")
    persist_checkpoint(make_source(tmp_path / "a", {"x": b"old", "gone": b"1"}), trial, 3)
    path = persist_checkpoint(make_source(tmp_path / "b", {"x": b"new"}), trial, 3)
    assert sorted(os.listdir(path)) == [MANIFEST_FILE, "x"]
    assert Path(path, "x").read_bytes() == b"new"
    assert verify_checkpoint(path) is None
    assert leftovers(trial) == []


def test_a_vanished_source_is_a_clear_error(tmp_path: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        ckpt = tune.Checkpoint.from_directory(d)
    with pytest.raises(ValueError, match="no longer exists"):
        persist_checkpoint(ckpt.path, str(tmp_path / "trial"), 1)


def test_a_100mb_checkpoint_persists_and_verifies(tmp_path: Path) -> None:
    """What a checkpoint costs inside report(): benchmarks/checkpoint_cost.py."""
    src = make_source(tmp_path / "src", {"model.pt": os.urandom(100 << 20)})
    path = persist_checkpoint(src, str(tmp_path / "trial"), 1)
    assert verify_checkpoint(path) is None
    assert Path(path, "model.pt").read_bytes() == Path(src, "model.pt").read_bytes()


# -- verification and fallback --------------------------------------------------------------


@pytest.fixture
def three(tmp_path: Path) -> list[str]:
    """Three valid checkpoints of one trial, newest first."""
    trial = str(tmp_path / "trial")
    paths = []
    for i in (1, 2, 3):
        src = make_source(tmp_path / f"s{i}", {"model.pt": b"m" * 456, "step": str(i).encode()})
        paths.append(persist_checkpoint(src, trial, i))
    return paths[::-1]


def corrupt(path: str, how: str) -> None:
    model = Path(path, "model.pt")
    if how == "truncate":
        model.write_bytes(b"m" * 123)
    elif how == "flip":
        data = bytearray(model.read_bytes())
        data[100] ^= 0x01
        model.write_bytes(bytes(data))
    elif how == "no-manifest":
        Path(path, MANIFEST_FILE).unlink()
    elif how == "remove-file":
        model.unlink()
    elif how == "garbage-manifest":
        Path(path, MANIFEST_FILE).write_text("{not json")
    elif how == "future-version":
        manifest = json.loads(Path(path, MANIFEST_FILE).read_text())
        Path(path, MANIFEST_FILE).write_text(json.dumps({**manifest, "version": 99}))
    elif how == "escape":
        manifest = json.loads(Path(path, MANIFEST_FILE).read_text())
        manifest["files"].append({"path": "../../etc/passwd", "size": 1, "sha256": "0"})
        Path(path, MANIFEST_FILE).write_text(json.dumps(manifest))
    elif how == "gone":
        ckpt_mod.delete_checkpoints([path])


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("truncate", "file model.pt: size 123 != 456"),
        ("flip", "sha256 mismatch in model.pt"),
        ("no-manifest", "missing manifest (half-written?)"),
        ("remove-file", "file model.pt: missing"),
        ("garbage-manifest", "unreadable manifest"),
        ("future-version", "manifest version 99 not supported"),
        ("escape", "points outside the checkpoint"),
        ("gone", "directory missing"),
    ],
)
def test_verify_names_what_is_wrong(three: list[str], how: str, reason: str) -> None:
    newest = three[0]
    corrupt(newest, how)
    found = verify_checkpoint(newest)
    assert found is not None and reason in found, found


def test_size_check_alone_misses_a_flipped_byte(three: list[str]) -> None:
    corrupt(three[0], "flip")
    assert verify_checkpoint(three[0], checksums=False) is None
    assert verify_checkpoint(three[0]) == "sha256 mismatch in model.pt"


def test_latest_valid_falls_back_and_says_why(three: list[str]) -> None:
    newest, middle, oldest = three
    corrupt(newest, "flip")
    corrupt(middle, "no-manifest")
    path, skipped = latest_valid([None, *three])
    assert path == oldest
    assert skipped == [
        (newest, "sha256 mismatch in model.pt"),
        (middle, "missing manifest (half-written?)"),
    ]
    assert latest_valid(three[:1]) == (None, [(newest, "sha256 mismatch in model.pt")])
    assert latest_valid([]) == (None, [])
    assert latest_valid(three[2:]) == (oldest, [])
    # sizes only: a flipped byte goes unnoticed, a missing manifest does not
    assert latest_valid(three, checksums=False) == (newest, [])
    assert latest_valid(three[1:], checksums=False)[0] == oldest


tree = st.dictionaries(
    st.lists(st.sampled_from(["a", "b", "sub", "x.pt", "émoji é"]), min_size=1, max_size=3).map(
        "/".join
    ),
    st.binary(max_size=3000),
    min_size=1,
    max_size=6,
).filter(
    # a path may not be both a file and a folder
    lambda files: not any(other.startswith(rel + "/") for rel in files for other in files)
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(files=tree, data=st.data())
def test_any_tree_round_trips_and_any_damage_is_caught(
    tmp_path: Path, files: dict[str, bytes], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as work:
        src = make_source(Path(work, "src"), files)
        path = persist_checkpoint(src, os.path.join(work, "trial"), 1)
        assert verify_checkpoint(path) is None
        for rel, content in files.items():
            assert Path(path, rel).read_bytes() == content
        victim = data.draw(st.sampled_from(sorted(files)))
        target = Path(path, victim)
        content = target.read_bytes()
        if content:
            i = data.draw(st.integers(0, len(content) - 1))
            changed = bytearray(content)
            changed[i] ^= 1 << data.draw(st.integers(0, 7))
            target.write_bytes(bytes(changed))
            assert verify_checkpoint(path) == f"sha256 mismatch in {victim}"
        else:
            target.write_bytes(b"x")
            assert verify_checkpoint(path) == f"file {victim}: size 1 != 0"


_WRITER = """
import os, sys
from tunefleet.storage.checkpoint import persist_checkpoint
src, trial = sys.argv[1], sys.argv[2]
i = 0
while True:
    i += 1
    persist_checkpoint(src, trial, i)
    print(i, flush=True)
"""


def test_a_writer_killed_at_any_moment_leaves_only_complete_checkpoints(tmp_path: Path) -> None:
    src = make_source(tmp_path / "src", {f"part{i}.bin": os.urandom(2 << 20) for i in range(4)})
    trial = str(tmp_path / "trial")
    for delay in (0.0, 0.013, 0.037, 0.071):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, src, trial], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "1"  # one complete; kill during a later one
            time.sleep(delay)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
        names = sorted(os.listdir(Path(trial, "checkpoints"))) if os.path.isdir(trial) else []
        for name in names:
            if not name.startswith("."):
                assert verify_checkpoint(os.path.join(trial, "checkpoints", name)) is None, name
        remove_temporaries(trial)
        assert leftovers(trial) == []
        ckpt_mod.delete_checkpoints(
            [os.path.join(trial, "checkpoints", n) for n in names if not n.startswith(".")]
        )


# -- retention ------------------------------------------------------------------------------


def expected_kept(
    scores: list[float | None], n: int | None, order: str, by_score: bool
) -> set[int]:
    """Reference model: indices kept after adding `scores` in order."""
    if n is None:
        return set(range(len(scores)))

    def rank(i: int) -> tuple[float, int]:
        s = scores[i]
        if not by_score:
            return (float(i), i)
        if s is None or not math.isfinite(s):
            return (-math.inf, i)
        return (s if order == "max" else -s, i)

    best = sorted(range(len(scores)), key=rank, reverse=True)[:n]
    return set(best) | {len(scores) - 1}


scores_st = st.lists(
    st.one_of(
        st.none(),
        st.just(math.nan),
        st.floats(-5, 5, allow_nan=False),
        st.sampled_from([0.0, 1.0]),  # ties
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(
    scores=scores_st,
    n=st.one_of(st.none(), st.integers(1, 5)),
    order=st.sampled_from(["max", "min"]),
    by_score=st.booleans(),
)
def test_keeper_keeps_the_n_best_and_the_latest(
    scores: list[float | None], n: int | None, order: str, by_score: bool
) -> None:
    keeper = CheckpointKeeper(n, "acc" if by_score else None, order)
    dropped: list[str] = []
    for i, score in enumerate(scores):
        result = {} if score is None else {"acc": score}
        out = keeper.add("t1", f"c{i}", result)
        assert f"c{i}" not in out, "the latest is always kept"
        dropped += out
    kept = set(keeper.kept("t1"))
    assert kept == {f"c{i}" for i in expected_kept(scores, n, order, by_score)}
    assert sorted(dropped + list(kept)) == sorted(f"c{i}" for i in range(len(scores)))
    assert len(dropped) == len(set(dropped))
    if n is not None:
        assert len(kept) <= n + 1
    assert keeper.kept("t1")[0] == f"c{len(scores) - 1}"  # newest first


def test_keeper_examples_and_purity(tmp_path: Path) -> None:
    trial = str(tmp_path / "trial")
    paths = [
        persist_checkpoint(make_source(tmp_path / f"s{i}", {"w": b"1"}), trial, i)
        for i in range(1, 5)
    ]
    keeper = CheckpointKeeper(num_to_keep=2, score_attribute="val/acc", score_order="max")
    assert keeper.add("t", paths[0], {"val": {"acc": 0.9}}) == []
    assert keeper.add("t", paths[1], {"val": {"acc": math.nan}}) == []
    # NaN ranks last; the newest is kept even though it is the worst
    assert keeper.add("t", paths[2], {"val": {"acc": 0.5}}) == [paths[1]]
    assert keeper.add("t", paths[3], {"other": 1}) == []  # 2 best + latest = 3
    assert keeper.kept("t") == [paths[3], paths[2], paths[0]]
    assert all(os.path.isdir(p) for p in paths), "add() deletes nothing"
    other = CheckpointKeeper(1, "loss", "min")
    assert other.add("a", "x1", {"loss": 2.0}) == []
    assert other.add("a", "x2", {"loss": 1.0}) == ["x1"]
    assert other.add("b", "y1", {"loss": 9.0}) == []  # per trial
    latest_n = CheckpointKeeper(2)
    assert [latest_n.add("t", f"p{i}", {}) for i in range(4)] == [[], [], ["p0"], ["p1"]]
    keeper.forget("t", paths[0])
    assert keeper.kept("t") == [paths[3], paths[2]]
    with pytest.raises(ValueError, match="num_to_keep=0"):
        CheckpointKeeper(0)
    cfg = tune.CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="acc")
    assert CheckpointKeeper.from_config(cfg).num_to_keep == 3


def test_discard_leaves_a_kept_checkpoint_alone(tmp_path: Path) -> None:
    trial = str(tmp_path / "trial")
    kept = persist_checkpoint(make_source(tmp_path / "a", {"w": b"1"}), trial, 1)
    stale = persist_checkpoint(make_source(tmp_path / "b", {"w": b"2"}), trial, 2)
    keeper = CheckpointKeeper()
    keeper.add("t", kept, {})
    keeper.discard(kept)
    keeper.discard(stale)
    assert os.path.isdir(kept) and not os.path.exists(stale)


def test_delete_checkpoints_never_raises(tmp_path: Path) -> None:
    trial = str(tmp_path / "trial")
    a = persist_checkpoint(make_source(tmp_path / "a", {"w": b"1"}), trial, 1)
    b = persist_checkpoint(make_source(tmp_path / "b", {"w": b"1"}), trial, 2)
    not_a_checkpoint = make_source(tmp_path / "precious", {"keep": b"me"})
    a_file = tmp_path / "x" / "checkpoint_000009"
    a_file.parent.mkdir()
    a_file.write_text("file")
    failures = delete_checkpoints([a, a, b + "/", not_a_checkpoint, str(a_file)])
    assert not os.path.exists(a) and not os.path.exists(b)
    assert [path for path, _ in failures] == [not_a_checkpoint, str(a_file)]
    assert "not a checkpoint folder" in failures[0][1]
    assert os.path.exists(not_a_checkpoint) and a_file.exists()
    assert leftovers(trial) == []


# -- disk full, on a real small filesystem ----------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """`small_fs("2m")` mounts a tmpfs of that size and returns its path; unmounted after."""
    mounted: list[str] = []

    def mount(size: str) -> str:
        target = tmp_path / f"fs{len(mounted)}"
        target.mkdir()
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot mount a small tmpfs for the disk-full tests: {exc}")
        if proc.returncode != 0:
            pytest.skip(
                "cannot mount a small tmpfs for the disk-full tests (needs root or "
                f"CAP_SYS_ADMIN): {proc.stderr.strip() or proc.returncode}"
            )
        mounted.append(str(target))
        return str(target)

    try:
        yield mount
    finally:
        gc.collect()  # readers still open on the filesystem would make it busy
        for target in mounted:
            if subprocess.run(["umount", target], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", target], capture_output=True)


def assert_disk_full_error(exc: BaseException | str, previous: str) -> None:
    text = str(exc)
    assert "Could not write checkpoint" in text and "checkpoint_000002" in text
    assert "No space left on device" in text and "[ENOSPC]" in text
    assert "free of 2.0 MiB on that filesystem" in text
    assert f"previous checkpoint {os.path.basename(previous)} is intact" in text
    assert "num_to_keep" in text


@pytest.mark.parametrize("early", [True, False], ids=["refused-before-writing", "real-enospc"])
def test_disk_full_keeps_the_previous_checkpoint(
    tmp_path: Path,
    small_fs: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    early: bool,
) -> None:
    trial = os.path.join(small_fs("2m"), "trial")
    previous = persist_checkpoint(make_source(tmp_path / "a", {"w.bin": b"1" * 10_000}), trial, 1)
    big = make_source(tmp_path / "b", {"small.bin": b"2" * 100_000, "w.bin": os.urandom(3 << 20)})
    if not early:  # past the space check (as if another writer took the space meanwhile)
        monkeypatch.setattr(_local, "_check_space", lambda root, needed: None)
    with pytest.raises(CheckpointWriteError) as info:
        persist_checkpoint(big, trial, 2)
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    monkeypatch.undo()
    assert_disk_full_error(info.value, previous)
    assert verify_checkpoint(previous) is None
    assert leftovers(trial) == []
    assert sorted(os.listdir(os.path.join(trial, "checkpoints"))) == ["checkpoint_000001"]


def test_a_failed_delete_is_reported_not_raised(
    tmp_path: Path, small_fs: Callable[[str], str]
) -> None:
    mount = small_fs("1m")
    path = persist_checkpoint(make_source(tmp_path / "a", {"w": b"1"}), mount, 1)
    subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
    try:
        ((failed, reason),) = delete_checkpoints([path])
    finally:
        subprocess.run(["mount", "-o", "remount,rw", mount], check=True)
    assert failed == path and "Read-only file system" in reason
    assert verify_checkpoint(path) is None


def fills_the_disk(config: dict[str, Any]) -> None:
    start = 0
    if (ckpt := tune.get_checkpoint()) is not None:
        assert verify_checkpoint(ckpt.path) is None
        start = int(Path(ckpt.path, "step").read_text())
    for step in range(start, 3):
        big = step == 1 and tune.get_context().attempt == 0
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step + 1))
            Path(d, "weights.bin").write_bytes(os.urandom((3 << 20) if big else 10_000))
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))


def run_on_small_disk(storage: str, max_failures: int) -> tuple[str, Any]:
    grid = tune.Tuner(
        fills_the_disk,
        run_config=tune.RunConfig(
            name="full",
            storage_path=storage,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=max_failures),
        ),
    ).fit()
    path = grid.experiment_path
    with StoreReader(path) as reader:
        (trial,) = reader.trials()
        return path, (trial, reader.checkpoints(trial.trial_id), reader.results(trial.trial_id))


def test_disk_full_in_a_trial_fails_it_with_the_cause(small_fs: Callable[[str], str]) -> None:
    _, (trial, checkpoints, results) = run_on_small_disk(small_fs("2m"), max_failures=0)
    assert trial.status is TrialStatus.ERROR
    assert trial.error is not None and trial.error.kind is FailureKind.EXCEPTION
    assert trial.error.exception_type == "tunefleet.storage.checkpoint.CheckpointWriteError"
    assert trial.error.iteration == 1
    (previous,) = [path for _, path, _ in checkpoints]
    assert_disk_full_error(trial.error.message, previous)
    assert verify_checkpoint(previous) is None
    assert [r["training_iteration"] for r in results] == [1]  # the failed report did not count
    assert leftovers(trial.path) == []


def test_disk_full_then_retry_resumes_from_the_previous_checkpoint(
    small_fs: Callable[[str], str],
) -> None:
    exp, (trial, checkpoints, results) = run_on_small_disk(small_fs("2m"), max_failures=1)
    assert trial.status is TrialStatus.TERMINATED and trial.error is None
    assert [r["step"] for r in results] == [0, 1, 2]
    assert [it for it, _, _ in checkpoints] == [1, 2, 3]
    assert all(verify_checkpoint(path) is None for _, path, _ in checkpoints)
    with StoreReader(exp) as reader:
        (failed,) = reader.events(trial.trial_id, kinds="failed")
    assert "No space left on device" in failed["data"]["message"]
    assert leftovers(trial.path) == []


def test_a_dropped_name_written_again_is_kept_not_deleted() -> None:
    # A PBT exploit copies the source's checkpoint under an iteration name that
    # retention had just dropped for the trial itself; the controller deletes only
    # what is no longer kept, so the queued deletion must not take the copy with it.
    keeper = CheckpointKeeper(num_to_keep=2)
    assert keeper.add("t", "ck/checkpoint_000004", {}) == []
    assert keeper.add("t", "ck/checkpoint_000008", {}) == []
    dropped = keeper.add("t", "ck/checkpoint_000012", {})
    assert dropped == ["ck/checkpoint_000004"] and not keeper.is_kept(dropped[0])
    keeper.add("t", "ck/checkpoint_000004", {})  # the exploit's copy, same name
    assert keeper.is_kept("ck/checkpoint_000004")
    keeper.forget("t", "ck/checkpoint_000004")
    assert not keeper.is_kept("ck/checkpoint_000004")
