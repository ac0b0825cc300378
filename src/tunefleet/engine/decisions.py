"""Checks of a scheduler's `Exploit` and `Resize` before the controller carries them out.

A decision that can never be carried out is refused with a warning and the trial
continues unchanged; the scheduler is not asked again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from tunefleet.resources import normalize_resources
from tunefleet.schedulers._base import Exploit, Resize
from tunefleet.trial import Trial

logger = logging.getLogger("tunefleet")


def can_exploit(
    trial: Trial, exploit: Exploit, trials: Mapping[str, Trial], scheduler_name: str
) -> bool:
    """Whether the source trial exists, is another trial, and has a checkpoint to copy."""
    source = trials.get(exploit.source_trial_id)
    if source is None or source.latest_checkpoint is None or source is trial:
        logger.warning(
            "Trial %s: %s asked to exploit trial %s, which has no checkpoint; "
            "it continues unchanged",
            trial.trial_id,
            scheduler_name,
            exploit.source_trial_id,
        )
        return False
    return True


def checked_resize(
    trial_id: str,
    resize: Resize,
    scheduler_name: str,
    unfit_reason: Callable[[dict[str, float]], str | None],
) -> dict[str, float] | None:
    """The new resources, or None (with a warning) when they can never fit.

    `unfit_reason` is the backend's: why resources can never fit, or None.
    """
    try:
        resources = normalize_resources(
            dict(resize.resources), f"{scheduler_name}: Resize.resources"
        )
    except (TypeError, ValueError) as exc:
        logger.warning("Trial %s: %s; it continues unchanged", trial_id, exc)
        return None
    unfit = unfit_reason(resources)
    if unfit is not None:
        logger.warning(
            "Trial %s: %s asked for %s, which never fits (%s); it continues unchanged",
            trial_id,
            scheduler_name,
            resources,
            unfit,
        )
        return None
    return resources
