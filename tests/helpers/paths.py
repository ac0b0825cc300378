"""Where things are in the checkout, for tests that run its files."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
EXAMPLES = REPO / "examples"
# Programs that `tunefleet run` tunes in the tests.
PROGRAMS = REPO / "tests" / "script" / "programs"
