"""The ``tunefleet`` command: look at experiments from a shell, while they run or after.

    tunefleet ls [STORAGE]          experiments: trials per state, best metric, last update
    tunefleet show EXP              one row per trial: status, iterations, metric, config
    tunefleet best EXP              the best trial: config, metrics, checkpoint
    tunefleet errors EXP            each failed trial: its cause, traceback or stderr tail
    tunefleet run SCRIPT ...        tune a script in any language (docs/script_tuning.md)
    tunefleet dashboard [STORAGE]   a read-only web page of the experiments (docs/dashboard.md)
    tunefleet report EXP --out F    one self-contained HTML report of an experiment
    tunefleet export EXP --out DIR  Ray Tune's per-trial files (params.json, progress.csv, ...)
    tunefleet port PATH... [--write]  rewrite Ray Tune programs' imports (docs/from_ray_tune.md)

EXP is an experiment name under the storage path (``--storage``, default
``$TUNEFLEET_STORAGE`` or ``~/tunefleet_results``) or a path to its directory.
The inspecting commands read through the read-only store reader and write nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from tunefleet._metrics import flatten, metric_value
from tunefleet._redact import redact_text
from tunefleet.progress._text import command, short, usage_columns, usage_of, usage_text, why_ended
from tunefleet.progress.snapshot import _metric_and_mode
from tunefleet.progress.view import NON_FINITE_MARK, non_finite_note
from tunefleet.results import SCOPES, ResultGrid
from tunefleet.store import (
    StoreReader,
    default_storage_path,
    list_experiments,
    resolve_experiment,
)
from tunefleet.store._check import INTERRUPTED, resume_hint, shown_status
from tunefleet.trial import FailureRecord, Trial, TrialStatus

_STATES = [s.value for s in TrialStatus]
_STDERR_LINES = 20


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 1 failed, 2 bad usage or name)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's own usage error
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with warnings.catch_warnings():  # a warning is one line, as the errors are
            warnings.showwarning = _warning_line(args.command)
            code: int = args.run(args)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"tunefleet {args.command}: error: {_message(exc)}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"tunefleet {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `tunefleet show x | head`
        return 0
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunefleet", description="Tune a script, inspect tunefleet experiments, or resume one."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ls = sub.add_parser("ls", help="list the experiments under a storage path")
    ls.add_argument(
        "storage",
        nargs="?",
        help="storage path (default: $TUNEFLEET_STORAGE or ~/tunefleet_results)",
    )
    ls.set_defaults(run=_ls)

    for name, run, text in (
        ("show", _show, "one row per trial of an experiment"),
        ("best", _best, "the best trial of an experiment"),
        ("errors", _errors, "why the failed trials of an experiment failed"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("experiment", metavar="EXP", help="experiment name or directory")
        cmd.add_argument("--storage", help="where names are looked up")
        cmd.set_defaults(run=run)
        if name == "show":
            cmd.add_argument(
                "--full", action="store_true", help="print config values whole (not cut to fit)"
            )
        if name in ("show", "best"):
            cmd.add_argument("--metric", help="metric (default: the experiment's)")
            cmd.add_argument("--mode", choices=["min", "max"], help="default: the experiment's")
        if name == "best":
            cmd.add_argument("--scope", default="last", choices=SCOPES, help="default: last")
        if name == "errors":
            cmd.add_argument(
                "--all", action="store_true", help="also list failed attempts that were retried"
            )
    from tunefleet.cli.resume import add_resume_command

    add_resume_command(sub)
    from tunefleet.cli.slurm import add_slurm_command

    add_slurm_command(sub)
    from tunefleet.cli.dashboard import add_dashboard_command, add_report_command

    add_dashboard_command(sub)
    add_report_command(sub)
    from tunefleet.cli.script import add_run_command

    add_run_command(sub)
    from tunefleet.cli.port import add_port_command

    add_port_command(sub)
    from tunefleet.cli.export import add_export_command

    add_export_command(sub)
    return parser


# -- commands -------------------------------------------------------------------------------
def _ls(args: argparse.Namespace) -> int:
    root = Path(args.storage or default_storage_path()).expanduser()
    if root.exists() and not root.is_dir():
        raise ValueError(f"storage path {str(root)!r} is a file, not a directory")
    paths = list_experiments(root)
    if not paths:
        print(f"No experiments under {root}")
        return 0
    rows = [_ls_row(p) for p in paths]
    print(
        _table(
            ["NAME", "STATUS", "TRIALS", *_STATES, "BEST", "UPDATED"],
            rows,
            right={2, 3, 4, 5, 6, 7},
        )
    )
    interrupted = [row[0] for row in rows if row[1] == INTERRUPTED]
    if interrupted:  # a driver that was killed (or lost its machine) left "running" behind
        print(f"\n{INTERRUPTED}: the driver is gone; the unfinished trials are resumable:")
        storage = None if str(root) == default_storage_path() else str(root)
        for name in interrupted:
            print(f"  {resume_hint(name, storage)}")
    return 0


def _ls_row(path: Path) -> list[str]:
    try:
        with StoreReader(path) as reader:
            meta, trials, updated = reader.meta(), reader.trials(), reader.last_update()
        best = _best_text(path, meta)
    except Exception as exc:  # one broken experiment must not hide the others
        return [path.name, "unreadable", "-", *["-"] * len(_STATES), _message(exc)[:60], "-"]
    counts = Counter(t.status.value for t in trials)
    return [
        path.name,
        shown_status(path, meta.get("status")) or "-",
        str(len(trials)),
        *[str(counts.get(s, 0)) for s in _STATES],
        best,
        _when(updated),
    ]


def _best_text(path: Path, meta: dict[str, Any]) -> str:
    metric, mode = meta.get("metric"), meta.get("mode")
    if not metric or not mode:
        return "-"
    try:
        best = ResultGrid(path).get_best_result()
    except (RuntimeError, ValueError):
        return "-"
    value = metric_value(best.metrics or {}, metric)
    return f"{metric}={_fmt(value)} ({best.trial_id})"


def _show(args: argparse.Namespace) -> int:
    path = resolve_experiment(args.experiment, args.storage)
    with StoreReader(path) as reader:
        meta, trials, history = reader.meta(), reader.trials(), reader.all_results()
    metric = args.metric or meta.get("metric")
    mode = args.mode or meta.get("mode")
    counts = Counter(t.status.value.lower() for t in trials)
    print(f"Experiment {meta.get('name', path.name)} at {path}")
    status = shown_status(path, meta.get("status")) or "-"
    if status == INTERRUPTED:
        status += f" (the driver is gone; resume with: {resume_hint(path.name, str(path.parent))})"
    line = f"status: {status}, trainable: {meta.get('trainable', '-')}"
    if metric:
        line += f", metric: {metric}" + (f" ({mode})" if mode else "")
    print(line)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"{len(trials)} trials" + (f": {summary}" if summary else ""))
    if not trials:
        return 0
    headers = ["TRIAL", "STATUS", "ITER"]
    if metric:
        headers += [f"LAST {metric}", f"BEST {metric}"]
    usages = {t.trial_id: usage_of(t) for t in trials}  # result["resources"], if recorded
    shown = usage_columns(usages.values())
    headers += [title for title, _ in shown]
    headers += ["ENDED", "CONFIG"]
    rows = []
    flagged: dict[str, str] = {}  # trials that reported a NaN or infinite metric
    for trial in trials:
        row = [trial.trial_id, trial.status.value, str(trial.iteration)]
        if metric:
            values = [metric_value(r, metric) for r in history.get(trial.trial_id, [])]
            found = [v for v in values if v is not None]
            mark = ""
            if any(not math.isfinite(v) for v in found):
                flagged[trial.trial_id] = metric
                mark = f" {NON_FINITE_MARK}"
            row += [_fmt(found[-1] if found else None) + mark, _fmt(_best_of(found, mode))]
        row += [usage_text(usages[trial.trial_id], key) for _, key in shown]
        row.append(why_ended(trial) or "-")
        row.append(_config_cell(trial.config, full=args.full))
        rows.append(row)
    print()
    numbers = 5 if metric else 3  # ITER, the metric's columns and the usage ones
    print(_table(headers, rows, right=set(range(2, numbers + len(shown)))))
    if flagged:
        print(non_finite_note(flagged, list(flagged)))
    return 0


def _best(args: argparse.Namespace) -> int:
    path = resolve_experiment(args.experiment, args.storage)
    grid = ResultGrid(path, metric=args.metric, mode=args.mode)
    if len(grid) == 1:  # get_best_result needs no metric then (as Ray's); `best` shows one
        with StoreReader(path) as reader:
            meta = reader.meta()
        metric, mode = args.metric or meta.get("metric"), args.mode or meta.get("mode")
        if not isinstance(metric, list):
            _metric_and_mode(metric, mode, "tunefleet best")
    best = grid.get_best_result(scope=args.scope)
    with StoreReader(path) as reader:
        meta, trial = reader.meta(), reader.trial(best.trial_id)
    metric = str(args.metric or meta.get("metric"))  # get_best_result checked there is one
    mode = args.mode or meta.get("mode")
    print(
        f"Best trial: {trial.trial_id} ({trial.name}), {trial.status.value}, "
        f"{trial.iteration} iterations"
    )
    print(
        f"{metric} = {_fmt(metric_value(best.metrics or {}, metric))} "
        f"(mode {mode}, scope {args.scope})"
    )
    print("Config:")
    print(_json(best.config))
    print("Metrics:")
    print(_json({k: v for k, v in best.metrics.items() if k != "config"}))  # shown above
    print(f"Checkpoint: {best.checkpoint.path if best.checkpoint else 'none'}")
    print(f"Directory: {best.path}")
    return 0


def _errors(args: argparse.Namespace) -> int:
    path = resolve_experiment(args.experiment, args.storage)
    with StoreReader(path) as reader:
        trials = reader.trials()
        failed_events = reader.events(kinds="failed")
    failed = [t for t in trials if t.status is TrialStatus.ERROR]
    by_id = {t.trial_id: t for t in trials}
    retried = [
        (by_id[e["trial_id"]], FailureRecord.from_json(e["data"]))
        for e in failed_events
        if e["trial_id"] in by_id
        and isinstance(e["data"], dict)
        and not _is_final(by_id[e["trial_id"]], e["data"])
    ]
    if not failed:
        print(f"No failed trials in {path.name} ({len(trials)} trials)")
    else:
        print(f"{len(failed)} of {len(trials)} trials failed in {path.name}")
    for trial in failed:
        if trial.error is not None:
            _print_failure(trial, trial.error, "")
    if retried and args.all:
        print(f"\n{len(retried)} failed attempt(s) were retried:")
        for attempted, failure in retried:
            _print_failure(attempted, failure, f" (attempt {failure.attempt + 1})")
    elif retried:
        print(
            f"\n{len(retried)} failed attempt(s) were retried; "
            f"`{command('tunefleet', 'errors', args.experiment, '--all')}` lists them"
        )
    return 0


def _is_final(trial: Trial, data: dict[str, Any]) -> bool:
    """Whether a "failed" event is the trial's final error (shown anyway)."""
    return (
        trial.status is TrialStatus.ERROR
        and trial.error is not None
        and data.get("attempt") == trial.error.attempt
    )


def _print_failure(trial: Trial, failure: FailureRecord, note: str) -> None:
    """The cause in one line, then the traceback and/or the stderr tail, indented."""
    print(f"\n{trial.trial_id} ({trial.name}){note}: {failure.one_line()}")
    if failure.traceback:
        print(_indent(failure.traceback))
    tail = failure.stderr_tail
    if tail is None and not note:  # the log file is the final attempt's: only for final errors
        tail = _file_tail(Path(trial.path, "stderr.log"))
    if tail and tail.strip() != (failure.traceback or "").strip():
        print("    stderr (last lines):")
        print(_indent(tail, 6))
    if not failure.traceback and not tail and "\n" in failure.message.strip():
        print(_indent(failure.message))


# -- formatting ----------------------------------------------------------------------------------
def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    """A plain-text table: columns padded to their widest cell, numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _best_of(values: list[float], mode: str | None) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    if not finite or mode not in ("min", "max"):
        return None
    return max(finite) if mode == "max" else min(finite)


def _config_cell(config: dict[str, Any], *, full: bool, width: int = 60) -> str:
    """``key=value ...`` (nested keys flattened): each value cut to fit and the cell
    to `width`, unless `full`."""
    parts = []
    for key, value in flatten(config).items():
        if full:
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        else:
            shown = f"{value:.4g}" if isinstance(value, float) else short(value)
        parts.append(f"{key}={shown}")
    text = " ".join(parts)
    return text if full else short(text, width)


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def _indent(text: str, spaces: int = 4) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in text.rstrip().splitlines())


def _file_tail(path: Path, lines: int = _STDERR_LINES) -> str | None:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    kept = text.splitlines()[-lines:]
    return redact_text("\n".join(kept)) if kept else None  # no URL password shown


def _warning_line(command: str) -> Any:
    """A `warnings.showwarning` that prints ``tunefleet CMD: warning: ...`` once on stderr."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        if str(message) not in shown:  # each reader opened warns again
            shown.add(str(message))
            print(f"tunefleet {command}: warning: {message}", file=sys.stderr)

    return show


def _message(exc: BaseException) -> str:
    # KeyError's str() wraps the message in quotes.
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


if __name__ == "__main__":
    sys.exit(main())
