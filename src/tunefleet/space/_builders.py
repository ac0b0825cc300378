"""Ray's builder form of a domain: ``Float(1e-4, 1e-1).loguniform().quantized(5e-5)``.

`tune.loguniform(...)` and friends are the usual way to make a domain; Ray's
``ray.tune.search.sample`` also lets a program build one from its class and choose
the sampler with a method. The methods live here, mixed into the domain classes; each
returns a new domain and leaves the one it was called on as it was.
"""

from __future__ import annotations

import copy
import math
from typing import Any, TypeVar

from tunefleet.space._errors import SearchSpaceError

_D = TypeVar("_D", bound="SamplerChoice")


class SamplerChoice:
    """The builder methods of Float, Integer and Categorical (Ray's names and rules).

    A domain has one sampler: a second `uniform()` / `loguniform()` / `normal()` is an
    error, as in Ray; `quantized(q)` may follow any of them.
    """

    sampler_chosen = False  # set by tune.uniform(...) & co. and by the methods below

    def _choose(self: _D, method: str, **changes: Any) -> _D:
        if self.sampler_chosen:
            raise SearchSpaceError(
                f"{self!r}.{method}(): this domain's sampler is already chosen; "
                "a domain has one sampler (call .quantized(q) to round it)"
            )
        return self._copy(sampler_chosen=True, **changes)

    def _copy(self: _D, **changes: Any) -> _D:
        new = copy.copy(self)
        for key, value in changes.items():
            setattr(new, key, value)
        check = getattr(new, "_check", None)
        if check is not None:
            check()
        return new

    def uniform(self: _D) -> _D:
        """This domain, sampled uniformly."""
        return (
            self._choose("uniform", log=False) if hasattr(self, "log") else self._choose("uniform")
        )

    def loguniform(self: _D, base: float = 10) -> _D:
        """This domain, sampled uniformly in log space; its lower bound must be > 0."""
        if not hasattr(self, "log"):
            raise SearchSpaceError(f"{self!r}.loguniform(): only numeric domains have one")
        return self._choose("loguniform", log=True, base=base)

    def quantized(self: _D, q: float) -> _D:
        """This domain, its values rounded to multiples of `q`.

        As in Ray, a float domain's bounds must be multiples of `q` (ValueError
        otherwise); an int domain's values are the multiples of `q` inside its bounds.
        """
        if not hasattr(self, "q"):
            raise SearchSpaceError(f"{self!r}.quantized(q={q!r}): only numeric domains have one")
        if isinstance(getattr(self, "lower", None), float) and isinstance(q, (int, float)):
            for key in ("lower", "upper"):
                bound = getattr(self, key)
                ratio = bound / q if q else math.nan
                if not math.isclose(ratio, round(ratio), rel_tol=1e-5, abs_tol=1e-8):
                    raise SearchSpaceError(
                        f"{self!r}.quantized(q={q!r}): {key}={bound!r} is not a multiple "
                        "of q (a quantized float's bounds must be)"
                    )
        return self._copy(q=q)
