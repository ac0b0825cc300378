"""No cycle collection while a big experiment is read back.

Reading 100,000 trials back (a resume, the results of `fit()`, `tunefleet report`)
makes millions of objects that all live on, and Python's cycle collector runs every
few hundred allocations, its full passes walking everything made so far: a quarter to
two fifths of resuming such an experiment, while there is no garbage to find (the
objects are held). `paused()` turns the collector off for such a block and back on
after it, unless it was off already (nested blocks, or a program that turned it off).
Memory is still freed by reference counting meanwhile; only cycles wait for the
next pass.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The block (or, as a decorator, the function) runs without cycle collection."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
