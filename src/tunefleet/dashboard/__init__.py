"""A read-only web dashboard of experiments, and static HTML reports of them.

``tunefleet dashboard [STORAGE]`` serves it (`DashboardServer`); ``tunefleet report
EXP --out report.html`` writes one self-contained file (`write_report`). Both read
the store only through `StoreReader`; everything shown is redacted. The pages are
plain HTML, CSS and JavaScript shipped in ``static/``: no network access, no CDN.
"""

from __future__ import annotations

from tunefleet.dashboard._report import write_report
from tunefleet.dashboard._server import DashboardServer, check_bind, is_loopback

__all__ = ["DashboardServer", "check_bind", "is_loopback", "write_report"]
