"""`write_report`: one self-contained HTML file with the dashboard's plots and tables.

The page is the dashboard's own (static/index.html) with its CSS and JavaScript
inlined and the experiment's data embedded as JSON, so it opens from ``file://``
with no server and no network (its Content-Security-Policy forbids any request).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from tunefleet._metrics import objectives
from tunefleet.dashboard import _data
from tunefleet.dashboard._json import to_json
from tunefleet.dashboard._server import STATIC_DIR
from tunefleet.store import StoreReader, resolve_experiment

#: curves beyond the objectives are embedded while the report stays about this small
_MAX_POINTS = 200_000
#: most points of one trial's curve in a report (fewer when there are many trials)
REPORT_POINTS = 200
_MIN_POINTS = 20
_REPORT_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
_CLOSING = re.compile(r"</(script|style)", re.IGNORECASE)


def report_data(experiment_path: Path) -> dict[str, Any]:
    """What the report embeds: the list row, the experiment view and its curves."""
    with StoreReader(experiment_path) as reader:  # what to plot, before the one pass
        meta, trials = reader.meta(), reader.trials()
    goals = objectives(meta.get("metric"), meta.get("mode"))
    cap = max(_MIN_POINTS, min(REPORT_POINTS, _MAX_POINTS // max(1, len(trials))))
    per_metric = sum(min(t.num_results, cap) for t in trials)  # at most
    wanted = [m for m, _ in goals]
    wanted += [k for k in _data.metric_keys(trials) if k not in wanted]
    chosen: list[str] = []
    for metric in wanted:
        if len(chosen) >= len(goals) and (len(chosen) + 1) * per_metric > _MAX_POINTS:
            break
        chosen.append(metric)
    # one pass over the results: the curves, and each trial's best for the table
    curves = _data.all_curves(experiment_path, chosen, cap, goals) if chosen else {}
    view = _data.experiment_view(experiment_path)
    rows = _data.experiments_list(experiment_path.parent, only=experiment_path.name)
    return {
        "embedded": True,
        "generated_at": time.time(),
        "experiments": rows,
        "experiment": view,
        "curves": curves,
    }


def write_report(
    experiment: str | os.PathLike[str], out: str | os.PathLike[str], storage: str | None = None
) -> Path:
    """Write the static report of `experiment` (a name under `storage`, or a directory).

    Args:
        experiment: the experiment's name or directory.
        out: the HTML file to write (its directory must exist).
        storage: where names are looked up (default: ``$TUNEFLEET_STORAGE`` or
            ``~/tunefleet_results``).

    Returns:
        The path written.

    Raises:
        FileNotFoundError: no such experiment, or the output directory is missing.

    Example:
        >>> write_report("my_exp", "report.html")  # doctest: +SKIP
    """
    path = resolve_experiment(str(experiment), storage)
    target = Path(out).expanduser()
    if not target.parent.is_dir():
        raise FileNotFoundError(f"--out {target}: the directory {target.parent} does not exist")
    html = render(report_data(path))
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, target)  # a reader never sees half a report
    return target


def render(data: dict[str, Any]) -> str:
    """The dashboard page with `data` embedded and every asset inlined."""
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    name = str(data["experiment"]["name"])
    replacements = {
        "<title>tunefleet dashboard</title>": (
            f'<meta http-equiv="Content-Security-Policy" content="{_REPORT_CSP}">\n'
            f"<title>tunefleet report: {_escape(name)}</title>"
        ),
        '<link rel="stylesheet" href="/static/app.css">': f"<style>{_asset('app.css')}</style>",
        '<script src="/static/plots.js"></script>': f"<script>{_asset('plots.js')}</script>",
        '<script src="/static/app.js"></script>': (
            f'<script id="tunefleet-data" type="application/json">{to_json(data)}</script>\n'
            f"<script>{_asset('app.js')}</script>"
        ),
    }
    for tag, inline in replacements.items():
        if tag not in page:  # pragma: no cover - index.html and this list change together
            raise RuntimeError(f"static/index.html lost {tag!r}")
        page = page.replace(tag, inline)
    return page


def _asset(name: str) -> str:
    text = (STATIC_DIR / name).read_text(encoding="utf-8")
    if _CLOSING.search(text):  # pragma: no cover - our own files; a test checks them
        raise RuntimeError(f"static/{name} contains a closing script/style tag")
    return text


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
