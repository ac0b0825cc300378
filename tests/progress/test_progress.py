"""The live progress view: a rich table redrawn in place on a real pseudo-terminal, plain
lines in a pipe, an HTML table updated in place in a real Jupyter kernel, and the
snapshot it is all drawn from."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tunefleet.progress import view as view
from tunefleet.progress.live import RunProgress, StatusReporter
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

# A run with a failing trial, a secret in the config and a known total (12 trials).
SCRIPT = textwrap.dedent(
    """
    import sys, time
    import tunefleet as tune

    def train(config):
        for i in range(12):
            if config["x"] > 8 and i == 2:
                raise ValueError("x too large")
            tune.report({"loss": (config["x"] - 3) ** 2 / (i + 1), "acc": i / 12})
            time.sleep(0.05)

    tune.Tuner(
        train,
        param_space={
            "x": tune.grid_search([1.0, 2.5, 3.0, 9.0, 4.0, 5.0]),
            "api_key": "sk-progress-secret-42",
        },
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2,
                                    max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=int(sys.argv[2])),
    ).fit()
    """
)
SECRET = "sk-progress-secret-42"
CURSOR_UP = "\x1b[1A"


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "run.py"
    path.write_text(SCRIPT)
    return path


def _run_in_pty(argv: list[str], timeout: float = 120.0) -> str:
    """Run `argv` with a real pseudo-terminal as its stdout and stderr; return all it wrote."""
    parent, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env)
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([parent], [], [], 0.5)
            if ready:
                try:
                    data = os.read(parent, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(parent)
    return b"".join(chunks).decode(errors="replace")


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


@pytest.mark.slow
def test_terminal_gets_a_table_redrawn_in_place(tmp_path: Path) -> None:
    out = _run_in_pty([sys.executable, str(_script(tmp_path)), str(tmp_path / "r"), "2"])
    text = _plain(out)
    # Redrawn in place: the cursor goes back up over the previous table.
    assert out.count(CURSOR_UP) >= 3
    # The table: counts, the progress bar's total, the best trial, running trials with
    # their metrics, the failure with its cause.
    assert "12/12 trials" in text
    assert re.search(r"best \S+_0000[02]  loss=0(\.0+)? ", text), text[-2000:]
    assert re.search(r"running\s+iter\s+loss\s+acc\s+config", text)
    assert "failed" in text and "ValueError: x too large" in text
    # verbose=2: a line per trial end, above the table.
    assert text.count("TERMINATED: loss=") == 10
    # The summary after the table, and never the secret.
    assert "Experiment finished in" in text and "10 TERMINATED" in text and "2 ERROR" in text
    assert SECRET not in out


@pytest.mark.slow
def test_a_pipe_gets_plain_lines_without_escapes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(_script(tmp_path)), str(tmp_path / "r"), "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout and "\r" not in proc.stdout
    status = [line for line in proc.stdout.splitlines() if line.startswith("[0:")]
    # One line at the start, then one per 30 s at most: this run takes a few seconds.
    assert 1 <= len(status) <= 2, proc.stdout
    assert "/12 trials done" in status[0]
    assert "Experiment finished in" in proc.stdout and "FAILED" in proc.stdout
    assert "\n  tunefleet dashboard " in proc.stdout  # one command per line
    assert SECRET not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_jupyter_gets_an_html_table_updated_in_place(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    code = SCRIPT.replace("sys.argv[1]", repr(str(tmp_path / "r"))).replace("int(sys.argv[2])", "1")
    nb.cells.append(nbformat.v4.new_code_cell(code))
    seen: list[str] = []

    class Recording(NotebookClient):
        def process_message(self, msg: Any, cell: Any, cell_index: int) -> Any:
            seen.append(msg["msg_type"])
            return super().process_message(msg, cell, cell_index)

    client = Recording(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = nb.cells[0].outputs
    html = [o for o in outputs if o.output_type == "display_data"]
    assert len(html) == 1, outputs  # one table, updated in place: not one per refresh
    assert seen.count("update_display_data") >= 1
    final = html[0]["data"]["text/html"]
    assert 'class="tunefleet-progress"' in final
    assert "10 terminated" in final and "2 error" in final and "12/12 trials" in final
    assert "ValueError: x too large" in final
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Experiment finished in" in text
    assert SECRET not in final + text


# -- the snapshot and its renderings, on real Trial objects -----------------------------------
def _trial(i: int, status: TrialStatus, loss: float | None, **config: Any) -> Trial:
    trial = Trial(
        trial_id=f"t{i:04d}", index=i, name=f"train_t{i:04d}", config=config, resources={}, path=""
    )
    trial.status = status
    if loss is not None:
        trial.last_result = {"loss": loss, "acc": 1 - loss, "training_iteration": 5}
    return trial


def _progress(trials: list[Trial]) -> RunProgress:
    """What the controller gives the reporter: 20 trials in all, 600 s of a 3600 s budget."""
    return RunProgress(trials, elapsed_s=600.0, total=20, budget_s=3600.0)


def _sample() -> list[Trial]:
    trials = [_trial(i, TrialStatus.RUNNING, 1.0 / (i + 1), lr=0.1 * i) for i in range(14)]
    trials.append(_trial(20, TrialStatus.TERMINATED, 0.01, lr="<script>x</script>"))
    failed = _trial(21, TrialStatus.ERROR, None, lr=5, token="abcd-efgh-1234")
    failed.error = FailureRecord(kind=FailureKind.OOM, message="RSS 3.1 GiB > 2 GiB")
    trials.append(failed)
    return trials


def test_snapshot_counts_budget_best_and_limits() -> None:
    reporter = StatusReporter(verbose=1, metric="loss", mode="min", out=io.StringIO())
    snap = reporter.snapshot(_progress(_sample()))
    assert snap.counts == {"RUNNING": 14, "TERMINATED": 1, "ERROR": 1}
    assert snap.total == 20 and snap.finished == 2
    assert snap.remaining_s == 3000.0
    assert snap.fraction() == pytest.approx(max(2 / 20, 600 / 3600))
    assert snap.best is not None and snap.best.trial_id == "t0020"
    assert len(snap.running) == 10 and snap.more_running == 4
    assert snap.metric_columns[:2] == ["loss", "acc"]
    assert snap.failures == [("t0021", "OOM: RSS 3.1 GiB > 2 GiB")]
    line = snap.headline()
    assert line.startswith("[0:10:00] 2/20 trials done: 14 running, 1 terminated, 1 error")
    assert "0:50:00 of the time budget left" in line and "best loss=0.01 (t0020)" in line


def test_rich_and_html_views_show_the_same_and_escape_and_redact() -> None:
    from rich.console import Console

    reporter = StatusReporter(verbose=1, metric="loss", mode="min", out=io.StringIO())
    snap = reporter.snapshot(_progress(_sample()))
    console = Console(file=io.StringIO(), width=140, record=True)
    console.print(view.rich_view(snap))
    text = console.export_text()
    assert "2/20 trials" in text and "best t0020  loss=0.01" in text
    assert "t0003" in text and "… 4 more" in text and "OOM: RSS" in text
    page = view.html_view(snap)
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert '<progress value="0.1667" max="1">' in page
    assert "abcd-efgh-1234" not in text + page  # a secret-looking key's value is hidden


def test_verbose_levels(tmp_path: Path) -> None:
    trials = _sample()
    quiet, talkative = io.StringIO(), io.StringIO()
    StatusReporter(verbose=0, metric="loss", mode="min", out=quiet).update(_progress(trials))
    reporter = StatusReporter(verbose=3, metric="loss", mode="min", out=talkative)
    trials[0].num_results = 5
    reporter.update(_progress(trials))
    reporter.finish(trials, str(tmp_path), None)
    assert quiet.getvalue() == ""
    out = talkative.getvalue()
    assert "Trial t0000 result: iteration 5: loss=1, acc=0" in out  # verbose 3
    assert "Trial train_t0021 ERROR: OOM: RSS" in out  # verbose >= 2
    assert out.count("[0:") == 1 and "Experiment finished in" in out


# -- Ray Tune's reporter classes ------------------------------------------------------------
def test_cli_reporter_chooses_columns_rows_and_order() -> None:
    import tunefleet as tune

    reporter = tune.CLIReporter(
        metric_columns={"acc": "accuracy"},
        parameter_columns=["lr"],
        max_progress_rows=3,
        max_error_rows=0,
        sort_by_metric=True,
    )
    reporter.add_metric_column("loss")
    status = StatusReporter(
        verbose=1, metric="loss", mode="min", out=io.StringIO(), progress_reporter=reporter
    )
    snap = status.snapshot(_progress(_sample()))
    assert snap.metric_columns == ["acc", "loss"]
    assert [r.trial_id for r in snap.running] == ["t0013", "t0012", "t0011"]  # lowest loss
    assert snap.more_running == 11 and snap.failures == [] and snap.more_failures == 1
    assert snap.running[0].config == "lr=1.3"
    assert "<th>accuracy</th>" in view.html_view(snap)


def test_reporter_settings_are_checked() -> None:
    import tunefleet as tune

    with pytest.raises(ValueError, match=r"CLIReporter\(max_report_frequency=0\)"):
        tune.CLIReporter(max_report_frequency=0)
    with pytest.raises(TypeError, match=r"metric_columns=\.\.\.\): must be a list of names"):
        tune.CLIReporter(metric_columns="loss")
    with pytest.raises(ValueError, match="metric column 'loss' is already shown"):
        tune.CLIReporter(metric_columns=["loss", "loss"])
    with pytest.raises(TypeError, match=r"must be a tune\.CLIReporter"):
        tune.RunConfig(progress_reporter="cli").validate()


@pytest.mark.slow
def test_max_report_frequency_sets_the_log_period(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            import tunefleet as tune

            def train(config):
                for i in range(25):
                    tune.report({"loss": config["x"] / (i + 1)})
                    time.sleep(0.1)

            tune.run(train, config={"x": tune.grid_search([1, 2])}, metric="loss", mode="min",
                     storage_path=sys.argv[1],
                     progress_reporter=tune.CLIReporter(max_report_frequency=0.5,
                                                        metric_columns=["loss"]))
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    status = [line for line in proc.stdout.splitlines() if line.startswith("[0:")]
    assert len(status) >= 3, proc.stdout  # a run of ~2.5 s, a line every 0.5 s


def test_trials_that_reported_nan_are_marked_and_counted() -> None:
    trials = _sample()
    trials[0].last_result = {"loss": float("nan"), "training_iteration": 5}
    progress = RunProgress(
        trials,
        elapsed_s=600.0,
        total=20,
        budget_s=None,
        non_finite={"t0000": "loss", "t0003": "loss"},
    )
    reporter = StatusReporter(verbose=1, metric="loss", mode="min", out=io.StringIO())
    snap = reporter.snapshot(progress)
    assert snap.best is not None and snap.best.trial_id == "t0020"  # NaN never best
    cells = {row.trial_id: row.metrics["loss"] for row in snap.running}
    assert cells["t0000"] == f"nan {view.NON_FINITE_MARK}"
    assert cells["t0003"].endswith(f" {view.NON_FINITE_MARK}") and "nan" not in cells["t0003"]
    assert not cells["t0001"].endswith(view.NON_FINITE_MARK)
    assert "| 2 trials reported NaN/inf" in snap.headline()
    note = "2 trials reported NaN or inf (loss): recorded, never ranked best: t0000, t0003"
    assert note in view.html_view(snap)
    summary = reporter.summary(trials, "/x", None, progress.non_finite)
    assert note in summary and "Best trial t0020" in summary


def test_the_summary_counts_trials_that_reported_nothing() -> None:
    trials = [_trial(0, TrialStatus.TERMINATED, 0.5), _trial(1, TrialStatus.TERMINATED, None)]
    trials[0].num_results = 5
    reporter = StatusReporter(verbose=1, metric="loss", mode="min", out=io.StringIO())
    summary = reporter.summary(trials, "/x", None)
    assert "1 of 2 trials finished without reporting a result (metrics {}): t0001" in summary
    trials[1].num_results = 1
    assert "without reporting" not in reporter.summary(trials, "/x", None)
