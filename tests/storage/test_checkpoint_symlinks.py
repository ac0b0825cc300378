"""A checkpoint never leads outside itself: symlinks that leave it are refused.

On write (`persist_checkpoint`) such a link is an error naming it and its target; on
restore (`verify_checkpoint`, `latest_valid`, `as_directory`, `to_directory`) a
checkpoint holding one is invalid, even when the target's bytes match the manifest.
Links that stay inside are copied as the files they point to.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.storage.checkpoint import (
    MANIFEST_FILE,
    latest_valid,
    persist_checkpoint,
    verify_checkpoint,
)
from tunefleet.store import StoreReader


def source_with(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def no_checkpoint_written(trial: Path) -> bool:
    root = trial / "checkpoints"
    return not root.exists() or os.listdir(root) == []


# -- on write ---------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_a_link_to_a_file_outside_is_refused_naming_link_and_target(
    tmp_path: Path, relative: bool
) -> None:
    secret = tmp_path / "other_trial" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"password")
    src = source_with(tmp_path / "src", {"opt/state.bin": b"s"})
    target = os.path.relpath(secret, src / "opt") if relative else str(secret)
    (src / "opt" / "model.pt").symlink_to(target)

    with pytest.raises(ValueError) as info:
        persist_checkpoint(str(src), str(tmp_path / "trial"), 1)
    text = str(info.value)
    assert "symlink opt/model.pt" in text and target in text
    assert "points outside the checkpoint directory" in text and str(secret) in text
    assert no_checkpoint_written(tmp_path / "trial")


def test_a_linked_folder_outside_and_a_loop_are_refused(tmp_path: Path) -> None:
    outside = source_with(tmp_path / "data", {"passwd": b"root:x:0:0"})
    src = source_with(tmp_path / "src", {"w.bin": b"1"})
    (src / "data").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match=r"symlink data -> .*points outside"):
        persist_checkpoint(str(src), str(tmp_path / "trial"), 1)

    loop = source_with(tmp_path / "loop", {"sub/w.bin": b"1"})
    (loop / "sub" / "again").symlink_to("..", target_is_directory=True)
    with pytest.raises(ValueError, match=r"symlink sub/again -> \.\. points to a folder"):
        persist_checkpoint(str(loop), str(tmp_path / "trial"), 1)
    assert no_checkpoint_written(tmp_path / "trial")


def test_links_inside_are_copied_as_the_files_they_point_to(tmp_path: Path) -> None:
    src = source_with(tmp_path / "src", {"weights/v1.pt": b"w" * 100})
    (src / "model.pt").symlink_to("weights/v1.pt")
    (src / "latest").symlink_to("weights", target_is_directory=True)
    path = Path(persist_checkpoint(str(src), str(tmp_path / "trial"), 1))

    for rel in ("model.pt", "latest/v1.pt", "weights/v1.pt"):
        assert not (path / rel).is_symlink() and (path / rel).read_bytes() == b"w" * 100
    assert not (path / "latest").is_symlink()
    assert verify_checkpoint(str(path)) is None


# -- on restore -------------------------------------------------------------------------------


@pytest.fixture
def two(tmp_path: Path) -> list[str]:
    """Two valid checkpoints of one trial, newest first."""
    paths = []
    for i in (1, 2):
        src = source_with(tmp_path / f"s{i}", {"model.pt": b"m" * 64, "step": str(i).encode()})
        paths.append(persist_checkpoint(str(src), str(tmp_path / "trial"), i))
    return paths[::-1]


def test_a_file_swapped_for_a_link_with_the_same_bytes_is_invalid(
    tmp_path: Path, two: list[str]
) -> None:
    newest, older = two
    outside = tmp_path / "elsewhere" / "model.pt"
    outside.parent.mkdir()
    outside.write_bytes(b"m" * 64)  # same size and sha256: the manifest alone is satisfied
    Path(newest, "model.pt").unlink()
    Path(newest, "model.pt").symlink_to(outside)

    reason = f"symlink model.pt points outside the checkpoint (to {outside})"
    assert verify_checkpoint(newest) == reason
    assert verify_checkpoint(newest, checksums=False) == reason
    assert latest_valid(two) == (older, [(newest, reason)])
    with (
        pytest.raises(ValueError, match=r"symlink model\.pt points outside"),
        tune.Checkpoint(newest).as_directory(),
    ):
        pass
    with pytest.raises(ValueError, match=r"symlink model\.pt points outside"):
        tune.Checkpoint(newest).to_directory(str(tmp_path / "copy"))
    with tune.Checkpoint(older).as_directory() as folder:
        assert Path(folder, "step").read_text() == "1"


def test_an_unlisted_link_or_a_linked_checkpoint_folder_is_invalid(
    tmp_path: Path, two: list[str]
) -> None:
    newest, older = two
    Path(newest, "extra").symlink_to("../../../other_trial/secret")
    assert verify_checkpoint(newest) == (
        "symlink extra points outside the checkpoint (to ../../../other_trial/secret)"
    )
    other = persist_checkpoint(
        str(source_with(tmp_path / "o", {"w": b"1"})), str(tmp_path / "t2"), 1
    )
    linked = Path(older).parent / "checkpoint_000009"
    linked.symlink_to(other, target_is_directory=True)
    assert verify_checkpoint(other) is None
    assert verify_checkpoint(str(linked)) == f"the checkpoint folder is a symlink (to {other})"
    assert verify_checkpoint(older) is None


def links_its_newest_out(config: dict[str, Any]) -> None:
    start = 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as folder:
            start = int(Path(folder, "step").read_text())
    for step in range(start, 4):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step + 1))
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))
        if step == 2 and tune.get_context().attempt == 0:
            newest = Path(tune.get_context().trial_dir, "checkpoints", "checkpoint_000003")
            while not (newest / MANIFEST_FILE).exists():  # persisted in the background
                time.sleep(0.005)
            (newest / "step").unlink()
            (newest / "step").symlink_to(config["outside"])  # holds "3": the same bytes
            raise RuntimeError("crash after the newest checkpoint was swapped for a link")


def test_a_retry_skips_a_checkpoint_that_links_out_and_says_why(
    storage: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside_step"
    outside.write_text("3")
    grid = tune.Tuner(
        links_its_newest_out,
        param_space={"outside": str(outside)},
        run_config=tune.RunConfig(
            storage_path=storage, verbose=0, failure_config=tune.FailureConfig(max_failures=1)
        ),
    ).fit()
    (result,) = list(grid)
    assert result.error is None
    with StoreReader(grid.experiment_path) as reader:
        trial_id = reader.trial_ids()[0]
        (invalid,) = reader.events(trial_id, kinds="checkpoint_invalid")
        (rewound,) = reader.events(trial_id, kinds="rewound")  # by the retry, which checked
        steps = [r["step"] for r in reader.results(trial_id)]
    assert rewound["data"]["checkpoint"].endswith("checkpoint_000002")
    assert invalid["data"]["why"] == f"symlink step points outside the checkpoint (to {outside})"
    assert steps == [0, 1, 2, 3]
