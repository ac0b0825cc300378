"""`tunefleet export`: Ray Tune's per-trial files written from a real experiment's store."""

from __future__ import annotations

import csv
import importlib
import json
import shlex
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.cli import main
from tunefleet.store import StoreReader

pytest.importorskip("tensorboardX")


def train(config: dict[str, Any]) -> None:
    for i in range(3):
        tune.report({"loss": config["lr"] * (3 - i), "nested": {"acc": 0.25 * i}})


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A finished two-trial experiment under a storage path with a space in it, and
    the summary the run printed."""
    storage = tmp_path_factory.mktemp("export") / "my results"
    capture = tmp_path_factory.mktemp("out") / "stdout.txt"
    with open(capture, "w", encoding="utf-8") as out:
        reporter_stdout, sys.stdout = sys.stdout, out
        try:
            tune.Tuner(
                train,
                param_space={"lr": tune.grid_search([0.1, 0.2]), "model": {"layers": 2}},
                tune_config=tune.TuneConfig(metric="loss", mode="min"),
                run_config=tune.RunConfig(name="tiny", storage_path=str(storage), verbose=1),
            ).fit()
        finally:
            sys.stdout = reporter_stdout
    return storage / "tiny", capture.read_text(encoding="utf-8")


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def read_scalars(trial_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars of the TensorBoard run in `trial_dir`: tag -> [(step, value)]."""
    events = list(trial_dir.glob("events.out.tfevents.*"))
    assert len(events) == 1, events  # one run per trial, never doubled by a re-export
    try:
        tensorboard: Any = importlib.import_module(
            "tensorboard.backend.event_processing.event_accumulator"
        )
    except ImportError:  # tensorboardX's own protobufs, on the TFRecord framing
        from tensorboardX.proto.event_pb2 import Event

        out: dict[str, list[tuple[int, float]]] = {}
        data = events[0].read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
        return out
    acc = tensorboard.EventAccumulator(str(trial_dir))
    acc.Reload()
    return {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def export(exp: Path | str, fmt: str, out: Path, *more: str) -> int:
    return main(["export", str(exp), "--format", fmt, "--out", str(out), *more])


def test_the_summary_says_how_and_ray_format_writes_rays_files(
    finished: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp, summary = finished
    line = next(x for x in summary.splitlines() if x.startswith("Ray Tune's files"))
    assert summary.count("tunefleet export") == 1
    words = shlex.split(line.split(": ", 1)[1])  # quoted: the path has a space in it
    assert words[:3] == ["tunefleet", "export", str(exp)]
    assert words[3:] == ["--format", "ray", "--out", "ray_files"]
    before = files_in(exp)
    out = tmp_path / "ray_files"
    assert main([*words[1:-1], str(out)]) == 0
    assert "tensorboard --logdir" in capsys.readouterr().out
    assert files_in(exp) == before  # the experiment's directory is only read
    with StoreReader(exp) as reader:
        trials = reader.trials()
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(t.path).name for t in trials)
    for trial in trials:
        folder = out / Path(trial.path).name
        assert json.loads((folder / "params.json").read_text()) == trial.config
        assert (folder / "params.pkl").is_file()
        lines = [json.loads(x) for x in (folder / "result.json").read_text().splitlines()]
        assert [r["training_iteration"] for r in lines] == [1, 2, 3]
        for result in lines:  # what Ray Tune's result.json lines hold
            assert result["config"] == trial.config and result["trial_id"] == trial.trial_id
            for key in ("date", "timestamp", "time_total_s", "pid", "hostname", "done"):
                assert key in result
        assert lines[-1]["loss"] == pytest.approx(trial.config["lr"])
        with open(folder / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 3 and "nested/acc" in rows[0] and "loss" in rows[0]
        assert not any(k.startswith("config") for k in rows[0])  # as Ray: no config columns
        assert [float(r["nested/acc"]) for r in rows] == [0.0, 0.25, 0.5]
        scalars = read_scalars(folder)
        assert [s for s, _ in scalars["ray/tune/loss"]] == [1, 2, 3]
        assert scalars["ray/tune/nested/acc"][-1][1] == pytest.approx(0.5)


def test_tensorboard_and_csv_formats_and_a_rerun_replaces_the_files(
    finished: tuple[Path, str], tmp_path: Path
) -> None:
    exp, _ = finished
    storage = str(exp.parent)
    board = tmp_path / "board"
    assert export("tiny", "tensorboard", board, "--storage", storage) == 0
    first = files_in(board)
    assert export("tiny", "tensorboard", board, "--storage", storage) == 0  # idempotent
    assert len(files_in(board)) == len(first)
    for folder in board.iterdir():
        assert not (folder / "params.json").exists()
        assert [s for s, _ in read_scalars(folder)["ray/tune/loss"]] == [1, 2, 3]
    table = tmp_path / "table"
    assert export(exp, "csv", table) == 0
    assert export(exp, "csv", table) == 0
    with open(table / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:4] == ["trial_id", "status", "config/lr", "config/model/layers"]
    assert [(r["status"], r["config/lr"], r["loss"]) for r in rows] == [
        ("TERMINATED", "0.1", "0.1"),
        ("TERMINATED", "0.2", "0.2"),
    ]
    for row in rows:
        with open(table / row["trial_id"] / "progress.csv", newline="") as f:
            assert len(list(csv.DictReader(f))) == 3


def test_bad_input_is_named(
    finished: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exp, _ = finished
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert export(exp, "ray", a_file) == 2
    assert f"--out {a_file}: is a file" in capsys.readouterr().err
    assert export(exp, "json", tmp_path / "x") == 2
    assert "invalid choice: 'json'" in capsys.readouterr().err
    assert export("nope", "ray", tmp_path / "x", "--storage", str(exp.parent)) == 2
    assert "No experiment 'nope'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # not installed
    assert export(exp, "tensorboard", tmp_path / "x") == 1
    assert 'needs tensorboardX: pip install "tunefleet[tensorboard]"' in capsys.readouterr().err
    assert export(exp, "ray", tmp_path / "y") == 0  # as Ray Tune: no events without it
    assert "no TensorBoard events" in capsys.readouterr().out
    assert not list((tmp_path / "y").rglob("events.out.tfevents.*"))


HELD = """
import sys, time
from pathlib import Path
import tunefleet as tune

def train(config):
    tune.report({"loss": 3.0})
    while not Path(config["go"]).exists():  # held until the test has exported once
        time.sleep(0.02)
    for loss in (2.0, 1.0):
        tune.report({"loss": loss})

tune.Tuner(train, param_space={"go": sys.argv[2]},
    run_config=tune.RunConfig(name="held", storage_path=sys.argv[1], verbose=0)).fit()
"""


def first_result(exp: Path, proc: subprocess.Popen[str]) -> None:
    """Wait until the held trial's first result is in the store (the run must go on)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with StoreReader(exp) as reader:
                if any(reader.all_results().values()):
                    return
        except FileNotFoundError:  # the store is not made yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"no first result in {exp} (run exited: {proc.poll()})")


def test_export_while_the_run_goes_on_then_again_after(tmp_path: Path) -> None:
    script = tmp_path / "held.py"
    script.write_text(textwrap.dedent(HELD))
    go = tmp_path / "go"
    exp, out = tmp_path / "st" / "held", tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "st"), str(go)], text=True)
    try:
        first_result(exp, proc)
        assert export(exp, "ray", out) == 0
        (folder,) = out.iterdir()
        assert len((folder / "result.json").read_text().splitlines()) == 1
        assert [s for s, _ in read_scalars(folder)["ray/tune/loss"]] == [1]
        go.touch()
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    assert export(exp, "ray", out) == 0
    lines = [json.loads(x) for x in (folder / "result.json").read_text().splitlines()]
    assert [r["loss"] for r in lines] == [3.0, 2.0, 1.0]
    with open(folder / "progress.csv", newline="") as f:
        assert [r["loss"] for r in csv.DictReader(f)] == ["3.0", "2.0", "1.0"]
    assert [v for _, v in read_scalars(folder)["ray/tune/loss"]] == [3.0, 2.0, 1.0]
    assert not list(out.glob(".tunefleet-export-*"))  # nothing left half-written
