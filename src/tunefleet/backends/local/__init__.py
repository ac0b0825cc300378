"""The local backend: worker processes on this machine (the default).

`LocalBackend` is imported on first use: a worker imports this package (its entry point
lives here) and needs none of the driver's side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunefleet.backends.local._backend import LocalBackend

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    if name == "LocalBackend":
        from tunefleet.backends.local._backend import LocalBackend

        return LocalBackend
    raise AttributeError(f"module 'tunefleet.backends.local' has no attribute {name!r}")
