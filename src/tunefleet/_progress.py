"""Minimal progress output: a status line while running, and the end-of-run summary.

verbose=0 prints nothing; 1 a status line (in place on a terminal, a plain line
every 30 s otherwise) and the summary; 2 also one line per trial that ends.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections import Counter
from collections.abc import Iterator
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
from tunefleet.trial import Trial, TrialStatus


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("tunefleet %(levelname)s: %(message)s"))
    handler.addFilter(RedactingFilter())  # also for records of child loggers
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


class StatusReporter:
    def __init__(
        self,
        *,
        verbose: int,
        metric: MetricSpec,
        mode: ModeSpec,
        constraints: list[str] | None = None,
        out: TextIO | None = None,
    ):
        self.verbose = verbose
        # One objective: its best trial is shown. Several: the Pareto front at the end.
        self.objectives = objectives(metric, mode)
        self.constraints = list(constraints or [])  # the front leaves infeasible trials out
        single = len(self.objectives) == 1 and isinstance(metric, str)
        self.metric: str | None = self.objectives[0][0] if single else None
        self.mode: str | None = self.objectives[0][1] if single else None
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.interval = 1.0 if self.tty else 30.0
        self.start = time.monotonic()
        self._last = 0.0
        self._reported_ends: set[str] = set()
        self._line_len = 0

    def update(self, controller: Any) -> None:
        if self.verbose == 0:
            return
        trials: dict[str, Trial] = controller.trials
        if self.verbose >= 2:
            for trial in trials.values():
                if trial.status.is_finished and trial.trial_id not in self._reported_ends:
                    self._reported_ends.add(trial.trial_id)
                    self._print(f"Trial {trial.name} {trial.status.value}: {self._describe(trial)}")
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        line = self.status_line(list(trials.values()))
        if self.tty:
            pad = max(0, self._line_len - len(line))
            self.out.write("\r" + line + " " * pad)
            self.out.flush()
            self._line_len = len(line)
        else:
            self._print(line)

    def status_line(self, trials: list[Trial]) -> str:
        counts = Counter(t.status.value for t in trials)
        parts = [f"{n} {s.lower()}" for s, n in sorted(counts.items())]
        elapsed = _duration(time.monotonic() - self.start)
        best = self.best(trials)
        best_text = ""
        if best is not None and best.last_result is not None and self.metric:
            best_text = (
                f" | best {self.metric}={_num(metric_value(best.last_result, self.metric))}"
                f" ({best.trial_id})"
            )
        return f"[{elapsed}] {len(trials)} trials: {', '.join(parts) or 'starting'}{best_text}"

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

    def summary(self, trials: list[Trial], experiment_path: str, stop_reason: str | None) -> str:
        counts = Counter(t.status.value for t in trials)
        lines = [
            "",
            f"Experiment finished in {_duration(time.monotonic() - self.start)}: "
            + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials"),
        ]
        if stop_reason:
            lines.append(f"Stopped early: {stop_reason}")
        best = self.best(trials)
        if best is not None and best.last_result is not None and self.metric:
            lines.append(
                f"Best trial {best.trial_id}: "
                f"{self.metric}={_num(metric_value(best.last_result, self.metric))}"
                f" (last result, mode={self.mode})"
            )
            lines.append(f"  config: {redact(best.config)}")
        if len(self.objectives) > 1:
            lines.extend(self._front_lines(trials))
        failed = [t for t in trials if t.status is TrialStatus.ERROR]
        for trial in failed[:20]:
            cause = trial.error.one_line() if trial.error else "unknown cause"
            lines.append(f"  FAILED {trial.trial_id}: {cause}")
        if len(failed) > 20:
            lines.append(f"  ... and {len(failed) - 20} more failed trials")
        lines.append(f"Results: {experiment_path}")
        lines.append(
            f"Inspect: tunefleet show {experiment_path} | tunefleet best {experiment_path}"
            + (f" | tunefleet errors {experiment_path}" if failed else "")
        )
        return "\n".join(lines)

    def finish(self, trials: list[Trial], experiment_path: str, stop_reason: str | None) -> None:
        if self.verbose == 0:
            return
        if self.tty and self._line_len:
            self.out.write("\n")
        self._print(self.summary(trials, experiment_path, stop_reason))

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
            return trial.error.one_line()
        if self.metric and trial.last_result and self.metric in trial.last_result:
            value = _num(trial.last_result[self.metric])
            return f"{self.metric}={value} after {trial.iteration} iterations"
        return f"{trial.iteration} iterations"

    def _print(self, text: str) -> None:
        if self.tty and self._line_len:
            self.out.write("\r" + " " * self._line_len + "\r")
            self._line_len = 0
        print(redact_text(text), file=self.out, flush=True)  # secrets never printed


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
