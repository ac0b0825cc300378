"""Ray 2.0-2.6's dict checkpoints, as its pbt_function and pb2 examples and the "checkpoint
a dictionary" guide wrote them: `ray.air.checkpoint.Checkpoint.from_dict` / `to_dict`
with `session.report` (Ray form, ported at collection)."""

import os
from pathlib import Path

import numpy as np
import pytest
from ray import air, tune
from ray.air import session
from ray.air.checkpoint import Checkpoint


def train_fn(config):
    """Resume from the dict checkpoint, fail once at step 3 if asked, report a dict
    checkpoint per step."""
    step = 0
    loaded = session.get_checkpoint()
    if loaded:
        step = loaded.to_dict()["step"]
    start = step
    while step < config["steps"]:
        step += 1
        marker = config.get("fail_once_at")
        if marker and step == 3 and not os.path.exists(marker):
            Path(marker).touch()
            raise RuntimeError("simulated failure at step 3")
        session.report(
            {"score": step * config["lr"], "start": start},
            checkpoint=Checkpoint.from_dict({"step": step, "weights": np.arange(step)}),
        )


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    storage = tmp_path_factory.mktemp("dict_ckpt")
    return tune.Tuner(
        train_fn,
        param_space={"steps": 4, "lr": 0.5, "fail_once_at": str(storage / "marker")},
        run_config=air.RunConfig(
            storage_path=str(storage), failure_config=air.FailureConfig(max_failures=1)
        ),
    ).fit()


def test_from_dict_to_dict_round_trip():
    assert Checkpoint.from_dict({"a": 1, "b": [1, 2]}).to_dict() == {"a": 1, "b": [1, 2]}


def test_from_dict_keeps_objects_json_cannot():
    data = Checkpoint.from_dict({1: (2, 3), "w": np.ones(3)}).to_dict()
    assert data[1] == (2, 3)
    assert data["w"].tolist() == [1.0, 1.0, 1.0]


def test_a_directory_checkpoint_is_not_a_dict(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"x")
    # Ray 2.0-2.6 packed the directory's files into a dict; tunefleet says how to read it.
    with pytest.raises(ValueError, match="as_directory"):
        Checkpoint.from_directory(str(tmp_path)).to_dict()


def test_from_dict_refuses_a_non_dict():
    with pytest.raises(TypeError, match="must be a dict"):
        Checkpoint.from_dict([1, 2])


def test_the_last_dict_checkpoint_is_the_results(grid):
    assert grid.num_errors == 0
    data = grid[0].checkpoint.to_dict()
    assert data["step"] == 4
    assert data["weights"].tolist() == [0, 1, 2, 3]


def test_a_retry_resumes_from_the_dict_checkpoint(grid):
    assert grid[0].metrics["start"] == 2  # the step-2 checkpoint, after the failure at step 3
    assert grid[0].metrics["training_iteration"] == 4


def test_update_metadata_merges(tmp_path):
    checkpoint = Checkpoint.from_dict({"a": 1})
    checkpoint.set_metadata({"epoch": 1})
    checkpoint.update_metadata({"loss": 0.5})
    assert checkpoint.get_metadata() == {"epoch": 1, "loss": 0.5}
