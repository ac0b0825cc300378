"""PyTorch Lightning: report metrics and checkpoints from a `lightning.pytorch.Trainer`.

Uses the ``lightning`` package (``lightning.pytorch``), or ``pytorch_lightning`` where
only that is installed. For ``pytorch_lightning.Trainer`` with both installed, import
from `tunefleet.integration.pytorch_lightning` (Ray Tune's module name) instead.
Extra: ``tunefleet[lightning]``.
"""

from __future__ import annotations

import importlib.util

from tunefleet.integration._base import import_framework
from tunefleet.integration._lightning import make_callbacks

_MODULE = (
    "lightning.pytorch"
    if importlib.util.find_spec("lightning") is not None
    or importlib.util.find_spec("pytorch_lightning") is None
    else "pytorch_lightning"
)
_pl = import_framework(
    _MODULE, package="lightning", extra="lightning", what="tunefleet.integration.lightning"
)
TuneCallback, TuneReportCheckpointCallback, TuneReportCallback = make_callbacks(
    _pl, "tunefleet.integration.lightning"
)

__all__ = ["TuneCallback", "TuneReportCallback", "TuneReportCheckpointCallback"]
