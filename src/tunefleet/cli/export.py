"""`tunefleet export EXP --format ray|tensorboard|csv --out DIR`: Ray Tune's files, after the fact.

Ray Tune writes ``params.json``, ``result.json``, ``progress.csv`` and TensorBoard events
into every trial's directory as it runs; tunefleet keeps those loggers opt-in
(`JsonLoggerCallback`, `CSVLoggerCallback`, `TBXLoggerCallback`) and its store is the
record. This command writes the same files from the store, with the same callbacks, into
``DIR/<trial directory name>/``, after the run or while it goes on:

- ``ray``: ``params.json``, ``params.pkl``, ``result.json`` (a JSON line per result, with
  the trial's ``config`` in it, as Ray's) and ``progress.csv`` (nested keys joined with
  "/", no config), and TensorBoard events when tensorboardX is installed;
- ``tensorboard``: the events alone (``tensorboard --logdir DIR``);
- ``csv``: ``progress.csv`` per trial and ``DIR/trials.csv``, a row per trial (id,
  status, ``config/...``, the last result).

The store is read through the read-only `StoreReader`; only DIR is written. Each file is
written whole beside its place and then moved there, so running the command again
replaces the files with up-to-date ones (a TensorBoard run is replaced, never doubled).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from tunefleet._metrics import flatten
from tunefleet._redact import redact
from tunefleet.callbacks import (
    CSVLoggerCallback,
    JsonLoggerCallback,
    LoggerCallback,
    TBXLoggerCallback,
)
from tunefleet.trial import Trial, TrialStatus

FORMATS = ("ray", "tensorboard", "csv")
_EVENTS = "events.out.tfevents."
_STAGING = ".tunefleet-export-"  # DIR/.tunefleet-export-<trial>: written, then moved in place


def add_export_command(sub: Any) -> None:
    text = "write Ray Tune's per-trial files (params.json, result.json, progress.csv, TensorBoard)"
    cmd = sub.add_parser("export", help=text, description=text + " from an experiment's store")
    cmd.add_argument("experiment", metavar="EXP", help="experiment name or directory")
    cmd.add_argument("--storage", help="where names are looked up")
    cmd.add_argument(
        "--format",
        default="ray",
        choices=FORMATS,
        help="ray: params.json, result.json, progress.csv (+ TensorBoard if tensorboardX is "
        "installed); tensorboard: events only; csv: progress.csv per trial and trials.csv",
    )
    cmd.add_argument("--out", required=True, metavar="DIR", help="the directory to write into")
    cmd.set_defaults(run=_export)


def _export(args: argparse.Namespace) -> int:
    from tunefleet.store import StoreReader, resolve_experiment

    path = resolve_experiment(args.experiment, args.storage)
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {args.out}: is a file; it must be a directory (made if missing)")
    with StoreReader(path) as reader:
        trials = [t for t in reader.trials() if _started(t)]
        history = reader.all_results()
    callbacks = _callbacks(args.format)
    out.mkdir(parents=True, exist_ok=True)
    for trial in trials:
        export_trial(trial, history.get(trial.trial_id, []), out, callbacks)
    if args.format == "csv":
        write_trials_csv(trials, history, out / "trials.csv")
    print(_done_line(args.format, len(trials), out, callbacks))
    return 0


def _started(trial: Trial) -> bool:
    """A trial that has a directory in Ray Tune: started at least once (or reported)."""
    return trial.status is not TrialStatus.PENDING or trial.num_results > 0


def _callbacks(fmt: str) -> list[LoggerCallback]:
    """The logger callbacks that write `fmt`'s files."""
    if fmt == "csv":
        return [CSVLoggerCallback()]
    tensorboard = _tensorboard(required=fmt == "tensorboard")
    if fmt == "tensorboard":
        return [tensorboard] if tensorboard is not None else []
    ray: list[LoggerCallback] = [JsonLoggerCallback(), CSVLoggerCallback()]
    return ray + ([tensorboard] if tensorboard is not None else [])


def _tensorboard(required: bool) -> LoggerCallback | None:
    try:
        return TBXLoggerCallback()
    except ImportError as exc:
        if required:
            raise RuntimeError(
                '--format tensorboard needs tensorboardX: pip install "tunefleet[tensorboard]"'
            ) from exc
        return None  # as Ray Tune: the events are written when tensorboardX is there


def export_trial(
    trial: Trial, results: list[dict[str, Any]], out: Path, callbacks: list[LoggerCallback]
) -> Path:
    """Write one trial's files into ``out/<its directory name>`` through `callbacks`."""
    name = os.path.basename(os.path.normpath(trial.path)) or trial.trial_id
    target, staging = out / name, out / (_STAGING + name)
    shutil.rmtree(staging, ignore_errors=True)  # left by an export that was killed
    staged = dataclasses.replace(trial, path=str(staging))
    for callback in callbacks:
        callback.log_trial_start(staged)
        for result in results:
            if isinstance(callback, JsonLoggerCallback):  # Ray's result.json lines hold it
                result = {**result, "config": trial.config}
            callback.log_trial_result(0, staged, result)
        if trial.status.is_finished:  # TensorBoard's HParams: a trial that ended
            callback.log_trial_end(staged, failed=trial.status is TrialStatus.ERROR)
        callback.on_experiment_end([staged])
    _move_in(staging, target)
    return target


def _move_in(staging: Path, target: Path) -> None:
    """Replace `target`'s exported files with `staging`'s, each move atomic; keep the rest."""
    target.mkdir(exist_ok=True)
    if any(p.name.startswith(_EVENTS) for p in staging.rglob("*")):
        for old in target.iterdir():  # the previous export's TensorBoard run
            if old.is_file() and old.name.startswith(_EVENTS):
                old.unlink()
            elif old.is_dir() and _hparams_dir(old):
                shutil.rmtree(old)
    for entry in sorted(staging.iterdir()):
        os.replace(entry, target / entry.name)
    staging.rmdir()


def _hparams_dir(folder: Path) -> bool:
    """A folder tensorboardX's add_hparams made: a timestamp name, only event files in it."""
    try:
        float(folder.name)
    except ValueError:
        return False
    return all(p.is_file() and p.name.startswith(_EVENTS) for p in folder.iterdir())


def write_trials_csv(
    trials: list[Trial], history: dict[str, list[dict[str, Any]]], path: Path
) -> None:
    """One row per trial: trial_id, status, ``config/...``, then its last result's keys."""
    rows = []
    for trial in trials:
        results = history.get(trial.trial_id) or [trial.last_result]
        last = {k: v for k, v in flatten(redact(results[-1])).items() if k != "trial_id"}
        config = flatten(redact(trial.config), prefix="config/")
        rows.append({"trial_id": trial.trial_id, "status": trial.status.value, **config, **last})
    columns = {"trial_id": None, "status": None}
    for row in rows:
        columns.update(dict.fromkeys(k for k in row if k.startswith("config/")))
    for row in rows:
        columns.update(dict.fromkeys(row))
    staging = path.with_name(_STAGING + path.name)
    with open(staging, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(staging, path)


def _done_line(fmt: str, count: int, out: Path, callbacks: list[LoggerCallback]) -> str:
    files = {
        "ray": "params.json, result.json, progress.csv",
        "tensorboard": "TensorBoard events",
        "csv": "progress.csv per trial and trials.csv",
    }[fmt]
    tensorboard = any(isinstance(c, TBXLoggerCallback) for c in callbacks)
    if fmt == "ray" and tensorboard:
        files += ", TensorBoard events"
    line = f"Wrote {files} for {count} trial(s) to {out}"
    if tensorboard:
        line += f"; view with: tensorboard --logdir {shlex.quote(str(out))}"
    elif fmt == "ray":
        line += ' (no TensorBoard events: pip install "tunefleet[tensorboard]")'
    return line
