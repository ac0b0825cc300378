"""The local backend: worker processes on this machine (the default)."""

from tunefleet.backends.local._backend import LocalBackend

__all__ = ["LocalBackend"]
