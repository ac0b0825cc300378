"""A local worker's start-up limit: how long it may take to load the trainable.

A worker unpickles the trainable, which imports the module that defines it; an
import that blocks (a lock, a network mount, a prompt) would keep its trial waiting
forever. A worker not ready `worker_start_timeout_s` after it was started is killed
and its trial fails as TIMEOUT, naming the module (``_backend.py``).
"""

from __future__ import annotations

import math
import os
from typing import Any

from tunefleet.backends._attempt import stderr_tail
from tunefleet.backends._base import TrialLaunch
from tunefleet.trainable import unwrap
from tunefleet.trial import FailureKind, FailureRecord

START_TIMEOUT_ENV = "TUNEFLEET_WORKER_START_TIMEOUT_S"
DEFAULT_START_TIMEOUT_S = 300.0  # generous: importing torch can take a minute on a busy machine


def start_timeout(given: float | None) -> float:
    """worker_start_timeout_s: `given`, else $TUNEFLEET_WORKER_START_TIMEOUT_S, else 300 s."""
    raw = os.environ.get(START_TIMEOUT_ENV, "").strip() if given is None else given
    if given is None and raw == "":
        return DEFAULT_START_TIMEOUT_S
    try:
        value = math.nan if isinstance(raw, bool) else float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        where = "worker_start_timeout_s" if given is not None else f"${START_TIMEOUT_ENV}"
        raise ValueError(
            f"{where}={raw!r} is not valid: it must be a number of seconds > 0 (how long a "
            "worker may take to load the trainable before it is killed)"
        )
    return value


def defined_where(trainable: Any) -> tuple[str, str]:
    """(module, qualified name) of the trainable inside its wrappers, for messages."""
    inner, _, _ = unwrap(trainable)
    module = getattr(inner, "__module__", None) or type(inner).__module__
    name = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    return str(module), str(name)


def hung_record(
    launch: TrialLaunch, where: tuple[str, str], timeout: float, workers_log: str
) -> FailureRecord:
    """The TIMEOUT of an attempt whose worker did not load the trainable in time."""
    module, name = where
    return FailureRecord(
        kind=FailureKind.TIMEOUT,
        message=(
            f"the worker process hung while loading the trainable {name} from module "
            f"{module!r}: it was not ready {timeout:g} s after it started "
            f"(worker_start_timeout_s={timeout:g}), so importing that module (or something "
            "it imports) blocked; its process tree was killed"
        ),
        stderr_tail=stderr_tail(workers_log),  # the workers' output: no trial log yet
        attempt=launch.attempt,
        checkpoint=launch.checkpoint,
    )
