"""The search-space error, shared by every module of the wing."""


class SearchSpaceError(ValueError):
    """An invalid search space; the message names the key path, value and rule."""


class RecursiveDependencyError(SearchSpaceError):
    """`sample_from` functions that depend on each other in a circle (Ray's name)."""
