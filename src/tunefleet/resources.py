"""Resource requests: parsing and checking {"cpu": 1, "gpu": 0.5, "memory": "2GB", ...}."""

from __future__ import annotations

import math
import re
from typing import Any

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_memory(value: Any, key: str = "memory") -> float:
    """Bytes from an int/float or a string such as "2GB", "512MiB"."""
    if isinstance(value, bool):
        raise ValueError(f"{key}={value!r} is not a memory size: use bytes or a string like '2GB'")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{key}={value!r} is not a memory size: use bytes or a number with one of "
                "the units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
            )
        number = float(match.group(1)) * _UNITS[unit]
    else:
        raise ValueError(f"{key}={value!r} is not a memory size: use bytes or a string like '2GB'")
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{key}={value!r} must be a finite size >= 0")
    return number


def normalize_resources(spec: Any, where: str = "resources") -> dict[str, float]:
    """Validate a resource request such as {"cpu": 1, "gpu": 0.5, "memory": "2GB"}."""
    if not isinstance(spec, dict):
        raise TypeError(f"{where} must be a dict such as {{'cpu': 1, 'gpu': 0}}, not {spec!r}")
    out: dict[str, float] = {"cpu": 1.0, "gpu": 0.0}
    for key, value in spec.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: resource name {key!r} must be a non-empty string")
        name = key.lower()
        if name in ("cpus", "num_cpus"):
            name = "cpu"
        elif name in ("gpus", "num_gpus"):
            name = "gpu"
        if name == "memory":
            out[name] = parse_memory(value, f"{where}[{key!r}]")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}[{key!r}]={value!r} must be a number")
        amount = float(value)
        if not math.isfinite(amount) or amount < 0:
            raise ValueError(f"{where}[{key!r}]={value!r} must be a finite number >= 0")
        if name == "gpu" and amount > 1 and not amount.is_integer():
            raise ValueError(
                f"{where}[{key!r}]={value!r}: a trial takes a fraction of one GPU (<= 1) "
                "or a whole number of GPUs"
            )
        out[name] = amount
    return out


STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroupFactory:
    """A trial that needs a group of bundles, e.g. one per data-parallel worker (Ray's name).

    On the Ray backend the trial's actor takes the first bundle and the tasks and
    actors it starts fill the others (they are placed in the trial's placement
    group); ``strategy`` says how Ray spreads the bundles over nodes. On the local
    backend the trial is one process that gets the sum of the bundles.

    Example:
        >>> tune.with_resources(train, tune.PlacementGroupFactory(
        ...     [{"cpu": 1}, {"cpu": 2, "gpu": 1}, {"cpu": 2, "gpu": 1}], strategy="PACK"))
        ... # doctest: +SKIP
    """

    def __init__(self, bundles: list[dict[str, Any]], strategy: str = "PACK") -> None:
        if not isinstance(bundles, (list, tuple)) or not bundles:
            raise ValueError(
                f"PlacementGroupFactory(bundles={bundles!r}): give a non-empty list of "
                "resource dicts, e.g. [{'cpu': 1}, {'cpu': 1, 'gpu': 1}]"
            )
        if strategy not in STRATEGIES:
            raise ValueError(
                f"PlacementGroupFactory(strategy={strategy!r}) is not valid: use one of "
                f"{', '.join(STRATEGIES)}"
            )
        self.bundles = [
            _bundle(b, f"PlacementGroupFactory(bundles)[{i}]") for i, b in enumerate(bundles)
        ]
        self.strategy = strategy

    def required_resources(self) -> dict[str, float]:
        """The sum of the bundles: what the trial holds in all."""
        total: dict[str, float] = {"cpu": 0.0, "gpu": 0.0}
        for bundle in self.bundles:
            for key, value in bundle.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlacementGroupFactory)
            and self.bundles == other.bundles
            and self.strategy == other.strategy
        )

    def __hash__(self) -> int:
        return hash((repr(self.bundles), self.strategy))

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"


def _bundle(spec: Any, where: str) -> dict[str, float]:
    """One bundle: like a resource request, but nothing is implied (no default cpu=1)."""
    if not isinstance(spec, dict):
        raise TypeError(f"{where} must be a dict such as {{'cpu': 1}}, not {spec!r}")
    given = {k.lower() if isinstance(k, str) else k for k in spec}
    out = normalize_resources(spec, where)
    if not given & {"cpu", "cpus", "num_cpus"}:
        out["cpu"] = 0.0
    bundle = {k: v for k, v in out.items() if v > 0}
    if not bundle:
        raise ValueError(f"{where}={spec!r} asks for nothing: a bundle needs some resource")
    return bundle


__all__ = [
    "PlacementGroupFactory",
]
