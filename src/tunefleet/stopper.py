"""Alias of `tunefleet.stoppers` under Ray Tune's module name (`ray.tune.stopper`)."""

from tunefleet.stoppers import *  # noqa: F403
from tunefleet.stoppers import __all__ as __all__
