"""`CheckpointConfig.checkpoint_at_end` left at None: Ray Tune's defaults.

A `Tuner` saves a class trainable after its last step, so the result has a final
checkpoint (Ray 2.x's `Tuner` sets it True for every class trainable). One that does not
override `save_checkpoint` is not asked (Ray's trial would fail with NotImplementedError).
`tune.run`, as Ray's, saves at the end only when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune


class Saves(tune.Trainable):
    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.count = 0

    def step(self) -> dict[str, Any]:
        self.count += 1
        return {"count": self.count, "done": self.count >= 3}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "count.json").write_text(json.dumps(self.count))


class DoesNotSave(tune.Trainable):
    def step(self) -> dict[str, Any]:
        return {"count": self.iteration + 1, "done": self.iteration + 1 >= 3}


def _fit(trainable: Any, storage: str, **checkpoints: Any) -> tune.ResultGrid:
    return tune.Tuner(
        trainable,
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(**checkpoints),
        ),
    ).fit()


def test_a_tuner_saves_a_class_trainable_after_its_last_step(storage: str) -> None:
    given = tune.CheckpointConfig()
    run_config = tune.RunConfig(storage_path=storage, verbose=0, checkpoint_config=given)
    grid = tune.Tuner(Saves, run_config=run_config).fit()
    (result,) = list(grid)
    assert result.error is None, result.error
    assert result.checkpoint is not None, "the old default: no checkpoint at the end"
    with result.checkpoint.as_directory() as folder:
        assert json.loads(Path(folder, "count.json").read_text()) == 3
    assert given.checkpoint_at_end is None, "the caller's config is not changed"


def test_one_that_does_not_save_is_not_asked_and_ends_well(storage: str) -> None:
    (result,) = list(_fit(DoesNotSave, storage))
    assert result.error is None, result.error
    assert result.checkpoint is None


@pytest.mark.parametrize("at_end", [False, True])
def test_an_explicit_choice_is_kept(storage: str, at_end: bool) -> None:
    (result,) = list(_fit(Saves, storage, checkpoint_at_end=at_end))
    assert result.error is None, result.error
    assert (result.checkpoint is not None) is at_end


def test_tune_run_saves_at_the_end_only_when_asked(storage: str) -> None:
    analysis = tune.run(Saves, storage_path=storage, verbose=0)
    (trial,) = analysis.trials
    assert trial.error is None and trial.checkpoint is None, trial.checkpoint
    asked = tune.run(Saves, storage_path=storage, verbose=0, checkpoint_at_end=True)
    assert asked.trials[0].checkpoint is not None
