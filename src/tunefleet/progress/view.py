"""What the live progress display shows, and its two renderings: rich (a terminal) and
HTML (Jupyter).

`Snapshot.take` reads the controller once per refresh; everything in a snapshot is
already redacted and cut to a size that fits on a screen, so the renderers only lay
it out.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunefleet._metrics import metric_value
from tunefleet._redact import redact, redact_text
from tunefleet.progress._text import short, usage_cell, why_ended
from tunefleet.progress.reporters import ViewOptions
from tunefleet.trial import Trial, TrialStatus

MAX_METRIC_COLUMNS = 4
NON_FINITE_MARK = "!"  # on the metric cell of a trial that reported NaN or inf
_NAMED_TRIALS = 5
_CONFIG_CHARS = 60
_CAUSE_CHARS = 100
# Keys every result carries: shown as columns of their own or not at all.
AUTO_KEYS = frozenset(
    {
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "timestamp",
        "trial_id",
        "date",
        "hostname",
        "node_ip",
        "pid",
        "done",
        "iterations_since_restore",
        "time_since_restore",
        "checkpoint_dir_name",
        "config",
        "experiment_tag",
    }
)
_STATES = [s.value for s in TrialStatus]
_USAGE = "resources"  # the resources column (ViewOptions.show_resources)


@dataclass
class Row:
    trial_id: str
    status: str
    iteration: int
    metrics: dict[str, str]
    config: str


@dataclass
class Snapshot:
    """One refresh of the display: counts, budget, the best trial, running trials,
    recent failures."""

    elapsed_s: float
    counts: dict[str, int]
    total: int | None  # trials the run will make, when known
    budget_s: float | None  # the time budget, when set
    metric: str | None
    mode: str | None
    best: Row | None = None
    best_value: str = ""
    running: list[Row] = field(default_factory=list)
    more_running: int = 0
    metric_columns: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (trial id, cause)
    more_failures: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # column -> header shown
    non_finite: dict[str, str] = field(default_factory=dict)  # trial id -> its NaN metric
    ended: dict[str, int] = field(default_factory=dict)  # why trials ended -> how many

    def header(self, column: str) -> str:
        return self.headers.get(column, column)

    @property
    def finished(self) -> int:
        return self.counts.get("TERMINATED", 0) + self.counts.get("ERROR", 0)

    @property
    def remaining_s(self) -> float | None:
        return None if self.budget_s is None else max(0.0, self.budget_s - self.elapsed_s)

    def fraction(self) -> float | None:
        """How far the run is: finished trials of a known total, else of the time budget."""
        parts = []
        if self.total:
            parts.append(self.finished / self.total)
        if self.budget_s:
            parts.append(self.elapsed_s / self.budget_s)
        return min(1.0, max(parts)) if parts else None

    @classmethod
    def take(
        cls,
        trials: list[Trial],
        *,
        elapsed_s: float,
        total: int | None,
        budget_s: float | None,
        metric: str | None,
        mode: str | None,
        best: Trial | None,
        failed_order: list[str],
        options: ViewOptions | None = None,
        non_finite: Mapping[str, str] | None = None,
    ) -> Snapshot:
        opts = options or ViewOptions()
        counts = Counter(t.status.value for t in trials)
        snap = cls(
            elapsed_s=elapsed_s,
            counts={s: counts[s] for s in _STATES if counts.get(s)},
            total=total,
            budget_s=budget_s,
            metric=metric,
            mode=mode,
            headers=dict(opts.aliases),
            non_finite=dict(non_finite or {}),
        )
        running = [t for t in trials if t.status is TrialStatus.RUNNING]
        snap.metric_columns = (
            list(opts.metric_columns)
            if opts.metric_columns is not None
            else _metric_columns(running or ([best] if best else []), metric)
        )
        usage_on = opts.resources_shown() and _USAGE not in snap.metric_columns
        if usage_on and opts.metric_columns is None:  # room at 80 columns for its column
            del snap.metric_columns[MAX_METRIC_COLUMNS - 1 :]
        params = opts.parameter_columns
        if best is not None and best.last_result and metric:
            snap.best = _row(best, snap.metric_columns, params, snap.non_finite)
            snap.best_value = _num(metric_value(best.last_result, metric))
        order = _by_metric(metric, mode) if opts.sort_by_metric and metric else _by_index
        shown = sorted(running, key=order)[: opts.max_running_rows]
        snap.running = [_row(t, snap.metric_columns, params, snap.non_finite) for t in shown]
        snap.more_running = len(running) - len(shown)
        if usage_on:  # show_resources: one more column, "CPU% peak RSS" of each running trial
            snap.metric_columns.append(_USAGE)
            snap.headers.setdefault(_USAGE, "cpu rss")
            for row, trial in zip(snap.running, shown, strict=True):
                row.metrics[_USAGE] = usage_cell(trial)
        by_id = {t.trial_id: t for t in trials}
        recent = [by_id[i] for i in reversed(failed_order) if i in by_id]
        recent = recent[: opts.max_failure_rows]
        snap.failures = [(t.trial_id, _cause(t)) for t in recent]
        snap.more_failures = len(failed_order) - len(recent)
        snap.ended = ended_counts(trials)
        return snap

    def headline(self) -> str:
        """The one-line form: what a log file or a CI console gets."""
        parts = [f"{n} {s.lower()}" for s, n in self.counts.items()]
        line = f"[{duration(self.elapsed_s)}] "
        line += f"{self.finished}/{self.total} trials done" if self.total else "trials"
        line += f": {', '.join(parts) or 'starting'}"
        if self.remaining_s is not None:
            line += f" | {duration(self.remaining_s)} of the time budget left"
        if self.best is not None:
            line += f" | best {self.metric}={self.best_value} ({self.best.trial_id})"
        if self.non_finite:
            line += f" | {_trials(len(self.non_finite))} reported NaN/inf"
        return line

    def nan_note(self) -> str | None:
        """The line under the table counting the trials that reported NaN or inf."""
        if not self.non_finite:
            return None
        running = {row.trial_id for row in self.running}
        return non_finite_note(self.non_finite, [t for t in self.non_finite if t in running])


def non_finite_note(flagged: Mapping[str, str], named: list[str]) -> str:
    """``3 trials reported NaN or inf (loss): recorded, never ranked best: t1, t2``."""
    metrics = ", ".join(sorted(set(flagged.values())))
    text = f"{NON_FINITE_MARK} {_trials(len(flagged))} reported NaN or inf ({metrics}): "
    text += "recorded, never ranked best"
    if named:
        more = len(named) - _NAMED_TRIALS
        text += ": " + ", ".join(named[:_NAMED_TRIALS]) + (f" and {more} more" if more > 0 else "")
    return text


def ended_counts(trials: list[Trial]) -> dict[str, int]:
    """Why the finished trials ended, most common first ("stopped by ASHAScheduler"
    without the iteration, so that one scheduler's stops add up)."""
    reasons = Counter(
        why_ended(t).split(" at iter ")[0]
        for t in trials
        if t.status in (TrialStatus.TERMINATED, TrialStatus.ERROR)
    )
    return dict(reasons.most_common())


def ended_line(ended: Mapping[str, int]) -> str:
    """``ended: 6 stopped by ASHAScheduler, 2 completed``."""
    return "ended: " + ", ".join(f"{n} {why}" for why, n in ended.items())


def _trials(n: int) -> str:
    return f"{n} trial" if n == 1 else f"{n} trials"


def _metric_columns(trials: list[Trial], metric: str | None) -> list[str]:
    """The experiment's metric first, then the other numbers the trials report."""
    names: list[str] = [metric] if metric else []
    for trial in trials:
        for key, value in (trial.last_result or {}).items():
            if len(names) >= MAX_METRIC_COLUMNS:
                return names
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and key not in AUTO_KEYS and key not in names:
                names.append(key)
    return names


def _by_index(trial: Trial) -> tuple[float, int]:
    return (0.0, trial.index)


def _by_metric(metric: str, mode: str | None) -> Any:
    sign = -1.0 if mode == "max" else 1.0

    def key(trial: Trial) -> tuple[float, int]:
        value = metric_value(trial.last_result or {}, metric)
        ok = value is not None and math.isfinite(value)
        return (sign * value if ok else math.inf, trial.index)  # type: ignore[operator]

    return key


def _row(
    trial: Trial, columns: list[str], params: list[str] | None, non_finite: dict[str, str]
) -> Row:
    result = trial.last_result or {}
    flagged = non_finite.get(trial.trial_id)
    return Row(
        trial_id=trial.trial_id,
        status=trial.status.value,
        iteration=trial.iteration,
        metrics={
            name: _num(metric_value(result, name))
            + (f" {NON_FINITE_MARK}" if name == flagged else "")
            for name in columns
        },
        config=_short(_config_text(trial.config, params), _CONFIG_CHARS),
    )


def _config_text(config: dict[str, Any], params: list[str] | None) -> str:
    shown = redact(config)
    if params is not None:
        return ", ".join(f"{p}={_value(_lookup(shown, p))}" for p in params)
    return ", ".join(
        f"{short(k)}={_value(v)}" for k, v in shown.items() if not str(k).startswith("__")
    )


def _value(value: Any) -> str:
    return "-" if value is None else short(value)


def _lookup(config: dict[str, Any], path: str) -> Any:
    """`config`'s value at a dotted path ("model.width"), or None."""
    if path in config:
        return config[path]
    node: Any = config
    for part in path.split("/") if "/" in path else path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _cause(trial: Trial) -> str:
    cause = trial.error.one_line() if trial.error is not None else "unknown cause"
    return _short(redact_text(cause), _CAUSE_CHARS)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# -- rich ------------------------------------------------------------------------------------
_STATE_STYLES = {
    "PENDING": "yellow",
    "RUNNING": "cyan",
    "PAUSED": "magenta",
    "TERMINATED": "green",
    "ERROR": "bold red",
}


def rich_view(snap: Snapshot) -> Any:
    """A rich renderable of the snapshot (rich is imported here, on the first refresh)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    head = Text(f"tunefleet {duration(snap.elapsed_s)}  ", style="bold")
    for state, n in snap.counts.items():
        head.append(f"{n} {state.lower()}  ", style=_STATE_STYLES.get(state, ""))
    if snap.remaining_s is not None:
        head.append(f"{duration(snap.remaining_s)} of the time budget left")
    parts.append(head)
    fraction = snap.fraction()
    if fraction is not None:
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            ProgressBar(total=1.0, completed=fraction, width=40),
            Text(
                f"{snap.finished}/{snap.total} trials" if snap.total else f"{fraction:.0%}",
                style="dim",
            ),
        )
        parts.append(bar)
    if snap.best is not None:
        parts.append(
            Text.assemble(
                ("best ", "bold"),
                (f"{snap.best.trial_id}  {snap.metric}={snap.best_value}", "bold green"),
                (f"  ({snap.mode}, iteration {snap.best.iteration})  ", "dim"),
                (snap.best.config, ""),
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    if snap.running:
        # Narrow terminal: only the config column shrinks (one line, cut with "…");
        # trial ids, iterations and metric names keep their width.
        table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
        ids = [row.trial_id for row in snap.running]
        table.add_column("running", no_wrap=True, min_width=max(map(len, ids), default=7))
        table.add_column("iter", justify="right", no_wrap=True)
        for name in snap.metric_columns:
            title = snap.header(name)
            cells = [len(row.metrics.get(name, "-")) for row in snap.running]
            table.add_column(
                title, justify="right", no_wrap=True, min_width=max(len(title), *cells)
            )
        table.add_column("config", overflow="ellipsis")
        for row in snap.running:
            table.add_row(
                row.trial_id,
                str(row.iteration),
                *(row.metrics.get(n, "-") for n in snap.metric_columns),
                Text(row.config, no_wrap=True, overflow="ellipsis"),
            )
        if snap.more_running:
            table.add_row(f"… {snap.more_running} more", "")
        parts.append(table)
    if snap.ended:
        parts.append(Text(ended_line(snap.ended), style="dim"))
    note = snap.nan_note()
    if note is not None:
        parts.append(Text(note, style="yellow"))
    for trial_id, cause in snap.failures:
        parts.append(Text.assemble(("failed ", "bold red"), (f"{trial_id}: ", "red"), cause))
    if snap.more_failures:
        parts.append(Text(f"… and {snap.more_failures} more failed", style="red"))
    return Group(*parts)


# -- HTML (Jupyter) --------------------------------------------------------------------------
def html_view(snap: Snapshot) -> str:
    """The snapshot as a small HTML fragment for a notebook's output cell."""
    e = html.escape
    out = ['<div class="tunefleet-progress" style="font-family: monospace">']
    counts = " · ".join(f"{n} {e(s.lower())}" for s, n in snap.counts.items()) or "starting"
    out.append(f"<b>tunefleet</b> {duration(snap.elapsed_s)} · {counts}")
    if snap.remaining_s is not None:
        out.append(f" · {duration(snap.remaining_s)} of the time budget left")
    fraction = snap.fraction()
    if fraction is not None:
        label = f"{snap.finished}/{snap.total} trials" if snap.total else f"{fraction:.0%}"
        out.append(f'<br><progress value="{fraction:.4f}" max="1"></progress> {e(label)}')
    if snap.best is not None:
        out.append(
            f"<br><b>best</b> {e(snap.best.trial_id)} {e(str(snap.metric))}={e(snap.best_value)}"
            f" ({e(str(snap.mode))}, iteration {snap.best.iteration}): {e(snap.best.config)}"
        )
    if snap.running:
        heads = ["running", "iter", *map(snap.header, snap.metric_columns), "config"]
        out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in heads) + "</tr>")
        for row in snap.running:
            cells = [
                row.trial_id,
                str(row.iteration),
                *(row.metrics.get(n, "-") for n in snap.metric_columns),
                row.config,
            ]
            out.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
        out.append("</table>")
        if snap.more_running:
            out.append(f"… {snap.more_running} more running")
    if snap.ended:
        out.append(f"<br>{e(ended_line(snap.ended))}")
    note = snap.nan_note()
    if note is not None:
        out.append(f'<br><span style="color:#b60">{e(note)}</span>')
    for trial_id, cause in snap.failures:
        out.append(f'<br><span style="color:#c00">failed {e(trial_id)}: {e(cause)}</span>')
    if snap.more_failures:
        out.append(f"<br>… and {snap.more_failures} more failed")
    out.append("</div>")
    return "".join(out)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a display handle can be updated in place)."""
    import sys

    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"
