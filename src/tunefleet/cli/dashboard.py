"""`tunefleet dashboard [STORAGE]` and `tunefleet report EXP --out FILE`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

TOKEN_ENV = "TUNEFLEET_DASHBOARD_TOKEN"


def add_dashboard_command(sub: Any) -> None:
    text = "serve a read-only web dashboard of the experiments under a storage path"
    cmd = sub.add_parser("dashboard", help=text, description=text + " (see docs/dashboard.md)")
    cmd.add_argument(
        "storage",
        nargs="?",
        help="storage path, or one experiment's directory "
        "(default: $TUNEFLEET_STORAGE or ~/tunefleet_results)",
    )
    cmd.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    cmd.add_argument("--port", type=int, default=8270, help="port; 0 picks a free one (8270)")
    cmd.add_argument(
        "--token",
        help=f"required on every request; needed for a non-loopback --host (or ${TOKEN_ENV})",
    )
    cmd.set_defaults(run=_dashboard)


def add_report_command(sub: Any) -> None:
    text = "write a self-contained HTML report of an experiment (plots and tables)"
    cmd = sub.add_parser("report", help=text, description=text)
    cmd.add_argument("experiment", metavar="EXP", help="experiment name or directory")
    cmd.add_argument("--storage", help="where names are looked up")
    cmd.add_argument("--out", default="report.html", help="the file to write (report.html)")
    cmd.set_defaults(run=_report)


def _dashboard(args: argparse.Namespace) -> int:
    from tunefleet.dashboard._data import is_experiment
    from tunefleet.dashboard._server import DashboardServer
    from tunefleet.store import default_storage_path

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: must be between 0 and 65535 (0: any free port)")
    root = Path(args.storage or default_storage_path()).expanduser().resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"storage path {root}: no such directory")
    only = None
    if is_experiment(root):  # one experiment's directory: serve it alone
        root, only = root.parent, root.name
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    try:
        server = DashboardServer(root, host=args.host, port=args.port, token=token, only=only)
    except OSError as exc:
        raise RuntimeError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    what = f"experiment {only}" if only else f"experiments under {root}"
    print(f"tunefleet dashboard: {what} at {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _report(args: argparse.Namespace) -> int:
    from tunefleet.dashboard._report import write_report

    target = write_report(args.experiment, args.out, args.storage)
    size = target.stat().st_size
    print(f"Wrote {target} ({size / 1024:.0f} KB): open it in a browser, no server needed")
    sys.stdout.flush()
    return 0
