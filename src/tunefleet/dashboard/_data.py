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
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from tunefleet._metrics import as_number, flatten, metric_value, objectives
from tunefleet._redact import redact, redact_text
from tunefleet.dashboard._curves import (
    MAX_POINTS,
    bests_of,
    downsample,
    remember,
    stamp,
    stream_curves,
    trial_bests,
)
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
        meta, trials, updated = reader.meta(), reader.trials(), reader.last_write()
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
        status, updated = reader.meta().get("status"), reader.last_write()
    return {"last_update": updated, "status": shown_status(path, status)}


def experiment_view(
    path: Path,
    offset: int = 0,
    limit: int | None = None,
    sort: str | None = "index",
    descending: bool = False,
    state: str | None = None,
) -> dict[str, Any]:
    """Everything the experiment page shows except the learning curves.

    Args:
        path: the experiment directory.
        offset, limit: the page of the trials table (None: every trial).
        sort: the column the trials are sorted by (`SORT_KEYS` explains them); None:
            by the first objective's last value, best first (else by index).
        descending: sort the other way (trials without a value stay last).
        state: only trials in this state (``RUNNING``...).

    Raises:
        ValueError: a bad offset, limit, sort or state, naming the value and the rule.
    """
    _check_page(offset, limit, state)
    with StoreReader(path) as reader:
        meta = reader.meta()
        trials = _trials(reader)
        updated = reader.last_write()
        failed_events = reader.events(kinds="failed")
        exploits = reader.events(kinds="exploit")
        scheduler_state = reader.state("scheduler")
        goals = objectives(meta.get("metric"), meta.get("mode"))
        bests = trial_bests(reader, trials, goals)
        history = _asha_history(reader, scheduler_state)
    params, keys = _table_keys(path, trials)
    if sort is None:
        first = goals[0] if goals else None
        sort, descending = ("last:" + first[0], first[1] == "max") if first else ("index", False)
    place = {t.trial_id: i for i, t in enumerate(trials)}  # the table's "#"
    shown = [t for t in trials if state is None or t.status.value == state]
    shown = _sorted(shown, sort, descending, place, bests)
    chosen = shown[offset:] if limit is None else shown[offset : offset + limit]
    page = [_trial_row(t, bests[t.trial_id], goals) | {"index": place[t.trial_id]} for t in chosen]
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
        "trials": page,
        "page": {
            "offset": offset,
            "limit": limit,
            "sort": sort,
            "descending": descending,
            "state": state,
            "matching": len(shown),
            "total": len(trials),
        },
        "params": params,
        "metric_keys": keys,
        "best": best,
        "non_finite_trials": sum(bool(b["non_finite"]) for b in bests.values()),
        "failures": _failures(trials, failed_events),
        "scheduler": scheduler,
    }
    cleaned: dict[str, Any] = clean(view)
    return cleaned


#: the trials table's sort keys: these names, or "last:M" / "best:M" (metric M of the last
#: result / best over all results), "cfg:P" (hyperparameter P), "res:K" (resource usage K)
SORT_KEYS = ("index", "trial_id", "status", "iteration", "note")
_SORT_PREFIXES = ("last:", "best:", "cfg:", "res:")


def _check_page(offset: int, limit: int | None, state: str | None) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset={offset!r}: the first row of a page must be an integer >= 0")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit={limit!r}: a page holds an integer >= 1 of trials")
    if state is not None and state not in STATES:
        raise ValueError(f"state={state!r}: a trial state is one of {', '.join(STATES)}")


def _sorted(
    trials: list[Trial],
    sort: str,
    descending: bool,
    place: dict[str, int],
    bests: dict[str, dict[str, Any]],
) -> list[Trial]:
    """`trials` by `sort` (numbers before text, those without a value last, then by index)."""
    if sort not in SORT_KEYS and not sort.startswith(_SORT_PREFIXES):
        raise ValueError(
            f"sort={sort!r}: sort by one of {', '.join(SORT_KEYS)}, or last:METRIC, "
            "best:METRIC, cfg:PARAM, res:KEY"
        )
    kind, _, name = sort.partition(":")

    def value(t: Trial) -> Any:
        if kind == "last":
            return metric_value(t.last_result or {}, name)
        if kind == "best":
            return bests[t.trial_id]["best"].get(name)
        if kind == "cfg":
            return flatten(redact(t.config)).get(name)
        if kind == "res":
            return usage_of(t).get(name)
        if kind == "note":
            return (t.error.one_line() if t.error else None) or t.stop_reason or ""
        if kind == "index":
            return place[t.trial_id]
        if kind == "status":
            return t.status.value
        return t.iteration if kind == "iteration" else t.trial_id

    keyed = []
    for t in trials:
        v = value(t)
        number = as_number(v)
        if number is not None and math.isnan(number):
            number = None
        missing = v is None or (number is None and isinstance(v, float))
        rank = (0, number, "") if number is not None else (1, 0.0, "" if v is None else str(v))
        keyed.append((missing, rank, t))
    present = [k for k in keyed if not k[0]]
    present.sort(key=lambda k: k[1], reverse=descending)  # stable: ties in index order
    return [k[2] for k in present] + [k[2] for k in keyed if k[0]]


_keys_memo: dict[Path, dict[str, tuple[Any, list[str], list[str]]]] = {}
_trials_memo: dict[Path, dict[str, tuple[Any, Trial]]] = {}
_memo_lock = threading.Lock()


def _trials(reader: StoreReader) -> list[Trial]:
    """`reader.trials()`, decoding only the trials changed since the last view."""
    with _memo_lock:
        if reader.db_path not in _trials_memo and len(_trials_memo) >= 8:
            _trials_memo.pop(next(iter(_trials_memo)))
        known = _trials_memo.setdefault(reader.db_path, {})
        return reader.trials_reusing(known)


def _table_keys(path: Path, trials: list[Trial]) -> tuple[list[str], list[str]]:
    """The hyperparameters and the metrics of the table (remembered per trial)."""
    with _memo_lock:
        if path.resolve() not in _keys_memo and len(_keys_memo) >= 8:
            _keys_memo.pop(next(iter(_keys_memo)))
        memo = _keys_memo.setdefault(path.resolve(), {})
    params: set[str] = set()
    keys: set[str] = set()
    for t in trials:
        now = (stamp(t), t.status)
        known = memo.get(t.trial_id)
        if known is None or known[0] != now:
            known = (now, list(flatten(redact(t.config))), metric_keys([t]))
            memo[t.trial_id] = known
        params.update(known[1])
        keys.update(known[2])
    return sorted(params), sorted(keys)


def _asha_history(
    reader: StoreReader, state: dict[str, Any] | None
) -> dict[str, list[dict[str, Any]]]:
    """What ASHA's view matches rung scores against: each result's metric and iteration."""
    if isinstance(state, dict) and isinstance(state.get("base"), dict):
        state = state["base"]
    if not isinstance(state, dict) or not ({"rungs", "records"} & state.keys()):
        return {}
    metric = state.get("metric")
    if not isinstance(metric, str):
        return {}
    history: dict[str, list[dict[str, Any]]] = {}
    for trial_id, (value, step) in reader.result_values([metric, "training_iteration"]):
        history.setdefault(trial_id, []).append({metric: value, "training_iteration": step})
    return history


def curves(
    path: Path, metric: str, trial_ids: list[str] | None, points: int = MAX_POINTS
) -> dict[str, Any]:
    """``metric`` against training_iteration for the given trials (None: all), each curve
    downsampled to at most `points` points (`downsample`: its extremes stay)."""
    downsample([], points)  # checks `points`
    with StoreReader(path) as reader:
        known = reader.trial_ids()
        known_set = set(known)
        wanted = known if trial_ids is None else [t for t in trial_ids if t in known_set]
        unknown = [] if trial_ids is None else [t for t in trial_ids if t not in known_set]
        series: dict[str, Any] = {key: [] for key in wanted}
        ask = None if trial_ids is None else wanted
        for trial_id, found, _ in stream_curves(reader, [metric], points, ask):
            series[trial_id] = found[metric]
    cleaned: dict[str, Any] = clean({"metric": metric, "unknown": unknown})
    cleaned["curves"] = _clean_curves({metric: series})[metric]
    return cleaned


def all_curves(
    path: Path,
    metrics: list[str],
    points: int = MAX_POINTS,
    goals: list[tuple[str, str]] | None = None,
) -> dict[str, dict[str, list[list[float]]]]:
    """Every trial's curve of each metric in `metrics` (metric -> trial id -> points),
    read in one pass and downsampled to at most `points` points each. With `goals` (all
    among `metrics`), each trial's best values are kept for `experiment_view` too."""
    downsample([], points)
    with StoreReader(path) as reader:
        trials = reader.trials() if goals else []
        ids = reader.trial_ids()
        out: dict[str, dict[str, list[list[float]]]] = {m: {t: [] for t in ids} for m in metrics}
        found = {t.trial_id: bests_of({}, set(), goals or []) for t in trials}
        for trial_id, series, bad in stream_curves(reader, metrics, points):
            for metric in metrics:
                out[metric][trial_id] = series[metric]
            if goals and trial_id in found:
                found[trial_id] = bests_of(series, bad, goals)
        if goals:
            remember(reader, trials, goals, found)
    cleaned: dict[str, dict[str, list[list[float]]]] = _clean_curves(out)
    return cleaned


def _clean_curves(curves: dict[str, Any]) -> Any:
    """`clean(curves)`, but only the names are looked at: the points are finite numbers."""
    names = {m: dict.fromkeys(series, 0) for m, series in curves.items()}
    return curves if clean(names) == names else clean(curves)


def metric_keys(trials: list[Trial]) -> list[str]:
    """The numeric keys of the trials' last results, bookkeeping and resources left out."""
    keys = {
        k
        for t in trials
        for k, v in flatten(t.last_result or {}).items()
        if as_number(v) is not None
    }
    # bookkeeping, and the resources (the table's own columns)
    return sorted(k for k in keys if k not in _BOOKKEEPING and not k.startswith(_USAGE_PREFIX))


# -- trials -------------------------------------------------------------------------------------
def _trial_row(trial: Trial, bests: dict[str, Any], goals: list[tuple[str, str]]) -> dict[str, Any]:
    last = trial.last_result or {}
    metrics = {k: v for k, v in flatten(last).items() if as_number(v) is not None}
    best = {metric: bests["best"].get(metric) for metric, _ in goals}
    non_finite = list(bests["non_finite"])  # objectives it reported NaN or inf (flagged)
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
