"""What the dashboard shows, read from the store: plain JSON-ready dicts.

Every function opens a `StoreReader` (read-only SQLite), reads what it needs and
closes it at once, so a dashboard never holds a lock or a transaction the running
experiment could wait on. Configs, metrics and failure texts are redacted on the
way out (`tunefleet._redact.redact`), and non-finite numbers become the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` so the JSON is valid for a browser.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

from tunefleet._metrics import as_number, flatten, metric_value, objectives
from tunefleet._redact import redact, redact_text
from tunefleet.dashboard._json import clean
from tunefleet.dashboard._scheduler import scheduler_view
from tunefleet.progress._text import usage_of
from tunefleet.result import RESOURCES
from tunefleet.schedulers import pbt_schedule
from tunefleet.store import DB_FILENAME, StoreReader, list_experiments
from tunefleet.store._check import INTERRUPTED, resume_hint, shown_status
from tunefleet.trial import FailureRecord, Trial, TrialStatus

STATES = [s.value for s in TrialStatus]
_STDERR_LINES = 40
_USAGE_PREFIX = RESOURCES + "/"  # result["resources"]: the trials table's own columns
#: result keys every trial reports: not offered as curves (they are bookkeeping)
_BOOKKEEPING = frozenset(
    {
        "training_iteration",
        "timestamp",
        "time_this_iter_s",
        "time_total_s",
        "time_since_restore",
        "iterations_since_restore",
        "pid",
        "done",
        "epoch",
    }
)


def experiment_names(root: Path) -> list[str]:
    """The names of the experiments directly under `root` (the only names served)."""
    return [p.name for p in list_experiments(root)]


def experiments_list(root: Path, only: str | None = None) -> list[dict[str, Any]]:
    """One row per experiment: status, trials per state, best metric, last update."""
    rows = []
    for name in experiment_names(root):
        if only is not None and name != only:
            continue
        try:
            rows.append(_list_row(root / name))
        except Exception as exc:  # one broken experiment must not hide the others
            rows.append({"name": name, "status": "unreadable", "error": str(exc)})
    cleaned: list[dict[str, Any]] = clean(rows)
    return cleaned


def _list_row(path: Path) -> dict[str, Any]:
    with StoreReader(path) as reader:
        meta, trials, updated = reader.meta(), reader.trials(), reader.last_update()
    goals = objectives(meta.get("metric"), meta.get("mode"))
    best = _best_trial(trials, goals)
    counts = Counter(t.status.value for t in trials)
    status = shown_status(path, meta.get("status"))
    return {
        "name": path.name,
        "status": status,
        "resume": resume_hint(path.name) if status == INTERRUPTED else None,
        "trials": len(trials),
        "counts": {s: counts.get(s, 0) for s in STATES},
        "metric": goals[0][0] if len(goals) == 1 else [m for m, _ in goals] or None,
        "mode": goals[0][1] if len(goals) == 1 else [d for _, d in goals] or None,
        "best": best,
        "last_update": updated,
        "scheduler": meta.get("scheduler"),
    }


def poll(path: Path) -> dict[str, Any]:
    """The cheap answer a page polls: has anything changed, is the experiment running."""
    with StoreReader(path) as reader:
        status, updated = reader.meta().get("status"), reader.last_update()
    return {"last_update": updated, "status": shown_status(path, status)}


def experiment_view(path: Path) -> dict[str, Any]:
    """Everything the experiment page shows except the learning curves."""
    with StoreReader(path) as reader:
        meta = reader.meta()
        trials = reader.trials()
        updated = reader.last_update()
        failed_events = reader.events(kinds="failed")
        exploits = reader.events(kinds="exploit")
        scheduler_state = reader.state("scheduler")
        history = reader.all_results()
    goals = objectives(meta.get("metric"), meta.get("mode"))
    rows = [_trial_row(t, history.get(t.trial_id, []), goals) for t in trials]
    params = sorted({k for row in rows for k in row["config"]})
    metric_keys = sorted(
        {
            k
            for row in rows
            for k in row["metrics"]
            if k not in _BOOKKEEPING and not k.startswith(_USAGE_PREFIX)  # own columns
        }
    )
    counts = Counter(t.status.value for t in trials)
    best = _best_trial(trials, goals)
    scheduler = scheduler_view(meta, scheduler_state, trials, history, exploits)
    if scheduler["kind"] == "pbt" and best is not None:
        lineage = pbt_schedule(path, best["trial_id"])
        scheduler["best_lineage"] = [s | {"config": flatten(s["config"])} for s in lineage]
    status = shown_status(path, meta.get("status"))
    view = {
        "name": path.name,
        "meta": {
            "status": status,
            "resume": resume_hint(path.name) if status == INTERRUPTED else None,
        }
        | {
            key: meta.get(key)
            for key in (
                "trainable",
                "searcher",
                "scheduler",
                "num_samples",
                "created_at",
                "ended_at",
                "stop_reason",
            )
        },
        "objectives": [{"metric": m, "mode": d} for m, d in goals],
        "counts": {s: counts.get(s, 0) for s in STATES},
        "last_update": updated,
        "trials": rows,
        "params": params,
        "metric_keys": metric_keys,
        "best": best,
        "non_finite_trials": sum(bool(row["non_finite"]) for row in rows),
        "failures": _failures(trials, failed_events),
        "scheduler": scheduler,
    }
    cleaned: dict[str, Any] = clean(view)
    return cleaned


def curves(path: Path, metric: str, trial_ids: list[str] | None) -> dict[str, Any]:
    """``metric`` against training_iteration for the given trials (None: all)."""
    with StoreReader(path) as reader:
        known = reader.trial_ids()
        wanted = known if trial_ids is None else [t for t in trial_ids if t in known]
        unknown = [] if trial_ids is None else [t for t in trial_ids if t not in known]
        series = {tid: _points(reader.results(tid), metric) for tid in wanted}
    cleaned: dict[str, Any] = clean({"metric": metric, "curves": series, "unknown": unknown})
    return cleaned


def all_curves(path: Path, metrics: list[str]) -> dict[str, dict[str, list[list[float]]]]:
    """Every trial's curve of each metric in `metrics` (metric -> trial id -> points)."""
    with StoreReader(path) as reader:
        history = reader.all_results()
    out = {m: {tid: _points(results, m) for tid, results in history.items()} for m in metrics}
    cleaned: dict[str, dict[str, list[list[float]]]] = clean(out)
    return cleaned


def _points(results: list[dict[str, Any]], metric: str) -> list[list[float]]:
    points = []
    for n, result in enumerate(results, start=1):
        value = metric_value(result, metric)
        step = as_number(result.get("training_iteration"))
        if value is not None and math.isfinite(value):
            points.append([step if step is not None else float(n), value])
    return points


# -- trials -------------------------------------------------------------------------------------
def _trial_row(
    trial: Trial, results: list[dict[str, Any]], goals: list[tuple[str, str]]
) -> dict[str, Any]:
    last = trial.last_result or {}
    metrics = {k: v for k, v in flatten(last).items() if as_number(v) is not None}
    best: dict[str, float | None] = {}
    non_finite = []  # objectives this trial reported NaN or infinite (flagged on the page)
    for metric, mode in goals:
        values = [metric_value(r, metric) for r in results]
        finite = [v for v in values if v is not None and math.isfinite(v)]
        best[metric] = (max(finite) if mode == "max" else min(finite)) if finite else None
        if len(finite) < sum(v is not None for v in values):
            non_finite.append(metric)
    return {
        "trial_id": trial.trial_id,
        "name": trial.name,
        "status": trial.status.value,
        "iteration": trial.iteration,
        "num_results": trial.num_results,
        "config": flatten(redact(trial.config)),
        "metrics": metrics,
        "best": best,
        "non_finite": non_finite,
        "resources": usage_of(trial),  # CPU%, peak RSS (MiB), GPU peak; OOM: the record's
        "stop_reason": trial.stop_reason,
        "error": trial.error.one_line() if trial.error else None,
        "attempt": trial.attempt,
        "started_at": trial.started_at,
        "ended_at": trial.ended_at,
    }


def _best_trial(trials: list[Trial], goals: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The trial whose last result is best (scope "last", as `tunefleet ls`); one goal only."""
    if len(goals) != 1:
        return None
    metric, mode = goals[0]
    scored = []
    for trial in trials:
        value = metric_value(trial.last_result or {}, metric)
        if value is not None and math.isfinite(value):
            scored.append((value if mode == "min" else -value, trial.index, trial.trial_id, value))
    if not scored:
        return None
    _, _, trial_id, value = min(scored)
    return {"trial_id": trial_id, "metric": metric, "value": value}


def _failures(trials: list[Trial], failed_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Final errors first (with the stderr tail from the log if not recorded), then retries."""
    by_id = {t.trial_id: t for t in trials}
    out = []
    for trial in trials:
        if trial.status is TrialStatus.ERROR and trial.error is not None:
            tail = trial.error.stderr_tail or _file_tail(Path(trial.path, "stderr.log"))
            out.append(_failure(trial, trial.error, tail, final=True))
    for event in failed_events:
        attempted = by_id.get(event["trial_id"])
        if attempted is None or not isinstance(event["data"], dict):
            continue
        record = FailureRecord.from_json(event["data"])
        error = attempted.error
        final = attempted.status is TrialStatus.ERROR and (
            error is not None and record.attempt == error.attempt
        )
        if not final:  # a failed attempt that was retried
            out.append(_failure(attempted, record, record.stderr_tail, final=False))
    return out


def _failure(
    trial: Trial, record: FailureRecord, tail: str | None, *, final: bool
) -> dict[str, Any]:
    return {
        "trial_id": trial.trial_id,
        "name": trial.name,
        "final": final,
        "attempt": record.attempt,
        "kind": record.kind.value,
        "cause": redact_text(record.one_line()),
        "traceback": redact_text(record.traceback) if record.traceback else None,
        "stderr_tail": redact_text(tail) if tail else None,
        "iteration": record.iteration,
        "time": record.time,
    }


def _file_tail(path: Path, lines: int = _STDERR_LINES) -> str | None:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else None


def is_experiment(path: Path) -> bool:
    return (path / DB_FILENAME).is_file()
