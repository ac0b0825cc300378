"""PyTorch Lightning under Ray Tune's module name, for `pytorch_lightning.Trainer`.

Uses the ``pytorch_lightning`` package, or ``lightning.pytorch`` where only that is
installed. Extra: ``tunefleet[lightning]``. See `tunefleet.integration.lightning`.
"""

from __future__ import annotations

import importlib.util

from tunefleet.integration._base import import_framework
from tunefleet.integration._lightning import make_callbacks

_MODULE = (
    "pytorch_lightning"
    if importlib.util.find_spec("pytorch_lightning") is not None
    or importlib.util.find_spec("lightning") is None
    else "lightning.pytorch"
)
_pl = import_framework(
    _MODULE,
    package="pytorch_lightning",
    extra="lightning",
    what="tunefleet.integration.pytorch_lightning",
)
TuneCallback, TuneReportCheckpointCallback, TuneReportCallback = make_callbacks(
    _pl, "tunefleet.integration.pytorch_lightning"
)

__all__ = ["TuneCallback", "TuneReportCallback", "TuneReportCheckpointCallback"]
