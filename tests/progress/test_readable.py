"""Output that stays readable: values cut to a width, an 80-column live table that
shrinks only its config column, and why each trial ended (issue 17)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tunefleet.progress import view
from tunefleet.progress._text import short, why_ended
from tunefleet.progress.live import RunProgress, StatusReporter
from tunefleet.trial import FailureKind, FailureRecord, StopCause, Trial, TrialStatus

METRICS = {"val_loss": 0.25, "train_accuracy": 0.875, "grad_norm_max": 12.5}
BIG = "x" * 1_000_000  # a 1 MB config string


def _trial(i: int, status: TrialStatus, **config: Any) -> Trial:
    trial = Trial(
        trial_id=f"train_fn_3f2a1_{i:05d}",
        index=i,
        name=f"train_fn_{i}",
        config=config,
        resources={},
        path="",
    )
    trial.status = status
    trial.last_result = {"loss": 1.0 / (i + 1), **METRICS, "training_iteration": 4}
    trial.num_results = 4
    return trial


def _trials() -> list[Trial]:
    nested = {"layers": [{"width": 512, "act": "gelu" * 30}] * 20, "name": "resnet" * 40}
    trials = [
        _trial(i, TrialStatus.RUNNING, lr=0.1 * i, model=nested, blob=BIG, optimizer="adamw")
        for i in range(4)
    ]
    asha = _trial(4, TrialStatus.TERMINATED, lr=0.5)
    asha.stop_reason = StopCause.SCHEDULER.with_detail("ASHAScheduler")  # as the engine records
    budget = _trial(5, TrialStatus.TERMINATED, lr=0.6)
    budget.stop_reason = "time budget of 60s reached"
    done = _trial(6, TrialStatus.TERMINATED, lr=0.7)
    done.stop_reason = StopCause.COMPLETED
    criteria = _trial(7, TrialStatus.TERMINATED, lr=0.8)
    criteria.stop_reason = StopCause.STOP_CRITERIA
    failed = _trial(8, TrialStatus.ERROR, lr=0.9)
    failed.error = FailureRecord(kind=FailureKind.OOM, message="RSS 3.1 GiB > 2 GiB")
    return [*trials, asha, budget, done, criteria, failed]


def _reporter() -> StatusReporter:
    return StatusReporter(verbose=1, metric="loss", mode="min", out=io.StringIO())


def _render(width: int) -> str:
    snap = _reporter().snapshot(RunProgress(_trials(), elapsed_s=10.0, total=12, budget_s=None))
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(view.rich_view(snap))
    return console.export_text()


def test_at_80_columns_only_the_config_column_shrinks() -> None:
    text = _render(80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    header = next(line for line in lines if line.startswith("running"))
    for name in ["loss", *METRICS]:
        assert f" {name}" in header, header  # every metric name whole, on the header line
    rows = [line for line in lines if line.startswith("train_fn_3f2a1_0000")]
    assert [row.split()[0] for row in rows] == [f"train_fn_3f2a1_{i:05d}" for i in range(4)]
    for row in rows:  # one line per trial, its metrics whole, its config cut with "…"
        assert "0.875" in row and "12.5" in row
        assert row.rstrip().endswith("…"), row
    assert BIG[:100] not in text


def test_a_wide_terminal_shows_more_config_but_never_a_whole_big_value() -> None:
    narrow, wide = _render(80), _render(200)
    assert "lr=0.1, model={layers: [{width: 512" in wide and "lr=0.1" not in narrow
    assert all(len(line) <= 200 for line in wide.splitlines())
    assert BIG[:100] not in wide


def test_the_live_view_says_why_trials_ended() -> None:
    text = _render(120)
    ended = next(line for line in text.splitlines() if line.startswith("ended: "))
    for why in ("1 stopped by ASHAScheduler", "1 time budget of 60s reached", "1 completed"):
        assert why in ended, ended
    assert "1 stop criteria" in ended and "1 error: OOM" in ended
    snap = _reporter().snapshot(RunProgress(_trials(), elapsed_s=1.0, total=None, budget_s=None))
    assert "ended: " in view.html_view(snap)


def test_why_ended_names_the_scheduler_and_the_iteration() -> None:
    trials = {t.trial_id[-1]: t for t in _trials()}
    assert why_ended(trials["4"]) == "stopped by ASHAScheduler at iter 4"
    assert why_ended(trials["5"]) == "time budget of 60s reached"
    assert why_ended(trials["7"]) == "stop criteria"
    assert why_ended(trials["8"]) == "error: OOM"
    assert why_ended(trials["0"]) == ""  # still running


def test_values_are_cut_nested_ones_too() -> None:
    assert short(BIG) == "x" * 39 + "…"
    assert short({"a": {"b": [1, 2, BIG]}}).startswith("{a: {b: [1, 2, xxx")
    assert len(short({"a": {"b": [1, 2, BIG]}})) == 40
    assert short([list(range(1000))] * 1000, 50).endswith("…")
    assert short({"lr": 0.001, "n": 3}) == "{lr: 0.001, n: 3}"
    assert short(0.1 + 0.2) == "0.3"


def test_the_summary_and_trial_lines_cut_config_values() -> None:
    out = io.StringIO()
    reporter = StatusReporter(verbose=2, metric="loss", mode="min", out=out)
    trials = _trials()
    trials[0].status = TrialStatus.TERMINATED  # the best one, with the 1 MB value
    trials[0].stop_reason = StopCause.COMPLETED
    trials[0].last_result = {"loss": 0.0, "training_iteration": 4}
    reporter.update(RunProgress(trials, elapsed_s=1.0, total=None, budget_s=None))
    reporter.finish(trials, "/tmp/results/exp", None)
    text = out.getvalue()
    assert len(text) < 5000, len(text)
    config = next(line for line in text.splitlines() if line.startswith("  config: "))
    assert "blob=" + "x" * 39 + "…" in config and "optimizer=adamw" in config
    assert "(stopped by ASHAScheduler at iter 4)" in text
    assert "(completed)" in text
