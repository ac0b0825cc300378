"""End to end through real worker processes: results, stops, reuse, checkpoints, resources."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.store import StoreReader


def quadratic(config: dict[str, Any]) -> None:
    print(f"hello from {config['x']}")
    for step in range(5):
        tune.report({"loss": (config["x"] - 3) ** 2 + 1.0 / (step + 1), "step": step})


def test_fit_records_every_result_with_auto_metrics(storage: str) -> None:
    tuner = tune.Tuner(
        quadratic,
        param_space={"x": tune.uniform(-5, 5), "opt": tune.grid_search(["sgd", "adam"])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=3),
        run_config=tune.RunConfig(name="quad", storage_path=storage, verbose=0),
    )
    grid = tuner.fit()
    assert len(grid) == 6
    assert grid.num_terminated == 6 and grid.num_errors == 0
    assert sorted(r.config["opt"] for r in grid) == ["adam"] * 3 + ["sgd"] * 3
    for result in grid:
        assert metrics_of(result)["training_iteration"] == 5
        assert metrics_of(result)["done"] is True
        for key in ("time_total_s", "time_this_iter_s", "timestamp", "trial_id", "pid"):
            assert key in metrics_of(result)
        assert len(result.metrics_dataframe) == 5
        out = Path(result.path, "stdout.log").read_text()
        assert f"hello from {result.config['x']}" in out
    best = grid.get_best_result()
    assert metrics_of(best)["loss"] == min(metrics_of(r)["loss"] for r in grid)
    assert Path(grid.experiment_path, "experiment.db").exists()


def endless(config: dict[str, Any]) -> None:
    step = 0
    while True:
        step += 1
        tune.report(loss=1.0 / step)


def test_stop_dict_is_exact_and_workers_are_reused(storage: str) -> None:
    grid = tune.Tuner(
        endless,
        tune_config=tune.TuneConfig(num_samples=6, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, stop={"training_iteration": 7}, verbose=0),
    ).fit()
    assert [metrics_of(r)["training_iteration"] for r in grid] == [7] * 6
    assert all(len(r.metrics_dataframe) == 7 for r in grid)
    pids = {metrics_of(r)["pid"] for r in grid}
    assert len(pids) <= 2, "workers should be reused across trials"


def test_reuse_actors_false_gives_each_trial_a_new_process(storage: str) -> None:
    grid = tune.Tuner(
        quadratic,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(num_samples=4, reuse_actors=False),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len({metrics_of(r)["pid"] for r in grid}) == 4


def stopper_fn(trial_id: str, result: dict[str, Any]) -> bool:
    return bool(result["loss"] < 0.3)


def test_callable_stopper_and_time_budget(storage: str) -> None:
    grid = tune.Tuner(
        endless,
        tune_config=tune.TuneConfig(num_samples=2),
        run_config=tune.RunConfig(storage_path=storage, stop=stopper_fn, verbose=0),
    ).fit()
    for result in grid:
        assert metrics_of(result)["loss"] < 0.3
        assert metrics_of(result)["training_iteration"] == 4
    budget = tune.Tuner(
        endless,
        tune_config=tune.TuneConfig(num_samples=-1, time_budget_s=1.5),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(budget) >= 1 and budget.num_errors == 0


def with_checkpoints(config: dict[str, Any]) -> None:
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "step.txt").read_text())
    for step in range(start, 6):
        if step == 3 and tune.get_context().attempt == 0:
            raise RuntimeError("flaky failure at step 3")
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step.txt").write_text(str(step + 1))
            tune.report(
                {"loss": 10.0 - step, "step": step}, checkpoint=tune.Checkpoint.from_directory(d)
            )


def test_retry_resumes_from_latest_checkpoint(storage: str) -> None:
    grid = tune.Tuner(
        with_checkpoints,
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=1),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=1),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        ),
    ).fit()
    (result,) = list(grid)
    assert result.error is None
    df = result.metrics_dataframe
    # steps 0,1,2 then the failure; the retry starts from the checkpoint after step 2
    assert list(df["step"]) == [0, 1, 2, 3, 4, 5]
    assert metrics_of(result)["training_iteration"] == 6
    assert result.checkpoint is not None
    assert Path(result.checkpoint.path, "step.txt").read_text() == "6"
    kept = sorted(os.listdir(Path(result.path, "checkpoints")))
    assert kept == ["checkpoint_000005", "checkpoint_000006"]
    reader = StoreReader(grid.experiment_path)
    kinds = [e["kind"] for e in reader.events(metrics_of(result)["trial_id"])]
    assert "failed" in kinds and kinds.count("started") == 2


class Counter(tune.Trainable):
    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.value = 0
        self.rate = config["rate"]
        self.setups = getattr(self, "setups", 0) + 1

    def step(self) -> dict[str, Any]:
        self.value += self.rate
        return {"value": self.value, "pid": os.getpid()}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        Path(checkpoint_dir, "value.txt").write_text(str(self.value))
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.value = int(Path(checkpoint, "value.txt").read_text())

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.rate = new_config["rate"]
        self.value = 0
        return True


def test_class_trainable_checkpoint_freq_and_at_end(storage: str) -> None:
    grid = tune.run(
        Counter,
        config={"rate": tune.grid_search([1, 2])},
        stop={"training_iteration": 5},
        checkpoint_freq=2,
        checkpoint_at_end=True,
        storage_path=storage,
        verbose=0,
        metric="value",
        mode="max",
    )
    assert grid.best_config == {"rate": 2}
    assert grid.best_result["value"] == 10
    for trial in grid.trials:
        names = sorted(os.listdir(Path(trial.path, "checkpoints")))
        assert names == ["checkpoint_000002", "checkpoint_000004", "checkpoint_000005"]
    best_ckpt = grid.best_checkpoint
    assert best_ckpt is not None
    assert Path(best_ckpt.path, "value.txt").read_text() == "10"


def big_params(config: dict[str, Any], data: list[int], marker: str) -> None:
    Path(marker, f"{os.getpid()}").touch()
    tune.report(total=sum(data) * config["k"])


def test_with_parameters_and_resources(storage: str, tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    marker.mkdir()
    fn = tune.with_parameters(big_params, data=list(range(100_000)), marker=str(marker))
    grid = tune.Tuner(
        tune.with_resources(fn, {"cpu": 1, "slot": 1}),
        param_space={"k": tune.grid_search([1, 2, 3, 4])},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, resources={"slot": 1}),
    ).fit()
    assert sorted(metrics_of(r)["total"] for r in grid) == [
        sum(range(100_000)) * k for k in (1, 2, 3, 4)
    ]
    # one custom "slot": trials ran one at a time, so one reused worker ran them all
    assert len(os.listdir(marker)) == 1


def test_trial_that_can_never_fit_is_rejected_before_running(storage: str) -> None:
    with pytest.raises(ValueError, match=r"needs cpu=64 but the machine has"):
        tune.Tuner(
            tune.with_resources(quadratic, {"cpu": 64}),
            param_space={"x": 1.0},
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        ).fit()


def report_gpu(config: dict[str, Any]) -> None:
    tune.report(gpus=os.environ.get("CUDA_VISIBLE_DEVICES", ""), wait=0)
    import time

    time.sleep(0.5)


def test_fractional_gpus_share_devices(storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend two GPUs are visible: assignment logic and CUDA_VISIBLE_DEVICES are real.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    grid = tune.Tuner(
        tune.with_resources(report_gpu, {"cpu": 0.5, "gpu": 0.5}),
        tune_config=tune.TuneConfig(num_samples=4),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, resources={"cpu": 4}),
    ).fit()
    devices = sorted(metrics_of(r)["gpus"] for r in grid)
    assert devices == ["0", "0", "1", "1"]


def test_declaring_more_gpus_than_detected_gives_made_up_ids(
    storage: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """RunConfig.resources={"gpu": 2} with one GPU visible: trials are scheduled on
    ids 0 and 1 (Ray's logical GPUs) with a warning, instead of waiting forever."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with caplog.at_level("WARNING", logger="tunefleet"):
        grid = tune.Tuner(
            tune.with_resources(report_gpu, {"cpu": 0.5, "gpu": 1}),
            tune_config=tune.TuneConfig(num_samples=2),
            run_config=tune.RunConfig(
                storage_path=storage, verbose=0, resources={"cpu": 2, "gpu": 2}
            ),
        ).fit()
    assert sorted(metrics_of(r)["gpus"] for r in grid) == ["0", "1"]
    assert "resources['gpu']=2 but 1 GPU(s) were detected" in caplog.text
    with pytest.raises(ValueError, match=r"resources\['gpu'\]=0.5 is not valid"):
        tune.Tuner(
            report_gpu,
            run_config=tune.RunConfig(storage_path=storage, verbose=0, resources={"gpu": 0.5}),
        ).fit()


def test_tune_run_rejects_unknown_keywords(storage: str) -> None:
    with pytest.raises(TypeError, match=r"unknown keyword argument 'num_sample'.*'num_samples'"):
        tune.run(quadratic, num_sample=3, storage_path=storage)


def test_report_outside_a_trial_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="outside a tunefleet trial"):
        tune.report({"loss": 1.0})
