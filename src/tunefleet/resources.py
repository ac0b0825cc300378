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
