"""A trial that runs again verifies its checkpoints itself; the driver reads none.

Verifying a checkpoint reads every byte of it (SHA-256). Done by the driver, a
relaunch of a trial with a big checkpoint (a retry, an ASHA promotion, a resume after
a pause) would hold up every other trial's results meanwhile. The driver names the
checkpoints (newest first); the attempt checks them, restores from the first that
verifies and tells the driver, which rewinds the results and records why.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.storage import checkpoint as ckpt_mod
from tunefleet.storage import filesystem
from tunefleet.storage.checkpoint import MANIFEST_FILE, verify_checkpoint
from tunefleet.store import StoreReader


def rots_its_checkpoints(config: dict[str, Any]) -> None:
    """Reports steps 0..3 with a checkpoint each; the first attempt corrupts the
    newest `config["rot"]` checkpoints after step 2 and crashes."""
    start = 0
    if (ckpt := tune.get_checkpoint()) is not None:
        assert verify_checkpoint(ckpt.path) is None, "handed a checkpoint that does not verify"
        start = int(Path(ckpt.path, "step").read_text())
    for step in range(start, 4):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step + 1))
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))
        if step == 2 and tune.get_context().attempt == 0:
            folder = Path(tune.get_context().trial_dir, "checkpoints")
            for iteration in range(3, 3 - config["rot"], -1):
                newest = folder / f"checkpoint_{iteration:06d}"
                while not (newest / MANIFEST_FILE).exists():  # persisted in the background
                    time.sleep(0.005)
                (newest / "step").write_text("9")  # bit rot after the write
            raise RuntimeError("crash after checkpoints went bad")


def run(storage: str, rot: int) -> tune.ResultGrid:
    return tune.Tuner(
        rots_its_checkpoints,
        param_space={"rot": rot},
        run_config=tune.RunConfig(
            storage_path=storage, verbose=0, failure_config=tune.FailureConfig(max_failures=1)
        ),
    ).fit()


@pytest.fixture
def driver_verifies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The checkpoints verified in this (the driver's) process; trials run in workers."""
    seen: list[str] = []
    original = filesystem.verify

    def recording(fs: Any, path: str, *, checksums: bool = True) -> str | None:
        seen.append(f"{path} ({threading.current_thread().name})")
        return original(fs, path, checksums=checksums)

    monkeypatch.setattr(ckpt_mod, "verify", recording)
    return seen


def test_the_retry_verifies_and_falls_back_the_driver_reads_nothing(
    storage: str, driver_verifies: list[str]
) -> None:
    grid = run(storage, rot=1)
    (result,) = list(grid)
    assert result.error is None
    assert driver_verifies == []
    with StoreReader(grid.experiment_path) as reader:
        trial_id = reader.trial_ids()[0]
        (invalid,) = reader.events(trial_id, kinds="checkpoint_invalid")
        (rewound,) = reader.events(trial_id, kinds="rewound")
        steps = [r["step"] for r in reader.results(trial_id)]
        kept = [Path(path).name for _, path, _ in reader.checkpoints(trial_id)]
    assert invalid["data"]["path"].endswith("checkpoint_000003")
    assert rewound["data"]["checkpoint"].endswith("checkpoint_000002")
    assert steps == [0, 1, 2, 3]  # each step recorded once: step 2's result was rewound
    assert kept[-1] == "checkpoint_000004"


def test_no_checkpoint_verifies_the_retry_starts_from_scratch(storage: str) -> None:
    grid = run(storage, rot=3)
    (result,) = list(grid)
    assert result.error is None
    with StoreReader(grid.experiment_path) as reader:
        trial_id = reader.trial_ids()[0]
        invalid = reader.events(trial_id, kinds="checkpoint_invalid")
        (rewound,) = reader.events(trial_id, kinds="rewound")
        steps = [r["step"] for r in reader.results(trial_id)]
    assert sorted(Path(e["data"]["path"]).name for e in invalid) == [
        f"checkpoint_{i:06d}" for i in (1, 2, 3)
    ]
    assert rewound["data"] == {"to_iteration": 0, "checkpoint": None}
    assert steps == [0, 1, 2, 3]
