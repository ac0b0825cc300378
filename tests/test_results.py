"""ResultGrid, Result, ExperimentAnalysis and TrialError, read from a store written directly."""

from __future__ import annotations

import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tunefleet
from tunefleet.checkpoint import Checkpoint
from tunefleet.results import ExperimentAnalysis, Result, ResultGrid, TrialError
from tunefleet.store import ExperimentStore
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

PACKAGE_ROOT = str(Path(tunefleet.__file__).resolve().parent.parent)

# Loss curves (mode "min") built so that each scope has a different winner:
#   last: A (1.0)   avg: C (2.0)   last-5-avg: E (1.5)   last-10-avg: F (1.8)   all: D (0.1)
CURVES: dict[str, list[float]] = {
    "A": [20.0] * 11 + [1.0],
    "C": [2.0] * 12,
    "D": [0.1] + [30.0] * 11,
    "E": [50.0] * 7 + [1.5] * 5,
    "F": [100.0] * 2 + [1.8] * 10,
    "G": [5.0, -math.inf],  # diverged: only wins when non-finite values count
    "H": [math.nan, math.nan],
}


def write_trial(
    store: ExperimentStore,
    exp: Path,
    index: int,
    losses: list[float],
    *,
    status: TrialStatus = TrialStatus.TERMINATED,
    config: dict[str, Any] | None = None,
    checkpoints: tuple[int, ...] = (),
    deleted: tuple[int, ...] = (),
    error: FailureRecord | None = None,
    extra: dict[str, Any] | None = None,
) -> Trial:
    trial_id = f"t{index:04d}"
    trial = Trial(
        trial_id=trial_id,
        index=index,
        name=f"train_{trial_id}",
        config=config if config is not None else {"lr": 10.0**-index, "net": {"width": 8 * index}},
        resources={"cpu": 1.0},
        path=str(exp / "trials" / trial_id),
    )
    store.add_trial(trial)
    for it, loss in enumerate(losses, start=1):
        res = {"training_iteration": it, "loss": loss, "acc": 1.0 - it / 100, **(extra or {})}
        store.add_result(trial_id, res)
        trial.last_result, trial.num_results = res, it
        if it in checkpoints:
            path = os.path.join(trial.path, "checkpoints", f"checkpoint_{it:06d}")
            store.add_checkpoint(trial_id, it, path, res)
            trial.latest_checkpoint, trial.checkpoint_iteration = path, it
            if it in deleted:
                store.mark_checkpoint_deleted(path)
    trial.status, trial.error = status, error
    store.update_trial(trial)
    return trial


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    """An experiment with the curves above, one trial that failed and one still pending."""
    path = tmp_path / "results" / "scopes"
    with ExperimentStore(path) as store:
        store.write_meta({"name": "scopes", "metric": "loss", "mode": "min", "status": "finished"})
        for index, losses in enumerate(CURVES.values()):
            write_trial(store, path, index, losses, checkpoints=(1, 2), deleted=(1,))
        failure = FailureRecord(
            kind=FailureKind.EXCEPTION,
            message="boom",
            exception_type="ValueError",
            traceback="Traceback (most recent call last):\n  ...\nValueError: boom",
            iteration=1,
        )
        failed = write_trial(store, path, 7, [], status=TrialStatus.ERROR, error=failure)
        failed.last_result = {"training_iteration": 1, "accuracy": 0.3}  # never reported loss
        store.add_result("t0007", failed.last_result)
        write_trial(store, path, 8, [], status=TrialStatus.PENDING)
    return path


def trial_letter(result_trial_id: str) -> str:
    return list(CURVES)[int(result_trial_id[1:])]


@pytest.mark.parametrize(
    ("scope", "mode", "winner"),
    [
        ("last", "min", "A"),
        ("avg", "min", "C"),
        ("last-5-avg", "min", "E"),
        ("last-10-avg", "min", "F"),
        ("all", "min", "D"),
        ("last", "max", "D"),
        ("all", "max", "F"),
    ],
)
def test_every_scope_picks_its_winner(exp: Path, scope: str, mode: str, winner: str) -> None:
    grid = ResultGrid(exp)
    best = grid.get_best_result(metric="loss", mode=mode, scope=scope)
    assert trial_letter(best.trial_id) == winner
    trial = ExperimentAnalysis(exp).get_best_trial("loss", mode, scope)
    assert trial is not None and trial_letter(trial.trial_id) == winner


def test_nan_and_inf_are_filtered_unless_asked(exp: Path) -> None:
    grid = ResultGrid(exp)
    assert trial_letter(grid.get_best_result().trial_id) == "A"
    assert trial_letter(grid.get_best_result(filter_nan_and_inf=False).trial_id) == "G"  # -inf
    assert trial_letter(grid.get_best_result(scope="all").trial_id) == "D"
    assert trial_letter(grid.get_best_result(scope="all", filter_nan_and_inf=False).trial_id) == "G"
    # NaN never wins, even unfiltered, whatever the trial order.
    assert trial_letter(grid.get_best_result(mode="max", filter_nan_and_inf=False).trial_id) == "D"


def test_defaults_come_from_the_grid_then_the_experiment(exp: Path) -> None:
    assert trial_letter(ResultGrid(exp, mode="max").get_best_result().trial_id) == "D"
    # G and H tie on acc (both stopped at iteration 2): the lower index wins.
    assert ResultGrid(exp, metric="acc", mode="max").get_best_result().trial_id == "t0005"


def test_bad_scope_and_mode_are_named(exp: Path) -> None:
    grid = ResultGrid(exp)
    with pytest.raises(ValueError, match=r"scope='bogus' is not valid.*'last-5-avg'.*'all'"):
        grid.get_best_result(scope="bogus")
    with pytest.raises(ValueError, match=r"mode='minimum' is not valid; choose 'min' or 'max'"):
        grid.get_best_result(mode="minimum")


def test_no_metric_anywhere_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "nometric"
    with ExperimentStore(path) as store:  # two trials: a single one is the best (Ray)
        write_trial(store, path, 0, [1.0])
        write_trial(store, path, 1, [2.0])
    with pytest.raises(ValueError, match=r"no metric given.*TuneConfig\(metric="):
        ResultGrid(path).get_best_result()
    with pytest.raises(ValueError, match=r"no mode given for metric 'loss'"):
        ResultGrid(path).get_best_result(metric="loss")
    with pytest.raises(ValueError, match="no metric given"):
        _ = ExperimentAnalysis(path).best_config


def test_one_trial_is_the_best_without_a_metric_but_bad_values_are_named(tmp_path: Path) -> None:
    path = tmp_path / "one"
    with ExperimentStore(path) as store:
        write_trial(store, path, 0, [1.0])
    grid = ResultGrid(path)
    assert grid.get_best_result().trial_id == grid[0].trial_id  # Ray: no metric needed
    assert grid.get_best_result(metric="nothing", mode="max").trial_id == grid[0].trial_id
    with pytest.raises(ValueError, match=r"mode='minimum' is not valid; choose 'min' or 'max'"):
        grid.get_best_result(mode="minimum")
    with pytest.raises(ValueError, match=r"scope='bogus' is not valid"):
        grid.get_best_result(scope="bogus")
    assert ExperimentAnalysis(path).get_best_trial() is not None


def test_a_metric_no_trial_reported_is_named_with_the_ones_that_exist(exp: Path) -> None:
    with pytest.raises(
        RuntimeError,
        match=r"no trial reported 'los'\. Did you mean 'loss'\? Metrics reported: acc, accuracy",
    ):
        ResultGrid(exp).get_best_result(metric="los")


def test_only_nan_values_suggest_turning_off_the_filter(tmp_path: Path) -> None:
    path = tmp_path / "nan"
    with ExperimentStore(path) as store:
        store.write_meta({"metric": "loss", "mode": "min"})
        write_trial(store, path, 0, [math.nan])
        write_trial(store, path, 1, [math.inf])
    with pytest.raises(RuntimeError, match=r"NaN or infinite \(2 trial\(s\).*filter_nan_and_inf"):
        ResultGrid(path).get_best_result()
    assert ResultGrid(path).get_best_result(filter_nan_and_inf=False).trial_id == "t0001"


def test_no_trials(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    with ExperimentStore(path) as store:
        store.write_meta({"metric": "loss", "mode": "min"})
    grid = ResultGrid(path)
    assert len(grid) == 0 and grid.errors == [] and list(grid) == []
    with pytest.raises(RuntimeError, match="the experiment has no trials"):
        grid.get_best_result()


def test_grid_lists_results_in_trial_order(exp: Path) -> None:
    grid = ResultGrid(exp)
    assert len(grid) == 9
    assert [r.trial_id for r in grid] == [f"t{i:04d}" for i in range(9)]
    assert grid[-1].trial_id == "t0008" and grid[-1].status == "PENDING"
    assert grid[-1].metrics == {} and grid[-1].checkpoint is None  # Ray: {} if nothing reported
    assert grid.num_terminated == 7 and grid.num_errors == 1
    assert grid.experiment_path == str(exp.resolve())
    with pytest.raises(IndexError):
        grid[9]


def test_result_fields(exp: Path) -> None:
    result = ResultGrid(exp)[0]
    assert result.metrics["loss"] == 1.0 and result.metrics["config"] == result.config
    assert result.config == {"lr": 1.0, "net": {"width": 0}}
    assert result.path == str(exp.resolve() / "trials" / "t0000")
    assert result.checkpoint == Checkpoint(
        os.path.join(result.path, "checkpoints", "checkpoint_000002")
    )
    ((ckpt, metrics),) = result.best_checkpoints  # checkpoint 1 was deleted
    assert ckpt == result.checkpoint and metrics["training_iteration"] == 2
    assert result.error is None and result.status == "TERMINATED"
    frame = result.metrics_dataframe
    assert list(frame["loss"]) == CURVES["A"]
    assert {"training_iteration", "loss", "acc"} <= set(frame.columns)


def test_best_checkpoints_are_read_when_first_asked_for(exp: Path) -> None:
    grid = ResultGrid(exp)
    experiment = grid._experiment
    assert experiment._checkpoints is None  # results nobody asks about cost no reading
    sent = pickle.loads(pickle.dumps(grid[0]))  # a result pickled before the read
    ((ckpt, metrics),) = sent.best_checkpoints
    assert ckpt == sent.checkpoint and metrics["training_iteration"] == 2
    assert grid[0].best_checkpoints == [(ckpt, metrics)] and grid[1].best_checkpoints
    assert experiment._checkpoints is not None and "t0000" in experiment._checkpoints
    fields = {"metrics": {}, "config": {}, "checkpoint": None, "error": None, "path": "/p"}
    given = Result(**fields, best_checkpoints=[(ckpt, {})], status="TERMINATED", trial_id="x")
    assert given.best_checkpoints == [(ckpt, {})]  # as given, nothing read
    alone = Result(**fields, best_checkpoints=None, status="TERMINATED", trial_id="x")
    assert alone.best_checkpoints == []  # no experiment to read them from
    with pytest.raises(TypeError, match="best_checkpoints"):
        Result(**fields, status="TERMINATED", trial_id="x")  # mypy sees a default here


def test_best_checkpoints_of_a_deleted_experiment_are_none_with_a_warning(
    exp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    grid = ResultGrid(exp)
    result = grid[0]
    shutil.rmtree(exp)  # after the results were read, before their checkpoints were
    with caplog.at_level("WARNING", logger="tunefleet"):
        assert result.best_checkpoints == []  # none still on disk, as the field says
        assert grid[1].best_checkpoints == []
    (warning,) = [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()]
    assert str(exp.resolve()) in warning and "best_checkpoints is []" in warning
    assert result.metrics["loss"] == 1.0 and result.checkpoint is not None  # kept as read


def test_errors_carry_the_failure(exp: Path) -> None:
    grid = ResultGrid(exp)
    (error,) = grid.errors
    assert isinstance(error, TrialError) and error.trial_id == "t0007"
    assert str(error) == "EXCEPTION at iteration 1: ValueError: boom"
    assert error.kind is FailureKind.EXCEPTION
    assert error.traceback is not None and error.traceback.endswith("ValueError: boom")
    assert grid[7].error is error
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.trial_id == "t0007"


def test_get_dataframe_last_rows_and_best_rows(exp: Path) -> None:
    grid = ResultGrid(exp)
    frame = grid.get_dataframe()
    assert len(frame) == 9
    assert list(frame.columns[-4:]) == ["config/lr", "config/net/width", "trial_id", "logdir"]
    assert frame.loc[0, "loss"] == 1.0 and frame.loc[2, "loss"] == 30.0
    assert frame.loc[2, "config/net/width"] == 16
    assert frame.loc[7, "accuracy"] == 0.3
    assert frame.loc[0, "logdir"] == grid[0].path

    best = grid.get_dataframe(filter_metric="loss", filter_mode="min")
    assert best.loc[2, "loss"] == 0.1 and best.loc[2, "training_iteration"] == 1
    assert best.loc[6, "training_iteration"] == 2  # all NaN: the last row
    with pytest.raises(ValueError, match="give both filter_metric and filter_mode"):
        grid.get_dataframe(filter_metric="loss")


def test_experiment_analysis(exp: Path) -> None:
    analysis = ExperimentAnalysis(exp)
    assert analysis.default_metric == "loss" and analysis.default_mode == "min"
    best = analysis.best_trial
    assert best is not None and best.trial_id == "t0000"
    assert analysis.best_config == {"lr": 1.0, "net": {"width": 0}}
    assert analysis.best_result["loss"] == 1.0
    assert analysis.best_logdir == best.path
    assert analysis.best_checkpoint == Checkpoint(
        os.path.join(analysis.best_logdir, "checkpoints", "checkpoint_000002")
    )
    assert analysis.get_best_config(scope="all") == analysis.trials[2].config
    assert len(analysis.trials) == 9
    # Keyed by trial id, and {} for a trial that reported nothing, as in Ray Tune 2.x.
    assert analysis.results["t0004"]["loss"] == 1.8 and analysis.results["t0008"] == {}
    configs = analysis.get_all_configs()
    assert configs["t0001"] == {"lr": 0.1, "net": {"width": 8}}
    assert analysis.get_all_configs(prefix=True)["t0001"]["config/net/width"] == 8

    frames = analysis.trial_dataframes
    assert set(frames) == {t.trial_id for t in analysis.trials}
    assert len(frames["t0004"]) == 12 and frames["t0008"].empty
    assert analysis.results_df.loc["t0002", "loss"] == 30.0
    assert analysis.dataframe(metric="loss", mode="min").loc[2, "loss"] == 0.1
    assert list(analysis.best_dataframe["loss"]) == CURVES["A"]
    assert analysis.best_result_df.loc["t0000", "loss"] == 1.0


def test_best_checkpoint_of_a_trial(tmp_path: Path) -> None:
    path = tmp_path / "ckpts"
    with ExperimentStore(path) as store:
        write_trial(store, path, 0, [3.0, 1.0, 2.0, math.nan], checkpoints=(1, 2, 3, 4))
        write_trial(store, path, 1, [1.0])
    analysis = ExperimentAnalysis(path, default_metric="loss", default_mode="min")
    trial = analysis.trials[0]
    best = analysis.get_best_checkpoint(trial)
    assert best is not None and best.path.endswith("checkpoint_000002")
    by_max = analysis.get_best_checkpoint("t0000", metric="loss", mode="max")
    assert by_max is not None and by_max.path.endswith("checkpoint_000001")
    latest = ExperimentAnalysis(path).get_best_checkpoint(trial.path)  # no metric: the latest
    assert latest is not None and latest.path.endswith("checkpoint_000004")
    assert analysis.get_best_checkpoint("t0001") is None  # no checkpoints
    with pytest.raises(KeyError, match="t0009"):
        analysis.get_best_checkpoint("t0009")


def test_nested_metrics_are_reachable_with_slashes(tmp_path: Path) -> None:
    path = tmp_path / "nested"
    with ExperimentStore(path) as store:
        write_trial(store, path, 0, [1.0], extra={"val": {"loss": 3.0}})
        write_trial(store, path, 1, [1.0], extra={"val": {"loss": 2.0}})
    grid = ResultGrid(path, metric="val/loss", mode="min")
    assert grid.get_best_result().trial_id == "t0001"
    assert grid.get_dataframe().loc[1, "val/loss"] == 2.0


def test_reads_a_running_experiment(tmp_path: Path) -> None:
    path = tmp_path / "running"
    store = ExperimentStore(path)
    store.write_meta({"metric": "loss", "mode": "min", "status": "running"})
    write_trial(store, path, 0, [3.0, 2.0], status=TrialStatus.RUNNING)
    store.flush()
    write_trial(store, path, 1, [0.5])  # not flushed yet: invisible
    grid = ResultGrid(path)
    assert len(grid) == 1 and grid[0].status == "RUNNING"
    assert grid.get_best_result().trial_id == "t0000"
    store.flush()
    assert ResultGrid(path).get_best_result().trial_id == "t0001"
    store.close()


def test_a_moved_experiment_and_lookup_by_name(
    exp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.makedirs(exp / "trials" / "t0000" / "checkpoints" / "checkpoint_000002")
    storage = tmp_path / "elsewhere"
    shutil.copytree(exp, storage / "copied")  # the original stays: paths point into the copy
    monkeypatch.setenv("TUNEFLEET_STORAGE", str(storage))
    result = ResultGrid("copied")[0]
    assert result.path == str((storage / "copied" / "trials" / "t0000").resolve())
    assert result.checkpoint is not None and result.checkpoint.path.startswith(result.path)


def test_pandas_is_optional(exp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, tunefleet.results; print('pandas' in sys.modules)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": PACKAGE_ROOT},
        check=True,
    )
    assert proc.stdout.strip() == "False"
    grid = ResultGrid(exp)
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` fail
    assert grid.get_best_result().trial_id == "t0000"  # needs no pandas
    with pytest.raises(ImportError, match=r"pandas is needed for ResultGrid.get_dataframe\(\)"):
        grid.get_dataframe()
    with pytest.raises(ImportError, match=r"pip install 'tunefleet\[pandas\]'"):
        _ = grid[0].metrics_dataframe


def test_analysis_returns_none_where_ray_does(exp: Path, caplog: pytest.LogCaptureFixture) -> None:
    analysis = ExperimentAnalysis(exp)
    assert analysis.get_best_trial(metric="los", mode="min") is None
    assert "Did you mean 'loss'?" in caplog.text  # the warning says why
    assert analysis.get_best_config(metric="los", mode="min") is None
    with pytest.raises(ValueError, match=r"scope='bad' is not valid"):
        analysis.get_best_trial(scope="bad")
    with pytest.raises(ValueError, match=r"default_mode='best' is not valid"):
        ExperimentAnalysis(exp, default_mode="best")
    missing = ExperimentAnalysis(exp, default_metric="f1", default_mode="max")
    assert missing.best_trial is None and missing.best_config is None
    with pytest.raises(ValueError, match="no trial reported 'f1'"):
        _ = missing.best_result  # Ray fails here with an AttributeError on None


def test_one_trial_is_the_best_as_in_ray(tmp_path: Path) -> None:
    path = tmp_path / "one"
    with ExperimentStore(path) as store:
        write_trial(store, path, 0, [], status=TrialStatus.ERROR)
    only = ExperimentAnalysis(path).get_best_trial()  # Ray: before looking at the metric
    assert only is not None and only.trial_id == "t0000"
    assert ResultGrid(path).get_best_result(metric="loss", mode="min").metrics == {}
    # Ray: the only trial is returned before the metric and mode are looked at
    assert ResultGrid(path).get_best_result(metric="loss").trial_id == "t0000"
    with ExperimentStore(path) as store:
        write_trial(store, path, 1, [1.0])
    with pytest.raises(ValueError, match="no metric given"):
        ExperimentAnalysis(path).get_best_trial()


def test_grid_wraps_an_analysis_and_keeps_its_defaults(exp: Path) -> None:
    analysis = ExperimentAnalysis(exp, default_metric="acc", default_mode="max")
    grid = ResultGrid(analysis)
    assert len(grid) == 9 and grid.experiment_path == analysis.experiment_path
    assert grid.get_best_result().trial_id == "t0005"  # acc, as the analysis says
    subset = ExperimentAnalysis(exp, trials=analysis.trials[:2])
    assert [r.trial_id for r in ResultGrid(subset)] == ["t0000", "t0001"]


def test_a_builtin_error_type_is_kept(exp: Path) -> None:
    (error,) = ResultGrid(exp).errors
    assert isinstance(error, ValueError) and isinstance(error, TrialError)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ValueError) and isinstance(copy, TrialError)
    assert copy.trial_id == "t0007"
    odd = FailureRecord(FailureKind.EXCEPTION, "x", exception_type="MyOwnError")
    assert type(TrialError.of(odd, "t1")) is TrialError  # not a built-in: TrialError only
    crash = FailureRecord(FailureKind.CRASH, "killed", signal="SIGKILL")
    assert type(TrialError.of(crash, "t1")) is TrialError


def test_result_from_path(exp: Path) -> None:
    grid = ResultGrid(exp)
    os.makedirs(grid[3].path)
    again = Result.from_path(grid[3].path)
    assert again.trial_id == "t0003" and again.metrics == grid[3].metrics
    with pytest.raises(FileNotFoundError, match="no trial in that directory"):
        Result.from_path(exp / "trials")
    with pytest.raises(FileNotFoundError, match="no experiment database"):
        Result.from_path("/")


def test_checkpoints_of_a_trial_by_id_path_or_name(tmp_path: Path) -> None:
    path = tmp_path / "ckpts2"
    with ExperimentStore(path) as store:
        write_trial(store, path, 0, [3.0, 1.0], checkpoints=(1, 2))
    analysis = ExperimentAnalysis(path)
    pairs = analysis.get_trial_checkpoints_paths("train_t0000", metric="loss")
    assert [(os.path.basename(p), v) for p, v in pairs] == [
        ("checkpoint_000001", 3.0),
        ("checkpoint_000002", 1.0),
    ]
    last = analysis.get_last_checkpoint("t0000")
    assert last is not None and last.path.endswith("checkpoint_000002")
    assert analysis.fetch_trial_dataframes()["t0000"]["loss"].tolist() == [3.0, 1.0]
