"""Ray Tune's progress reporter classes, as settings of tunefleet's live view.

``RunConfig(progress_reporter=CLIReporter(metric_columns=[...]))`` in a ported script
chooses the columns, the rows and the refresh period of the view; the view itself
(a rich table on a terminal, HTML in Jupyter, plain lines in a log) is the same.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Columns = Sequence[str] | Mapping[str, str] | None
SHOW_RESOURCES_ENV = "TUNEFLEET_SHOW_RESOURCES"  # "1": the live table's resources column


@dataclass
class ViewOptions:
    """What the live view shows; the defaults are tunefleet's own."""

    metric_columns: list[str] | None = None  # None: the metric, then what trials report
    parameter_columns: list[str] | None = None  # None: the whole config
    aliases: dict[str, str] = field(default_factory=dict)  # column headers
    max_running_rows: int = 10
    max_failure_rows: int = 5
    sort_by_metric: bool = False
    interval_s: float | None = None  # None: 1 s live, 30 s in a log
    html: bool | None = None  # None: HTML in Jupyter only
    show_resources: bool | None = None  # CPU% and peak RSS per trial; None: the env var

    def resources_shown(self) -> bool:
        """Whether the running trials' table has a resources column (CPU%, peak RSS)."""
        if self.show_resources is not None:
            return self.show_resources
        return os.environ.get(SHOW_RESOURCES_ENV, "").strip() == "1"


class ProgressReporter:
    """Base of the reporter classes (Ray Tune's name); holds `ViewOptions`."""

    options: ViewOptions

    def __init__(
        self,
        *,
        metric_columns: Columns = None,
        parameter_columns: Columns = None,
        total_samples: int | None = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_column_length: int = 20,
        max_report_frequency: float = 5,
        infer_limit: int = 3,
        print_intermediate_tables: bool | None = None,
        metric: str | None = None,
        mode: str | None = None,
        sort_by_metric: bool = False,
        show_resources: bool | None = None,
    ) -> None:
        name = type(self).__name__
        if show_resources is not None and not isinstance(show_resources, bool):
            raise TypeError(
                f"{name}(show_resources={show_resources!r}): must be True, False or None "
                f"(None: shown when the environment has {SHOW_RESOURCES_ENV}=1)"
            )
        for key, value in (
            ("max_progress_rows", max_progress_rows),
            ("max_error_rows", max_error_rows),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}({key}={value!r}): must be an int >= 0")
        frequency_ok = isinstance(max_report_frequency, (int, float)) and not isinstance(
            max_report_frequency, bool
        )
        if not frequency_ok or max_report_frequency <= 0:
            raise ValueError(
                f"{name}(max_report_frequency={max_report_frequency!r}): must be a number of "
                "seconds > 0"
            )
        if mode not in (None, "min", "max"):
            raise ValueError(f"{name}(mode={mode!r}): must be 'min' or 'max'")
        self.options = ViewOptions(
            max_running_rows=max_progress_rows,
            max_failure_rows=max_error_rows,
            sort_by_metric=sort_by_metric,
            interval_s=float(max_report_frequency),
            show_resources=show_resources,
        )
        self.metric, self.mode = metric, mode
        self.add_metric_column_list(metric_columns, "metric_columns")
        self.add_parameter_column_list(parameter_columns, "parameter_columns")
        # Accepted for Ray Tune scripts; the view sizes columns and counts trials itself.
        del total_samples, max_column_length, infer_limit, print_intermediate_tables

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        """Show `metric` (under the header `representation`) for every trial."""
        columns = self.options.metric_columns = self.options.metric_columns or []
        _add(columns, self.options.aliases, metric, representation, "metric column")

    def add_parameter_column(self, parameter: str, representation: str | None = None) -> None:
        """Show the config value `parameter` (a dotted path for nested configs)."""
        columns = self.options.parameter_columns = self.options.parameter_columns or []
        _add(columns, self.options.aliases, parameter, representation, "parameter column")

    def add_metric_column_list(self, columns: Columns, where: str) -> None:
        for key, alias in _pairs(columns, f"{type(self).__name__}({where}=...)"):
            self.add_metric_column(key, alias)

    def add_parameter_column_list(self, columns: Columns, where: str) -> None:
        for key, alias in _pairs(columns, f"{type(self).__name__}({where}=...)"):
            self.add_parameter_column(key, alias)


class CLIReporter(ProgressReporter):
    """The terminal view's settings (Ray Tune's name).

    tunefleet's own option: ``show_resources=True`` adds a column of each running trial's
    CPU% and peak RSS (``result["resources"]``); ``TUNEFLEET_SHOW_RESOURCES=1`` does too.
    """


class JupyterNotebookReporter(ProgressReporter):
    """The notebook view's settings (Ray Tune's name): the view is HTML, updated in place
    when `overwrite` (the default), else a new table at each refresh."""

    def __init__(self, overwrite: bool = True, *args: Any, **kwargs: Any) -> None:
        if args:
            raise TypeError(
                "JupyterNotebookReporter takes its options by keyword (metric_columns=..., ...)"
            )
        super().__init__(**kwargs)
        self.overwrite = bool(overwrite)
        self.options.html = True


def _pairs(columns: Columns, where: str) -> list[tuple[str, str | None]]:
    if columns is None:
        return []
    pairs: list[tuple[str, str | None]]
    if isinstance(columns, Mapping):
        pairs = list(columns.items())
    elif isinstance(columns, (list, tuple)):
        pairs = [(k, None) for k in columns]
    else:
        raise TypeError(
            f"{where}: must be a list of names or a dict name -> header, got {columns!r}"
        )
    for key, alias in pairs:
        if not isinstance(key, str) or not key or not isinstance(alias, (str, type(None))):
            raise TypeError(f"{where}: column {key!r} -> {alias!r} must be a name and a header")
    return pairs


def _add(
    columns: list[str], aliases: dict[str, str], key: str, alias: str | None, what: str
) -> None:
    if not isinstance(key, str) or not key:
        raise TypeError(f"{what} {key!r}: must be a non-empty string")
    if key in columns:
        raise ValueError(f"{what} {key!r} is already shown")
    columns.append(key)
    if alias:
        aliases[key] = alias
