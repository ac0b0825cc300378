"""Learning curves at scale: streamed out of the store and downsampled per trial.

`downsample` cuts a curve to at most `cap` points and keeps its shape: the first and
the last point, and the lowest and the highest point of every bucket (so the
curve's minimum and maximum, hence its best point whatever the mode, always stay).
`stream_curves` reads only the wanted keys of each result (`StoreReader.result_values`)
one row at a time, and holds one trial's points at a time.

`trial_bests` is what the trials table needs of the results: each trial's best value
of each objective and whether it reported a NaN or an infinity. It is remembered per
experiment and per trial (by its number of results), so a page, a refresh or a
running experiment rereads only the trials that reported since.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunefleet._metrics import as_number
from tunefleet.store import StoreReader
from tunefleet.trial import Trial

#: most points of one trial's curve the dashboard sends
MAX_POINTS = 500
_STEP = "training_iteration"
_MEMO_EXPERIMENTS = 8

Points = list[list[float]]


def downsample(points: Points, cap: int = MAX_POINTS) -> Points:
    """At most `cap` of `points` (in order): first, last, and each bucket's min and max.

    Args:
        points: ``[x, y]`` pairs in the order reported.
        cap: the most points to keep (at least 4).

    Raises:
        ValueError: `cap` below 4.
    """
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 4:
        raise ValueError(f"points={cap!r}: the cap on a curve's points must be an integer >= 4")
    n = len(points)
    if n <= cap:
        return points
    buckets = (cap - 2) // 2
    inner = n - 2
    keep = {0, n - 1}
    for b in range(buckets):
        lo = 1 + b * inner // buckets
        hi = 1 + (b + 1) * inner // buckets
        if lo >= hi:
            continue
        chunk = range(lo, hi)
        keep.add(min(chunk, key=lambda i: points[i][1]))
        keep.add(max(chunk, key=lambda i: points[i][1]))
    return [points[i] for i in sorted(keep)]


def stream_curves(
    reader: StoreReader, metrics: list[str], cap: int, trial_ids: list[str] | None = None
) -> Iterator[tuple[str, dict[str, Points], set[str]]]:
    """Per trial: each metric's downsampled curve (vs training_iteration) and the metrics
    it reported as NaN or infinite. Trials with no results are not yielded."""
    current: str | None = None
    series: dict[str, Points] = {}
    bad: set[str] = set()
    n = 0
    for trial_id, values in reader.result_values([*metrics, _STEP], trial_ids):
        if trial_id != current:
            if current is not None:
                yield current, {m: downsample(p, cap) for m, p in series.items()}, bad
            current, series, bad, n = trial_id, {m: [] for m in metrics}, set(), 0
        n += 1
        step = values[-1]
        step = float(step) if type(step) is int else as_number(step)
        x = step if step is not None and math.isfinite(step) else float(n)
        for metric, raw in zip(metrics, values, strict=False):
            kind = type(raw)  # the common case first: a float or an int from SQLite
            value = float(raw) if kind is float or kind is int else as_number(raw)
            if value is None:
                continue
            if math.isfinite(value):
                series[metric].append([x, value])
            else:
                bad.add(metric)
    if current is not None:
        yield current, {m: downsample(p, cap) for m, p in series.items()}, bad


# -- each trial's best value of each objective, remembered --------------------------------------
_memo: dict[tuple[Path, tuple[str, ...]], dict[str, tuple[Any, dict[str, Any]]]] = {}
_memo_lock = threading.Lock()


def trial_bests(
    reader: StoreReader, trials: list[Trial], goals: list[tuple[str, str]]
) -> dict[str, dict[str, Any]]:
    """trial id -> ``{"best": {metric: value or None}, "non_finite": [metrics]}``."""
    key = (reader.db_path, tuple(f"{m}:{d}" for m, d in goals))
    with _memo_lock:
        known = dict(_memo.get(key, {}))
    stamps = {t.trial_id: stamp(t) for t in trials}
    stale = [tid for tid, now in stamps.items() if tid not in known or known[tid][0] != now]
    if stale:
        fresh = {tid: bests_of({}, set(), goals) for tid in stale}
        metrics = [m for m, _ in goals]
        ranges = reader.result_ranges(metrics) if len(stale) > len(trials) // 2 else None
        if ranges is not None:  # most trials: one aggregate query in SQLite
            for tid in stale:
                unreadable, pairs = ranges.get(tid, (0, []))
                if not unreadable and pairs:
                    fresh[tid] = _bests_of_ranges(pairs, goals)
            stale = [tid for tid in stale if ranges.get(tid, (0, []))[0]]  # NaN, inf: Python
        wanted = None if ranges is None and len(stale) > len(trials) // 2 else stale
        for trial_id, series, bad in stream_curves(reader, metrics, 4, wanted):
            if trial_id in fresh:
                fresh[trial_id] = bests_of(series, bad, goals)
        remember(reader, trials, goals, fresh)
        known.update({tid: (stamps[tid], entry) for tid, entry in fresh.items()})
    return {t.trial_id: known[t.trial_id][1] for t in trials}


def bests_of(
    series: dict[str, Points], bad: set[str], goals: list[tuple[str, str]]
) -> dict[str, Any]:
    """A trial's entry of `trial_bests` from its (downsampled: extremes kept) curves."""
    best = {}
    for metric, mode in goals:
        ys = [p[1] for p in series.get(metric, [])]
        best[metric] = (max(ys) if mode == "max" else min(ys)) if ys else None
    return {"best": best, "non_finite": [m for m, _ in goals if m in bad]}


def _bests_of_ranges(
    pairs: list[tuple[float | None, float | None]], goals: list[tuple[str, str]]
) -> dict[str, Any]:
    """`bests_of` from each objective's lowest and highest value (all finite)."""
    best: dict[str, float | None] = {}
    for (low, high), (metric, mode) in zip(pairs, goals, strict=True):
        value = high if mode == "max" else low
        best[metric] = None if value is None else float(value)
    return {"best": best, "non_finite": []}


def remember(
    reader: StoreReader,
    trials: list[Trial],
    goals: list[tuple[str, str]],
    found: dict[str, dict[str, Any]],
) -> None:
    """Keep `found` (trial id -> `bests_of`) for `trial_bests`, as of `trials`' state."""
    key = (reader.db_path, tuple(f"{m}:{d}" for m, d in goals))
    by_id = {t.trial_id: t for t in trials}
    with _memo_lock:
        if key not in _memo and len(_memo) >= _MEMO_EXPERIMENTS:
            _memo.pop(next(iter(_memo)))
        known = _memo.setdefault(key, {})
        for tid, entry in found.items():
            known[tid] = (stamp(by_id[tid]), entry)


def stamp(trial: Trial) -> tuple[int, int, int]:
    """What changes when a trial's results change (a rewind changes its iteration)."""
    return (trial.num_results, trial.attempt, trial.iteration)
