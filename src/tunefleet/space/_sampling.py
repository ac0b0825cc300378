"""The arguments of Ray's ``Domain.sample(config, size, random_state)``, checked.

Domains draw from a `random.Random`; Ray's callers hand over a seed, a numpy
generator or nothing. Each becomes a `random.Random` here, so a seed or a numpy
generator in a given state gives the same draws every time.
"""

from __future__ import annotations

import numbers
import random
import sys
from typing import Any

from tunefleet.space._errors import SearchSpaceError

_SEED_BOUND = 2**63


def as_rng(random_state: Any, owner: str) -> random.Random:
    """A `random.Random` for `random_state`.

    Args:
        random_state: None, an int seed, a `random.Random`, or a numpy ``Generator`` /
            ``RandomState``. None draws the seed from numpy's global generator when
            numpy is loaded (Ray samples from it, so ``np.random.seed`` steers it),
            else from a fresh unseeded generator.
        owner: named in the error for anything else.
    """
    if isinstance(random_state, random.Random):
        return random_state
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return random.Random(int(random_state))
    if random_state is None:
        numpy = sys.modules.get("numpy")
        if numpy is None:
            return random.Random()
        return random.Random(int(numpy.random.randint(0, 2**31 - 1)))
    integers = getattr(random_state, "integers", None)  # numpy.random.Generator
    if callable(integers):
        return random.Random(int(integers(0, _SEED_BOUND)))
    randint = getattr(random_state, "randint", None)  # numpy.random.RandomState
    if callable(randint) and type(random_state).__module__.startswith("numpy"):
        return random.Random(int(randint(0, 2**31 - 1)))
    raise TypeError(
        f"{owner}: random_state={random_state!r} ({type(random_state).__name__}) must be "
        "None, an int seed, a random.Random, or a numpy Generator or RandomState"
    )


def sampling_inputs(
    owner: str, config: Any, size: Any, random_state: Any, spec: Any
) -> tuple[random.Random, list[Any], bool]:
    """The generator, the config of each draw, and whether the configs are specs."""
    rng = as_rng(random_state, f"{owner}.sample")
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or int(size) < 1:
        raise SearchSpaceError(f"{owner}.sample: size={size!r} must be an integer >= 1")
    size = int(size)
    if spec is not None and config is not None:
        raise SearchSpaceError(f"{owner}.sample: give config= or spec=, not both")
    given, is_spec = (spec, True) if spec is not None else (config, False)
    if not isinstance(given, list):
        return rng, [given] * size, is_spec
    if len(given) < size:  # Ray gives draw i the i-th config of a list
        raise SearchSpaceError(
            f"{owner}.sample: config is a list of {len(given)} configs, one per draw, "
            f"but size={size!r} draws were asked for"
        )
    return rng, given[:size], is_spec
