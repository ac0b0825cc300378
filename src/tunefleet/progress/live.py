"""Progress while a run goes on, and the end-of-run summary.

verbose=0 prints nothing. 1: a live view and the summary. The view is a rich table
redrawn in place on a terminal (counts per state, a progress bar when the total or a
time budget is known, the best trial, the running trials with their latest metrics,
recent failures with their cause); an HTML table updated in place in Jupyter; a plain
line every 30 s anywhere else (CI, Slurm logs), so logs are not flooded. 2: also one
line per trial that ends. 3: also one line per result.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import shlex
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from tunefleet._metrics import (
    MetricSpec,
    ModeSpec,
    is_feasible,
    metric_value,
    objective_point,
    objectives,
    pareto_front,
)
from tunefleet._redact import RedactingFilter, redact, redact_text
from tunefleet.progress import view
from tunefleet.progress._text import command, config_text, short, why_ended
from tunefleet.progress.reporters import ProgressReporter, ViewOptions
from tunefleet.trial import StopCause, Trial, TrialStatus


@contextlib.contextmanager
def warnings_shown(verbose: int) -> Iterator[None]:
    """Show tunefleet's warnings on stderr while a run goes on, unless logging is set up.

    The package's logger has only a NullHandler, so without this a user who never
    configured logging would miss warnings such as a renamed experiment directory
    or a Ctrl-C being handled. With verbose=0, or handlers of their own, nothing changes.
    """
    logger = logging.getLogger("tunefleet")
    configured = logging.getLogger().handlers or any(
        not isinstance(h, logging.NullHandler) for h in logger.handlers
    )
    if verbose == 0 or configured:
        yield
        return
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("tunefleet %(levelname)s: %(message)s"))
    handler.addFilter(RedactingFilter())  # also for records of child loggers
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


class _CurrentStderr:
    """Whatever `sys.stderr` is when a record is written: the live view redirects it,
    so that warnings are printed above the table instead of through it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@dataclass(frozen=True)
class RunProgress:
    """What the live view shows of a run at one step; the controller builds one per step.

    `trials` is the controller's own list, read-only, valid for the call it is given to.
    """

    trials: Sequence[Trial]
    elapsed_s: float  # the experiment's run time, over all its drivers (resumes included)
    total: int | None  # trials the run will make, when known
    budget_s: float | None  # the time budget, when set
    # trial id -> the objective it reported NaN or infinite (recorded, ranked worst)
    non_finite: Mapping[str, str] = field(default_factory=dict)


class StatusReporter:
    def __init__(
        self,
        *,
        verbose: int,
        metric: MetricSpec,
        mode: ModeSpec,
        constraints: list[str] | None = None,
        out: TextIO | None = None,
        progress_reporter: ProgressReporter | None = None,
    ):
        self.verbose = verbose
        # One objective: its best trial is shown. Several: the Pareto front at the end.
        self.objectives = objectives(metric, mode)
        self.constraints = list(constraints or [])  # the front leaves infeasible trials out
        single = len(self.objectives) == 1 and isinstance(metric, str)
        self.metric: str | None = self.objectives[0][0] if single else None
        self.mode: str | None = self.objectives[0][1] if single else None
        if metric is None and progress_reporter is not None and progress_reporter.metric:
            self.metric, self.mode = progress_reporter.metric, progress_reporter.mode or "min"
        self.options = progress_reporter.options if progress_reporter else ViewOptions()
        self.overwrite = getattr(progress_reporter, "overwrite", True)
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.notebook = out is None and view.in_notebook()
        self.live = self.tty or self.notebook
        self.interval = self.options.interval_s or (1.0 if self.live else 30.0)
        self.start = time.monotonic()
        self.total: int | None = None  # trials the run will make, when known
        self.budget_s: float | None = None
        self._last = 0.0
        self._reported_ends: set[str] = set()
        self._results_seen: dict[str, int] = {}
        self._failed_order: list[str] = []
        self._rich: Any = None  # rich.live.Live, started on the first refresh
        self._display: Any = None  # IPython's display handle

    def update(self, progress: RunProgress) -> None:
        if self.verbose == 0:
            return
        self._note_failures(progress.trials)
        if self.verbose >= 2:
            self._trial_lines(progress.trials)
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        snap = self.snapshot(progress)
        if self.notebook:
            self._show_html(view.html_view(snap))
        elif self.tty:
            self._show_rich(view.rich_view(snap))
        else:
            self._print(snap.headline())

    def snapshot(self, progress: RunProgress) -> view.Snapshot:
        trials = list(progress.trials)
        self._note_failures(trials)
        budget = progress.budget_s
        return view.Snapshot.take(
            trials,
            elapsed_s=progress.elapsed_s if budget else time.monotonic() - self.start,
            total=progress.total,
            budget_s=budget,
            metric=self.metric,
            mode=self.mode,
            best=self.best(trials),
            failed_order=self._failed_order,
            options=self.options,
            non_finite=progress.non_finite,
        )

    def status_line(self, trials: list[Trial]) -> str:
        """The plain one-line status (what a log gets every 30 s)."""
        return view.Snapshot.take(
            trials,
            elapsed_s=time.monotonic() - self.start,
            total=None,
            budget_s=None,
            metric=self.metric,
            mode=self.mode,
            best=self.best(trials),
            failed_order=self._failed_order,
            options=self.options,
        ).headline()

    def _note_failures(self, trials: Iterable[Trial]) -> None:
        known = set(self._failed_order)
        for trial in trials:
            if trial.status is TrialStatus.ERROR and trial.trial_id not in known:
                self._failed_order.append(trial.trial_id)

    def _trial_lines(self, trials: Iterable[Trial]) -> None:
        for trial in trials:
            if self.verbose >= 3 and trial.last_result:
                seen = self._results_seen.get(trial.trial_id, 0)
                if trial.num_results > seen:
                    self._results_seen[trial.trial_id] = trial.num_results
                    self._print(f"Trial {trial.trial_id} result: {_result_text(trial)}")
            if trial.status.is_finished and trial.trial_id not in self._reported_ends:
                self._reported_ends.add(trial.trial_id)
                self._print(f"Trial {trial.name} {trial.status.value}: {self._describe(trial)}")

    def _show_rich(self, renderable: Any) -> None:
        if self._rich is None:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.out, force_terminal=True)
            self._rich = Live(
                renderable,
                console=console,
                auto_refresh=False,  # redrawn by update(), at most once a second
                redirect_stdout=self.out is sys.stdout,
                redirect_stderr=self.out is sys.stdout,
            )
            self._rich.start()
        self._rich.update(renderable, refresh=True)

    def _show_html(self, text: str) -> None:
        ipd: Any = importlib.import_module("IPython.display")  # untyped
        if self._display is None or not self.overwrite:
            self._display = ipd.display(ipd.HTML(text), display_id=True)
        else:
            self._display.update(ipd.HTML(text))

    def best(self, trials: list[Trial]) -> Trial | None:
        if not self.metric or not self.mode:
            return None
        sign = 1.0 if self.mode == "min" else -1.0
        scored = []
        for trial in trials:
            value = metric_value(trial.last_result or {}, self.metric)
            if value is not None and math.isfinite(value):
                scored.append((sign * value, trial.index, trial))
        return min(scored)[2] if scored else None

    def summary(
        self,
        trials: list[Trial],
        experiment_path: str,
        stop_reason: StopCause | str | None,
        non_finite: Mapping[str, str] | None = None,
    ) -> str:
        counts = Counter(t.status.value for t in trials)
        lines = [
            "",
            f"Experiment finished in {_duration(time.monotonic() - self.start)}: "
            + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials"),
        ]
        if stop_reason:
            lines.append(f"Stopped early: {stop_reason}")
        best = self.best(trials)
        if best is not None and best.last_result and self.metric:
            lines.append(
                f"Best trial {best.trial_id}: "
                f"{self.metric}={_num(metric_value(best.last_result, self.metric))}"
                f" (last result, mode={self.mode})"
            )
            lines.append(f"  config: {config_text(redact(best.config))}")
        if non_finite:
            lines.append(view.non_finite_note(non_finite, list(non_finite)))
        if len(self.objectives) > 1:
            lines.extend(self._front_lines(trials))
        failed = [t for t in trials if t.status is TrialStatus.ERROR]
        for trial in failed[:20]:
            cause = trial.error.one_line() if trial.error else "unknown cause"
            lines.append(f"  FAILED {trial.trial_id}: {cause}")
        if len(failed) > 20:
            lines.append(f"  ... and {len(failed) - 20} more failed trials")
        silent = [t for t in trials if t.num_results == 0 and t.status is TrialStatus.TERMINATED]
        if silent:  # their trainable returned without calling tune.report()
            lines.append(
                f"{len(silent)} of {len(trials)} trials finished without reporting a result "
                f"(metrics {{}}): {', '.join(t.trial_id for t in silent[:5])}"
                + (", ..." if len(silent) > 5 else "")
            )
        lines.append(f"Results: {experiment_path}")
        lines.extend(commands_to_inspect(experiment_path, failed=bool(failed)))
        lines.append(  # the per-trial files Ray Tune writes by default, from the store
            "Ray Tune's files (params.json, result.json, progress.csv, TensorBoard): "
            f"tunefleet export {shlex.quote(experiment_path)} --format ray --out ray_files"
        )
        return "\n".join(lines)

    def finish(
        self,
        trials: list[Trial],
        experiment_path: str,
        stop_reason: StopCause | str | None,
        progress: RunProgress | None = None,
    ) -> None:
        if self.verbose == 0:
            return
        self._note_failures(trials)
        if progress is not None and self.live:
            self._last = 0.0
            self.update(progress)  # the final state, in the live view
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        flagged = progress.non_finite if progress is not None else None
        self._print(self.summary(trials, experiment_path, stop_reason, flagged))

    def _front_lines(self, trials: list[Trial]) -> list[str]:
        names = ", ".join(f"{m} ({d})" for m, d in self.objectives)
        scored: list[tuple[Trial, list[float]]] = []
        for trial in trials:
            result = trial.last_result or {}
            if self.constraints and not is_feasible(result, self.constraints):
                continue
            point = objective_point(result, self.objectives)
            if point is not None:
                scored.append((trial, point))
        if not scored:
            return [f"Pareto front of {names}: no trial reported them all"]
        front = [scored[i][0] for i in pareto_front([p for _, p in scored])]
        lines = [f"Pareto front of {names}: {len(front)} trials (last results)"]
        for trial in front[:5]:
            result = trial.last_result or {}
            shown = ", ".join(f"{m}={_num(metric_value(result, m))}" for m, _ in self.objectives)
            lines.append(f"  {trial.trial_id}: {shown}")
        if len(front) > 5:
            lines.append(f"  ... and {len(front) - 5} more (ResultGrid.get_pareto_front())")
        return lines

    def _describe(self, trial: Trial) -> str:
        if trial.status is TrialStatus.ERROR and trial.error is not None:
            return short(trial.error.one_line(), 200)
        why = why_ended(trial)
        why = f" ({why})" if why else ""
        if self.metric and trial.last_result and self.metric in trial.last_result:
            value = _num(trial.last_result[self.metric])
            return f"{self.metric}={value} after {trial.iteration} iterations{why}"
        return f"{trial.iteration} iterations{why}"

    def _print(self, text: str) -> None:
        text = redact_text(text)  # secrets never printed
        if self._rich is not None:  # above the live table
            self._rich.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.out, flush=True)


def commands_to_inspect(experiment_path: str, *, failed: bool) -> list[str]:
    """The commands the summary suggests, one per line, each ready to paste."""
    lines = ["Inspect, watch or share (each line pastes into a shell):"]
    for words in (
        ("show", experiment_path),
        ("best", experiment_path),
        *([("errors", experiment_path)] if failed else []),
        ("dashboard", experiment_path),
        ("report", experiment_path, "--out", "report.html"),
    ):
        lines.append("  " + command("tunefleet", *words))
    return lines


def _result_text(trial: Trial) -> str:
    result = trial.last_result or {}
    shown = {
        k: v
        for k, v in result.items()
        if isinstance(v, (int, float, str, bool)) and k not in view.AUTO_KEYS
    }
    text = ", ".join(f"{short(k)}={short(v)}" for k, v in shown.items())
    return f"iteration {trial.iteration}: {text}"


_duration = view.duration


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
