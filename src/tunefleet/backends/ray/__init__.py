"""The Ray backend: trials as Ray actors on a local Ray or a cluster (``backend="ray"``)."""

from tunefleet.backends.ray._backend import RayBackend

__all__ = ["RayBackend"]
