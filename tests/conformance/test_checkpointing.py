"""Ray Tune's "How to Save and Load Trial Checkpoints" guide and its fault-tolerance
companion: function and class trainable checkpoints, CheckpointConfig, Result's
checkpoints, retries with FailureConfig and Tuner.restore (Ray form, ported at
collection)."""

import json
import os
import tempfile
from pathlib import Path

import pytest
from ray import train, tune
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig
from ray.tune.result import SHOULD_CHECKPOINT

ACCURACIES = [0.5, 0.9, 0.3, 0.8, 0.95]


def train_func(config):
    """The guide's function trainable: resume from get_checkpoint, report a checkpoint
    per epoch with from_directory."""
    start = 1
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            start = json.loads(Path(checkpoint_dir, "checkpoint.json").read_text())["epoch"] + 1
    for epoch in range(start, config["epochs"] + 1):
        fail_marker = config.get("fail_once_at")
        if fail_marker and epoch == 3 and not os.path.exists(fail_marker):
            Path(fail_marker).touch()
            raise RuntimeError("simulated failure at epoch 3")
        metrics = {"acc": ACCURACIES[epoch - 1], "epoch": epoch, "start": start}
        with tempfile.TemporaryDirectory() as tempdir:
            with open(os.path.join(tempdir, "checkpoint.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            train.report(metrics, checkpoint=Checkpoint.from_directory(tempdir))


def _epoch(checkpoint):
    with checkpoint.as_directory() as checkpoint_dir:
        return json.loads(Path(checkpoint_dir, "checkpoint.json").read_text())["epoch"]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def scored(storage):
    tuner = tune.Tuner(
        train_func,
        param_space={"epochs": 5},
        run_config=RunConfig(
            name="scored",
            storage_path=storage,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2,
                checkpoint_score_attribute="acc",
                checkpoint_score_order="max",
            ),
        ),
    )
    return tuner.fit()


def test_function_trainable_runs_every_epoch(scored):
    assert scored.num_errors == 0
    assert scored[0].metrics["training_iteration"] == 5


def test_result_checkpoint_is_the_latest(scored):
    assert _epoch(scored[0].checkpoint) == 5


def test_checkpoint_from_temporary_directory_was_copied(scored):
    # The reported directory was deleted after report(); the checkpoint lives on.
    assert os.path.isdir(scored[0].checkpoint.path)


def test_num_to_keep_keeps_the_best_scored(scored):
    kept = sorted(m["epoch"] for _, m in scored[0].best_checkpoints)
    assert kept == [2, 5]  # acc 0.9 and 0.95; 0.5, 0.3 and 0.8 were deleted


def test_best_checkpoints_hold_checkpoints_and_their_metrics(scored):
    for checkpoint, metrics in scored[0].best_checkpoints:
        assert isinstance(checkpoint, Checkpoint)
        assert _epoch(checkpoint) == metrics["epoch"]
        assert metrics["acc"] == ACCURACIES[metrics["epoch"] - 1]


def test_deleted_checkpoints_are_gone_from_disk(scored):
    kept = {os.path.realpath(c.path) for c, _ in scored[0].best_checkpoints}
    on_disk = {
        os.path.realpath(c.path) for c, _ in scored[0].best_checkpoints if os.path.isdir(c.path)
    }
    assert on_disk == kept and len(kept) == 2


def test_checkpoint_to_directory_copies_it(scored, tmp_path):
    target = scored[0].checkpoint.to_directory(str(tmp_path / "copy"))
    assert json.loads(Path(target, "checkpoint.json").read_text()) == {"epoch": 5}


def test_checkpoint_score_order_min(storage):
    grid = tune.Tuner(
        train_func,
        param_space={"epochs": 4},
        run_config=RunConfig(
            name="scored_min",
            storage_path=storage,
            checkpoint_config=CheckpointConfig(
                num_to_keep=1, checkpoint_score_attribute="acc", checkpoint_score_order="min"
            ),
        ),
    ).fit()
    kept = sorted(m["epoch"] for _, m in grid[0].best_checkpoints)
    # acc 0.3 (epoch 3) is the lowest; the latest (epoch 4) is kept so the trial can resume
    assert 3 in kept and len(kept) <= 2


def test_num_to_keep_without_score_keeps_the_latest(storage):
    grid = tune.Tuner(
        train_func,
        param_space={"epochs": 4},
        run_config=RunConfig(
            name="latest", storage_path=storage, checkpoint_config=CheckpointConfig(num_to_keep=2)
        ),
    ).fit()
    assert sorted(m["epoch"] for _, m in grid[0].best_checkpoints) == [3, 4]


# -- restoring after a failure: FailureConfig(max_failures) and get_checkpoint ------------------


@pytest.fixture(scope="module")
def retried(storage, tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("markers") / "failed_once")
    return tune.Tuner(
        train_func,
        param_space={"epochs": 5, "fail_once_at": marker},
        run_config=RunConfig(
            name="retried", storage_path=storage, failure_config=FailureConfig(max_failures=2)
        ),
    ).fit()


def test_failed_trial_is_retried_and_finishes(retried):
    assert retried.num_errors == 0
    assert retried[0].error is None


def test_retry_resumes_from_the_latest_checkpoint(retried):
    assert retried[0].metrics["start"] == 3  # get_checkpoint() gave epoch 2's checkpoint
    assert retried[0].metrics["epoch"] == 5


def test_training_iteration_continues_after_restore(retried):
    assert retried[0].metrics["training_iteration"] == 5


def test_no_retry_without_max_failures(storage, tmp_path):
    grid = tune.Tuner(
        train_func,
        param_space={"epochs": 5, "fail_once_at": str(tmp_path / "m")},
        run_config=RunConfig(name="no_retry", storage_path=storage),
    ).fit()
    assert grid.num_errors == 1
    assert grid[0].error is not None
    assert _epoch(grid[0].checkpoint) == 2  # the last checkpoint before the failure


# -- Tuner.restore -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interrupted(storage, tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("restore") / "failed_once")
    grid = tune.Tuner(
        train_func,
        param_space={"epochs": 5, "fail_once_at": marker},
        run_config=RunConfig(name="to_restore", storage_path=storage),
    ).fit()
    return grid


def test_errored_experiment_can_be_restored(interrupted):
    assert interrupted.num_errors == 1
    assert tune.Tuner.can_restore(interrupted.experiment_path)


def test_restore_with_resume_errored_continues_from_checkpoint(interrupted):
    tuner = tune.Tuner.restore(
        interrupted.experiment_path, trainable=train_func, resume_errored=True
    )
    grid = tuner.fit()
    assert grid.num_errors == 0
    assert grid[0].metrics["start"] == 3
    assert grid[0].metrics["training_iteration"] == 5


def test_can_restore_is_false_for_an_empty_directory(tmp_path):
    assert not tune.Tuner.can_restore(str(tmp_path))


# -- class trainables --------------------------------------------------------------------------


class MyTrainableClass(tune.Trainable):
    def setup(self, config):
        self.state = {"iter": 0}
        self.fail_marker = config.get("fail_once_at")

    def step(self):
        self.state["iter"] += 1
        if self.fail_marker and self.state["iter"] == 3 and not os.path.exists(self.fail_marker):
            Path(self.fail_marker).touch()
            raise RuntimeError("simulated failure")
        result = {"score": self.state["iter"] * 10, "restored_iter": self.restored}
        if self.state["iter"] in self.config.get("manual", ()):
            result[SHOULD_CHECKPOINT] = True
        return result

    restored = 0

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump(self.state, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            self.state = json.load(f)
        self.restored = self.state["iter"]


def _iters(result):
    return sorted(m["training_iteration"] for _, m in result.best_checkpoints)


@pytest.fixture(scope="module")
def periodic(storage):
    return tune.Tuner(
        MyTrainableClass,
        run_config=RunConfig(
            name="periodic",
            storage_path=storage,
            stop={"training_iteration": 5},
            checkpoint_config=CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True),
        ),
    ).fit()


def test_class_checkpoint_frequency(periodic):
    assert {2, 4} <= set(_iters(periodic[0]))


def test_class_checkpoint_at_end(periodic):
    assert _iters(periodic[0]) == [2, 4, 5]
    with periodic[0].checkpoint.as_directory() as d:
        assert json.loads(Path(d, "state.json").read_text()) == {"iter": 5}


def test_class_checkpoint_frequency_without_at_end(storage):
    grid = tune.Tuner(
        MyTrainableClass,
        run_config=RunConfig(
            name="freq_only",
            storage_path=storage,
            stop={"training_iteration": 5},
            checkpoint_config=CheckpointConfig(checkpoint_frequency=2),
        ),
    ).fit()
    # and at the end: a Tuner's default checkpoint_at_end for a class (Ray 2.60: [2, 4, 5])
    assert _iters(grid[0]) == [2, 4, 5]


def test_class_manual_checkpointing_with_should_checkpoint(storage):
    grid = tune.Tuner(
        MyTrainableClass,
        param_space={"manual": [1, 3]},
        run_config=RunConfig(name="manual", storage_path=storage, stop={"training_iteration": 4}),
    ).fit()
    assert _iters(grid[0]) == [1, 3, 4]  # the last: checkpoint_at_end's default (as Ray 2.60)
    with grid[0].checkpoint.as_directory() as d:
        assert json.loads(Path(d, "state.json").read_text()) == {"iter": 4}


def test_class_trainable_checkpoint_at_the_end_by_default(storage):
    # a Tuner sets checkpoint_at_end=True for a class trainable left at None (Ray 2.60's
    # tuner_internal; checked against Ray itself); tune.run does not
    grid = tune.Tuner(
        MyTrainableClass,
        run_config=RunConfig(name="none", storage_path=storage, stop={"training_iteration": 2}),
    ).fit()
    assert _iters(grid[0]) == [2]
    analysis = tune.run(
        MyTrainableClass, name="run", storage_path=storage, stop={"training_iteration": 2}
    )
    assert analysis.trials[0].checkpoint is None


def test_class_trainable_retry_calls_load_checkpoint(storage, tmp_path):
    grid = tune.Tuner(
        MyTrainableClass,
        param_space={"fail_once_at": str(tmp_path / "m")},
        run_config=RunConfig(
            name="class_retry",
            storage_path=storage,
            stop={"training_iteration": 5},
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
            failure_config=FailureConfig(max_failures=1),
        ),
    ).fit()
    assert grid.num_errors == 0
    assert grid[0].metrics["restored_iter"] == 2
    assert grid[0].metrics["score"] == 50


def test_class_trainable_num_to_keep(storage):
    grid = tune.Tuner(
        MyTrainableClass,
        run_config=RunConfig(
            name="class_keep",
            storage_path=storage,
            stop={"training_iteration": 4},
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1, num_to_keep=1),
        ),
    ).fit()
    assert _iters(grid[0]) == [4]


# -- what function trainables refuse ------------------------------------------------------------


def test_function_trainable_refuses_checkpoint_frequency():
    # Ray: "checkpoint_frequency and checkpoint_at_end will not work with Function API
    # checkpointing" -- a ValueError when the experiment is built.
    with pytest.raises(ValueError, match="checkpoint_frequency"):
        tune.Tuner(
            train_func,
            run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=2)),
        )


def test_function_trainable_refuses_checkpoint_at_end():
    with pytest.raises(ValueError, match="checkpoint_at_end"):
        tune.Tuner(
            train_func,
            run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_at_end=True)),
        )


def test_checkpoint_config_rejects_a_bad_num_to_keep():
    with pytest.raises(ValueError, match="num_to_keep"):
        tune.Tuner(
            train_func, run_config=RunConfig(checkpoint_config=CheckpointConfig(num_to_keep=0))
        )


def test_checkpoint_config_rejects_a_bad_order():
    with pytest.raises(ValueError, match="checkpoint_score_order"):
        tune.Tuner(
            train_func,
            run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_score_order="up")),
        )


# -- Checkpoint on its own ----------------------------------------------------------------------


def test_checkpoint_from_directory_path(tmp_path):
    (tmp_path / "model.txt").write_text("weights")
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    assert os.path.samefile(checkpoint.path, tmp_path)


def test_checkpoint_as_directory_reads_files(tmp_path):
    (tmp_path / "model.txt").write_text("weights")
    with Checkpoint.from_directory(str(tmp_path)).as_directory() as d:
        assert Path(d, "model.txt").read_text() == "weights"


def test_checkpoint_metadata_round_trip(tmp_path):
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    checkpoint.set_metadata({"epoch": 3})
    assert checkpoint.get_metadata() == {"epoch": 3}


def test_get_checkpoint_is_none_on_a_fresh_trial(storage):
    def trainable(config):
        train.report({"had_checkpoint": train.get_checkpoint() is not None})

    grid = tune.Tuner(trainable, run_config=RunConfig(name="fresh", storage_path=storage)).fit()
    assert grid[0].metrics["had_checkpoint"] is False
