"""The ``tunefleet`` command: `main` dispatches to one module per sub-command."""

from tunefleet.cli.main import main

__all__ = ["main"]
