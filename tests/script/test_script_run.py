"""`tunefleet run`: real scripts (Python, bash) tuned as child processes of real trials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import PROGRAMS, REPO, SRC
from tests.helpers.processes import pid_alive
from tunefleet.cli import main
from tunefleet.results import ResultGrid
from tunefleet.script.program import config_args
from tunefleet.store import StoreReader
from tunefleet.trial import FailureKind, Trial, TrialStatus


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _read(exp: Path) -> tuple[list[Trial], dict[str, list[dict[str, Any]]]]:
    with StoreReader(exp) as reader:
        return reader.trials(), reader.all_results()


def _run(*args: str) -> int:
    return main(["run", "--verbose", "0", *args])


def test_random_search_with_tagged_lines(tmp_path: Path) -> None:
    space = _write(
        tmp_path / "space.yaml",
        "lr: {loguniform: [1e-3, 1e-1]}\nlayers: {randint: [1, 4]}\nact: {choice: [relu, tanh]}\n",
    )
    code = _run(
        str(PROGRAMS / "tagged.py"),
        *("--space", str(space), "--metric", "val_loss", "--mode", "min"),
        *("--num-samples", "4", "--storage", str(tmp_path), "--name", "rand"),
        *("--search", "random", "--", "--epochs", "3"),
    )
    assert code == 0
    trials, results = _read(tmp_path / "rand")
    assert len(trials) == 4
    losses = {}
    for trial in trials:
        assert trial.status is TrialStatus.TERMINATED
        history = results[trial.trial_id]
        assert [r["epoch"] for r in history] == [0, 1, 2]  # --epochs 3 reached the script
        cfg = trial.config
        expected = abs(cfg["lr"] - 0.01) * 10 + cfg["layers"] / 100 + 1 / 3
        assert history[-1]["val_loss"] == pytest.approx(expected)  # the config arrived
        losses[trial.trial_id] = history[-1]["val_loss"]
        trial_dir = Path(trial.path)
        assert json.loads((trial_dir / "tunefleet_config.json").read_text()) == cfg
        assert "epoch 2: val_loss" in (trial_dir / "stdout.log").read_text()  # passed through
    best = ResultGrid(tmp_path / "rand").get_best_result()
    assert best.trial_id == min(losses, key=losses.__getitem__)


def test_asha_stops_scripts_and_kills_them(tmp_path: Path) -> None:
    space = _write(tmp_path / "space.yaml", "q: {grid_search: [0.0, 1.0, 2.0, 3.0, 4.0]}\n")
    code = _run(
        str(PROGRAMS / "slow.py"),
        *("--space", str(space), "--metric", "loss", "--mode", "min"),
        *("--scheduler", "asha", "--scheduler-option", "grace_period=2"),
        *("--scheduler-option", "reduction_factor=2", "--stop", "training_iteration=20"),
        *("--max-concurrent", "2", "--storage", str(tmp_path), "--name", "asha"),
        *("--kill-grace", "5"),
    )
    assert code == 0
    trials, _ = _read(tmp_path / "asha")
    stopped = [t for t in trials if t.iteration < 20]
    assert stopped, "ASHA stopped no trial early"
    assert {t.config["q"] for t in stopped} >= {3.0, 4.0}  # the worst ones
    for trial in trials:
        assert trial.status is TrialStatus.TERMINATED
        script_pid, child_pid = map(int, (Path(trial.path) / "pids.txt").read_text().split())
        assert not pid_alive(script_pid) and not pid_alive(child_pid)
    for trial in stopped:  # asked to end with SIGTERM first, and it did
        assert (Path(trial.path) / "sigterm.txt").read_text() == "SIGTERM\n"


def test_shell_script_reports_and_checkpoints(tmp_path: Path) -> None:
    space = _write(tmp_path / "space.yaml", "width: {grid_search: [10, 50]}\n")
    code = _run(
        str(PROGRAMS / "tagged.sh"),
        *("--space", str(space), "--metric", "loss", "--mode", "min", "--config-style", "json"),
        *("--storage", str(tmp_path), "--name", "bash"),
    )
    assert code == 0
    trials, results = _read(tmp_path / "bash")
    by_width = {t.config["width"]: t for t in trials}
    for width, trial in by_width.items():
        assert [r["loss"] for r in results[trial.trial_id]] == [
            100 // width + s for s in (1, 2, 3, 4)
        ]
        checkpoints = sorted(p.name for p in (Path(trial.path) / "checkpoints").iterdir())
        assert checkpoints == [f"checkpoint_00000{i}" for i in (1, 2, 3, 4)]
        step = (Path(trial.path) / "checkpoints" / "checkpoint_000003" / "step").read_text()
        assert step == "3\n"  # copied before the script wrote step 4 (it waited for the ack)
        assert "acknowledged: ok 4" in (Path(trial.path) / "stdout.log").read_text()
    assert ResultGrid(tmp_path / "bash").get_best_result().config == {"width": 50}


def test_checkpoint_lines_attach_to_the_next_report(tmp_path: Path) -> None:
    assert (
        _run(str(PROGRAMS / "checkpoint_line.sh"), "--storage", str(tmp_path), "--name", "ck") == 0
    )
    (trial,), _ = _read(tmp_path / "ck")
    root = Path(trial.path) / "checkpoints"
    assert (root / "checkpoint_000001" / "a").read_text() == "1\n"  # its own folder
    assert (root / "checkpoint_000002" / "b").read_text() == "2\n"  # TUNEFLEET_CHECKPOINT_DIR


def test_crashing_script_is_an_error_with_its_stderr(tmp_path: Path) -> None:
    code = _run(str(PROGRAMS / "crash.py"), "--storage", str(tmp_path), "--name", "crash")
    assert code == 1
    (trial,), _ = _read(tmp_path / "crash")
    assert trial.status is TrialStatus.ERROR and trial.error is not None
    error = trial.error
    # A CRASH with the program's exit code and stderr, not an exception of the trial.
    assert error.kind is FailureKind.CRASH and error.exit_code == 1 and error.traceback is None
    assert error.one_line() == (
        "CRASH at iteration 1: crash.py exited with code 1: "
        "ValueError: lr=0.5 is too large for this model"
    )
    tail = error.stderr_tail or ""
    assert "about to fail" in tail
    assert "_script_child" not in tail and "runpy" not in tail  # as `python crash.py`


def test_malformed_report_line_fails_the_trial(tmp_path: Path) -> None:
    script = _write(tmp_path / "bad.sh", "#!/bin/sh\necho 'tunefleet-report: {loss: 1}'\n")
    script.chmod(0o755)
    assert _run(str(script), "--storage", str(tmp_path), "--name", "bad") == 1
    (trial,), _ = _read(tmp_path / "bad")
    assert trial.error is not None
    assert "bad.sh printed a line tunefleet-report: {loss: 1} that is not JSON" in (
        trial.error.message
    )


def test_report_checkpoint_and_restore_on_retry(tmp_path: Path) -> None:
    """tunefleet.report inside the script; a crash is retried from TUNEFLEET_RESTORE_DIR."""
    space = _write(tmp_path / "space.yaml", "x: {grid_search: [1, 2]}\ncrash_once: true\n")
    code = _run(
        str(PROGRAMS / "with_report.py"),
        *("--space", str(space), "--metric", "score", "--mode", "max"),
        *("--max-failures", "1", "--storage", str(tmp_path), "--name", "retry"),
    )
    assert code == 0
    trials, results = _read(tmp_path / "retry")
    for trial in trials:
        assert trial.status is TrialStatus.TERMINATED and trial.attempt == 1
        history = results[trial.trial_id]
        assert [r["training_iteration"] for r in history] == [1, 2, 3, 4, 5, 6]
        assert [r["epoch"] for r in history] == [0, 1, 2, 3, 4, 5]
        assert [r["start"] for r in history] == [0, 0, 0, 3, 3, 3]  # resumed after epoch 2
        assert history[-1]["score"] == trial.config["x"] * 6
    assert "simulated crash" in (Path(trials[0].path) / "stderr.log").read_text()


def test_pbt_exploit_restores_the_script_from_the_copied_checkpoint(tmp_path: Path) -> None:
    """The example script under synchronous PBT: after each exploit it resumes at once."""
    example = REPO / "examples" / "script_tuning"
    code = _run(
        str(example / "train.py"),
        *("--space", str(example / "space.yaml"), "--metric", "val_loss", "--mode", "min"),
        *("--scheduler", "pbt", "--scheduler-option", "time_attr=training_iteration"),
        *("--scheduler-option", "perturbation_interval=3", "--scheduler-option", "synch=true"),
        *("--scheduler-option", "quantile_fraction=0.5", "--scheduler-option", "seed=0"),
        *("--scheduler-option", "hyperparam_mutations={lr: {loguniform: [1e-3, 3e-1]}}"),
        *("--search-option", "seed=1", "--num-samples", "2", "--stop", "training_iteration=6"),
        *("--storage", str(tmp_path), "--name", "pbt", "--", "--epochs", "6"),
    )
    assert code == 0
    with StoreReader(tmp_path / "pbt") as reader:
        exploits = reader.events(kinds="exploit")
        results = reader.all_results()
    assert exploits, "PBT exploited no trial"
    for history in results.values():
        # resumed from the state in TUNEFLEET_RESTORE_DIR, not from scratch
        assert [r["epoch"] for r in history] == [r["training_iteration"] for r in history]
        assert [r["training_iteration"] for r in history][-1] == 6


def test_a_silent_script_is_stopped_by_the_time_budget(tmp_path: Path) -> None:
    """A program that reports once and then works for 10 minutes is stopped and killed."""
    code = _run(
        str(PROGRAMS / "silent.sh"),
        *("--time-budget", "1", "--storage", str(tmp_path), "--name", "silent"),
    )
    assert code == 0
    (trial,), _ = _read(tmp_path / "silent")
    assert trial.status is TrialStatus.TERMINATED and trial.iteration == 1
    assert not pid_alive(int((Path(trial.path) / "pid.txt").read_text()))


def test_run_file_with_flags_over_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A YAML run file (inline space, command list, env); the flags override it."""
    (tmp_path / "job").mkdir()
    _write(
        tmp_path / "job" / "run.yaml",
        """
command: [bash, tagged.sh]
space:
  width: {choice: [10, 20, 25]}
  unused: {nested: {uniform: [0, 1]}}
config_style: json
metric: loss
mode: min
num_samples: 50
scheduler: {name: fifo}
search: {name: random, seed: 3}
resources: {cpu: 1}
stop: {training_iteration: 2}
storage: results
name: fromfile
env: {EXTRA: "1"}
""",
    )
    (tmp_path / "job" / "tagged.sh").write_text((PROGRAMS / "tagged.sh").read_text())
    monkeypatch.chdir(tmp_path)
    assert _run("--config", "job/run.yaml", "--num-samples", "3", "--name", "override") == 0
    exp = tmp_path / "job" / "results" / "override"  # relative to the run file
    trials, results = _read(exp)
    assert len(trials) == 3
    for trial in trials:
        assert trial.config["width"] in (10, 20, 25)
        assert 0 <= trial.config["unused"]["nested"] <= 1
        assert len(results[trial.trial_id]) == 2  # the file's stop condition


def test_example_run_file(tmp_path: Path) -> None:
    """examples/script_tuning/run.yaml through the installed command line, in a subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "tunefleet",
                "run",
                "--config",
                "examples/script_tuning/run.yaml",
            ),
            *("--storage", str(tmp_path), "--num-samples", "4", "--name", "example"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Best trial" in proc.stdout
    grid = ResultGrid(tmp_path / "example")
    assert len(grid) == 4 and grid.num_errors == 0
    assert grid.get_best_result().metrics["val_loss"] < 0.1


@pytest.mark.parametrize(
    ("files", "args", "expected"),
    [
        ({}, ["missing.py"], "SCRIPT: missing.py: no such file"),
        (
            {"s.yaml": "lr: {uniform: [1]}\n"},
            ["T", "--space", "s.yaml"],
            "s.yaml: lr: uniform needs [lower, upper], got [1]",
        ),
        (
            {"s.yaml": "model: {width: {randint: {lower: 1, hi: 3}}}\n"},
            ["T", "--space", "s.yaml"],
            "s.yaml: model.width: randint takes [lower, upper]: unknown ['hi']",
        ),
        (
            {"s.yaml": "lr: {loguniform: [0, 1]}\n"},
            ["T", "--space", "s.yaml"],
            "s.yaml: lr: loguniform lower=0 must be > 0 (log scale)",
        ),
        (
            {"s.yaml": "lr: {choice: [1, 2], q: 3}\n"},
            ["T", "--space", "s.yaml"],
            "s.yaml: lr: a domain is a mapping with one key (choice: ...), got more keys: ['q']",
        ),
        (
            {"s.yaml": "lr: {uniform: [0, 1]\n"},
            ["T", "--space", "s.yaml"],
            "s.yaml: not valid YAML (line 2, column 1)",
        ),
        (
            {},
            ["T", "--scheduler", "ashaa", "--metric", "m", "--mode", "min"],
            "--scheduler: unknown name 'ashaa' (did you mean asha?); one of: fifo, asha",
        ),
        (
            {},
            [
                "T",
                "--scheduler",
                "asha",
                "--scheduler-option",
                "grace=2",
                "--metric",
                "m",
                "--mode",
                "min",
            ],
            "--scheduler: grace: not an option of asha (ASHAScheduler); options: time_attr",
        ),
        ({}, ["T", "--scheduler", "asha"], "--scheduler: asha needs the metric to optimize"),
        ({}, ["T", "--metric", "m"], "--metric: give --mode min or --mode max with --metric"),
        ({}, ["T", "--stop", "training_iteration"], "--stop 'training_iteration': use KEY=VALUE"),
        (
            {},
            ["T", "--stop", "training_iteration=soon"],
            "--stop: training_iteration='soon': a stop condition is METRIC=NUMBER",
        ),
        (
            {},
            ["T", "--cpus-per-trial", "-1"],
            "--cpus-per-trial: with_resources(resources)['cpu']=-1.0 must be a finite number >= 0",
        ),
        (
            {"run.yaml": "script: T\nnum_sample: 3\n"},
            ["--config", "run.yaml"],
            "run.yaml: num_sample: not a run setting; did you mean num_samples?",
        ),
        (
            {"run.yaml": "script: T\nnum_samples: ten\n"},
            ["--config", "run.yaml"],
            "run.yaml: num_samples: must be an integer >= 1, got 'ten'",
        ),
        ({"run.yaml": "- a\n- b\n"}, ["--config", "run.yaml"], "run.yaml: a run file is a mapping"),
        (
            {"run.yaml": "command: bash x.sh\n"},
            ["--config", "run.yaml"],
            "run.yaml: command: must be a non-empty list of strings, got 'bash x.sh'",
        ),
        ({"plain.sh": "echo hi\n"}, ["plain.sh"], "plain.sh is not executable: chmod +x it"),
        ({}, [], "give the script to run: tunefleet run SCRIPT, or script: in --config"),
    ],
)
def test_bad_input_is_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    args: list[str],
    expected: str,
) -> None:
    for name, text in files.items():
        _write(tmp_path / name, text.replace("script: T", f"script: {PROGRAMS / 'tagged.py'}"))
    monkeypatch.chdir(tmp_path)
    args = [str(PROGRAMS / "tagged.py") if a == "T" else a for a in args]
    assert _run(*args, "--storage", str(tmp_path / "results")) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert not (tmp_path / "results").exists()  # nothing ran


def test_config_as_arguments() -> None:
    config = {"lr": 0.001, "model": {"width": 64, "act": "relu"}, "flag": True, "xs": [1, 2]}
    assert config_args(config, "args") == [
        *("--lr", "0.001", "--model.width", "64", "--model.act", "relu"),
        *("--flag", "true", "--xs", "[1, 2]"),
    ]
    assert config_args(config, "hydra")[:2] == ["lr=0.001", "model.width=64"]
    assert config_args(config, "json") == []


def test_tunefleet_report_in_python_started_by_a_wrapper(tmp_path: Path) -> None:
    """A Python program started by a shell wrapper (not `tunefleet run x.py`) still
    reports through the trial: `tunefleet.report` finds TUNEFLEET_REPORT_FD."""
    wrapper = _write(
        tmp_path / "wrap.sh",
        f'#!/bin/sh\nexec "{sys.executable}" "{PROGRAMS / "with_report.py"}" "$@"\n',
    )
    wrapper.chmod(0o755)
    space = _write(tmp_path / "space.yaml", "x: {grid_search: [2]}\n")
    code = _run(
        str(wrapper),
        *("--space", str(space), "--metric", "score", "--mode", "max"),
        *("--storage", str(tmp_path), "--name", "wrapped"),
    )
    assert code == 0
    (trial,), results = _read(tmp_path / "wrapped")
    assert trial.status is TrialStatus.TERMINATED
    assert [r["score"] for r in results[trial.trial_id]] == [2, 4, 6, 8, 10, 12]
