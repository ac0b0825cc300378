"""``python -m tunefleet``: the same as the ``tunefleet`` command."""

from __future__ import annotations

import sys

from tunefleet.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
