"""Resource usage shown: `tunefleet show`, the live table's optional column, the
dashboard's trials table and the report (each result's ``resources``)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import tunefleet as tune
from tunefleet.cli import main
from tunefleet.dashboard._data import experiment_view
from tunefleet.progress import view
from tunefleet.progress._text import usage_of
from tunefleet.progress.live import RunProgress, StatusReporter
from tunefleet.progress.reporters import SHOW_RESOURCES_ENV, CLIReporter
from tunefleet.store import ExperimentStore
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

MiB = 1 << 20


def train(config: dict[str, Any]) -> None:
    tune.report(loss=config["x"])


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of two trials, and a trial killed for memory written to the store."""
    root = tmp_path_factory.mktemp("usage")
    tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1.0, 2.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(root), name="run", verbose=0),
    ).fit()
    with ExperimentStore(root / "oom") as store:
        store.write_meta({"name": "oom", "metric": "loss", "mode": "min", "status": "finished"})
        trial = _trial(0, TrialStatus.ERROR, {"cpu_percent": 95.0, "peak_rss_mb": 300.0})
        trial.error = FailureRecord(
            kind=FailureKind.OOM,
            message="used 1.9 GiB of 1.5 GiB",
            peak_memory=1900 * MiB,
            memory_limit=1536 * MiB,
        )
        store.add_trial(trial)
        store.add_result(trial.trial_id, trial.last_result)
        store.update_trial(trial)
    return root


def _trial(i: int, status: TrialStatus, usage: dict[str, float] | None) -> Trial:
    trial = Trial(
        trial_id=f"train_fn_3f2a1_{i:05d}",
        index=i,
        name=f"train_fn_{i}",
        config={"lr": 0.1 * i, "model": "resnet" * 30},
        resources={},
        path="",
    )
    trial.status = status
    trial.last_result = {"loss": 0.25, "val_loss": 0.5, "train_accuracy": 0.875}
    trial.last_result.update(training_iteration=4, grad_norm_max=12.5)
    if usage is not None:
        trial.last_result["resources"] = usage
    trial.num_results = 4
    return trial


def _show(storage: Path, name: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["show", name, "--storage", str(storage)]) == 0
    return capsys.readouterr().out


def test_show_has_cpu_and_peak_rss(storage: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _show(storage, "run", capsys)
    header = next(line for line in out.splitlines() if line.startswith("TRIAL"))
    assert "CPU%" in header and "PEAK RSS" in header and "GPU PEAK" not in header
    rows = [line for line in out.splitlines() if "TERMINATED" in line]
    assert len(rows) == 2 and all(re.search(r"\d+%\s+\d+ MiB", row) for row in rows), out


def test_a_trial_killed_for_memory_shows_its_records_peak_and_limit(
    storage: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _show(storage, "oom", capsys)
    assert "95%" in out and "1.86 GiB / 1.50 GiB" in out, out  # not the older 300 MiB


def test_the_dashboard_and_the_report_have_the_columns(
    storage: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = experiment_view(storage / "run")
    for row in data["trials"]:
        assert row["resources"]["peak_rss_mb"] > 0 and row["resources"]["cpu_percent"] >= 0
    assert not any(k.startswith("resources/") for k in data["metric_keys"])  # own columns
    oom = experiment_view(storage / "oom")["trials"][0]["resources"]
    assert oom["peak_rss_mb"] == 1900 and oom["memory_limit_mb"] == 1536
    out = tmp_path / "report.html"
    assert main(["report", "run", "--storage", str(storage), "--out", str(out)]) == 0
    html = out.read_text()
    assert '"peak_rss_mb":' in html and '"cpu_percent":' in html
    assert '"Peak RSS"' in html and "function usageText" in html  # the table's columns


def _render(snap: view.Snapshot, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(view.rich_view(snap))
    return console.export_text()


def _snapshot(reporter: CLIReporter | None) -> view.Snapshot:
    big = {"cpu_percent": 1234.0, "peak_rss_mb": 1536.0, "memory_limit_mb": 2048.0}
    trials = [
        _trial(0, TrialStatus.RUNNING, big),
        _trial(1, TrialStatus.RUNNING, {"cpu_percent": 87.0, "peak_rss_mb": 300.0}),
        _trial(2, TrialStatus.RUNNING, None),  # an older run's results: no usage
    ]
    status = StatusReporter(
        verbose=1, metric="loss", mode="min", out=io.StringIO(), progress_reporter=reporter
    )
    return status.snapshot(RunProgress(trials, elapsed_s=1.0, total=3, budget_s=None))


def test_the_live_table_has_no_resources_column_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SHOW_RESOURCES_ENV, raising=False)
    assert "cpu rss" not in _render(_snapshot(None))
    assert "cpu rss" not in _render(_snapshot(CLIReporter(show_resources=False)))


@pytest.mark.parametrize("how", ["reporter", "env"])
def test_the_live_resources_column_at_80_columns(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = CLIReporter(show_resources=True) if how == "reporter" else None
    if how == "env":
        monkeypatch.setenv(SHOW_RESOURCES_ENV, "1")
    text = _render(_snapshot(reporter))
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    header = next(line for line in lines if line.startswith("running"))
    for name in ["loss", "val_loss", "train_accuracy", "cpu rss"]:  # one picked metric fewer
        assert f" {name}" in header, header  # every column name whole
    rows = {line.split()[0]: line for line in lines if line.startswith("train_fn_3f2a1_")}
    assert sorted(rows) == [f"train_fn_3f2a1_{i:05d}" for i in range(3)], text
    assert "1234% 1.50 GiB" in rows["train_fn_3f2a1_00000"]
    assert "87% 300 MiB" in rows["train_fn_3f2a1_00001"]
    html = view.html_view(_snapshot(reporter))
    assert "<th>cpu rss</th>" in html and "87% 300 MiB" in html


def test_show_resources_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match=r"CLIReporter\(show_resources='yes'\): must be True"):
        CLIReporter(show_resources="yes")  # type: ignore[arg-type]


def test_usage_of_a_gpu_oom_takes_the_records_gpu_peak() -> None:
    trial = _trial(0, TrialStatus.ERROR, {"cpu_percent": 50.0, "gpu_peak_mb": 100.0})
    trial.error = FailureRecord(kind=FailureKind.GPU_OOM, message="", peak_memory=8 * 1024 * MiB)
    assert usage_of(trial) == {"cpu_percent": 50.0, "gpu_peak_mb": 8192.0}
    assert json.dumps(usage_of(_trial(1, TrialStatus.RUNNING, None))) == "{}"
