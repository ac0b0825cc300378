"""The controller's thread only decides: checkpoint copies and deletes run elsewhere.

A PBT exploit's copy of another trial's checkpoint is made by the exploiting trial's
next attempt (`TrialLaunch.copy_from`), in its worker; retention's deletes run on a
thread of their own (`commit.Deleter`). A source that retention drops before the
copy is made is kept until it is (`Commits.pin`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import meeting
from tests.schedulers.test_pbt import assert_every_resume_used_its_copy, pbt, shifting_target
from tunefleet.engine import commit
from tunefleet.storage import _local, retention
from tunefleet.storage.checkpoint import CheckpointKeeper, persist_checkpoint
from tunefleet.store import ExperimentStore, StoreReader


@pytest.fixture
def driver_io(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The checkpoint copies and deletes made in this (the driver's) process, each with
    the thread that made it; the trials run in worker processes."""
    seen: dict[str, list[str]] = {"copies": [], "deletes": []}
    persist, delete = _local.LocalFilesystem.persist, retention.delete_checkpoints

    def copying(self: Any, source: str, final: str) -> str:
        seen["copies"].append(f"{final} ({threading.current_thread().name})")
        return persist(self, source, final)

    def deleting(paths: list[str]) -> list[tuple[str, str]]:
        seen["deletes"] += [f"{p} ({threading.current_thread().name})" for p in paths]
        return delete(paths)

    monkeypatch.setattr(_local.LocalFilesystem, "persist", copying)
    monkeypatch.setattr(commit, "delete_checkpoints", deleting)
    return seen


def test_pbt_exploits_copy_in_the_trial_and_retention_deletes_off_the_controller(
    storage: str, tmp_path: Path, driver_io: dict[str, list[str]]
) -> None:
    grid = tune.Tuner(
        tune.with_resources(shifting_target, {"cpu": 0.5}),  # all four at once
        param_space={"lr": tune.grid_search([1.0, 0.1, 0.01, 0.0001]), **meeting(tmp_path, 4)},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", scheduler=pbt(perturbation_interval=3)
        ),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        ),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    assert driver_io["copies"] == []  # every exploit's copy was made by the trial
    assert driver_io["deletes"], "retention deleted nothing"
    assert all(d.endswith("(tunefleet-deletes)") for d in driver_io["deletes"])
    with StoreReader(grid.experiment_path) as reader:
        assert_every_resume_used_its_copy(reader)  # the copy its own attempt made
        for trial in reader.trials():  # retention held, deletes all done by the end
            on_disk = sorted(p.name for p in Path(trial.path, "checkpoints").iterdir())
            kept = [Path(path).name for _, path, _ in reader.checkpoints(trial.trial_id)]
            assert on_disk == kept and len(kept) == 1, (trial.trial_id, on_disk, kept)


def test_a_pinned_source_outlives_its_drop_until_the_copy_is_made(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "w").write_text("weights")
    trial_dir = str(tmp_path / "trials" / "a")
    first = persist_checkpoint(str(source), trial_dir, 1)
    second = persist_checkpoint(str(source), trial_dir, 2)
    keeper = CheckpointKeeper(num_to_keep=1)
    keeper.add("a", first, {})
    with ExperimentStore(tmp_path / "exp") as store:
        commits = commit.Commits(store, keeper)
        commits.pin("b", first)  # b's next attempt copies a's first checkpoint
        commits.delete_later(keeper.add("a", second, {}))  # ... which retention drops
        commits.flush()
        commits.deleter.wait_for(str(Path(trial_dir, "checkpoints")))
        assert Path(first).is_dir(), "deleted before b copied it"
        commits.unpin("b")  # b's attempt has sent its first event: it has the copy
        commits.close()  # the delete runs after the next commit; close waits for it
        assert not Path(first).exists() and Path(second).is_dir()
