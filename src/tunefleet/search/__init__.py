"""Search algorithms: where the configurations of new trials come from."""

from tunefleet.search._base import FINISHED, Searcher
from tunefleet.search._basic_variant import BasicVariantGenerator

__all__ = ["FINISHED", "BasicVariantGenerator", "Searcher"]
