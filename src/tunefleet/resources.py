"""Resource requests: parsing and checking {"cpu": 1, "gpu": 0.5, "memory": "2GB", ...}."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
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

# {"gpu": "auto"} is normalized to {"gpu": 1.0, GPU_AUTO: 1.0}: a whole GPU until the
# backend has measured a trial's GPU memory, then its share (backends/_gpu_auto.py).
GPU_AUTO = "gpu_auto"


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


def normalize_resources(
    spec: Any, where: str = "resources", gpu_auto: bool = False
) -> dict[str, float]:
    """Validate a resource request such as {"cpu": 1, "gpu": 0.5, "memory": "2GB"}.

    `gpu_auto`: a trial's request, which may say ``"gpu": "auto"`` (`GPU_AUTO`).
    """
    if not isinstance(spec, dict):
        raise TypeError(f"{where} must be a dict such as {{'cpu': 1, 'gpu': 0}}, not {spec!r}")
    out: dict[str, float] = {"cpu": 1.0, "gpu": 0.0}
    custom = spec.get("custom_resources")
    if isinstance(custom, dict):  # Ray's with_resources form: {"cpu": 1, "custom_resources": {...}}
        spec = {**{k: v for k, v in spec.items() if k != "custom_resources"}, **custom}
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
        if name == GPU_AUTO:
            raise ValueError(
                f"{where}[{key!r}]: the resource name {GPU_AUTO!r} is tunefleet's own (what "
                "'gpu': 'auto' becomes); give a custom resource another name"
            )
        if isinstance(value, str) and value.strip().lower() == "auto":
            out.update(_auto(name, key, value, where, gpu_auto))
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


def _auto(name: str, key: str, value: str, where: str, allowed: bool) -> dict[str, float]:
    if name != "gpu":
        raise ValueError(
            f"{where}[{key!r}]={value!r}: only 'gpu' may be 'auto' (the GPU share measured "
            f"from the first trial's GPU memory); give {key!r} a number"
        )
    if not allowed:
        raise ValueError(
            f"{where}[{key!r}]={value!r}: 'auto' is for what each trial asks for "
            "(tune.with_resources(train, {'gpu': 'auto'}) or resources_per_trial), as one "
            "dict of resources; give a number here"
        )
    return {"gpu": 1.0, GPU_AUTO: 1.0}


STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

# our resource names (``normalize_resources``) <-> Ray's names in bundles
_RAY_NAMES = {"cpu": "CPU", "gpu": "GPU", "memory": "memory"}


class PlacementGroupFactory:
    """The resources of one trial: a list of bundles and a strategy (Ray Tune's class).

    A trial's own process takes the first bundle (the "head"); the tasks and actors it
    starts fill the others. `bundles` use Ray's names (``"CPU"``, ``"GPU"``,
    ``"memory"``, custom names as given); lower-case ``"cpu"``/``"gpu"`` are accepted
    too. Amounts of 0 are dropped; an empty first bundle means the trial's own process
    needs nothing (`head_bundle_is_empty`). On the Ray backend the bundles form the
    trial's placement group, placed by `strategy`; on the local backend the trial is
    one process that gets the sum of the bundles (`required_resources`).

    Inside a trial, ``tune.get_context().get_trial_resources()`` returns the trial's
    factory (after a `ResourceChangingScheduler` resize, the new one).

    Example:
        >>> pgf = PlacementGroupFactory([{"CPU": 1, "GPU": 0.5}, {"CPU": 2}], strategy="PACK")
        >>> pgf.required_resources
        {'CPU': 3.0, 'GPU': 0.5}
        >>> pgf.head_cpus
        1.0
    """

    def __init__(
        self, bundles: list[dict[str, Any]], strategy: str = "PACK", *args: Any, **kwargs: Any
    ) -> None:
        if not isinstance(bundles, (list, tuple)) or not bundles:
            raise ValueError(
                f"PlacementGroupFactory(bundles={bundles!r}): give a non-empty list of "
                "resource dicts, e.g. [{'CPU': 1}, {'CPU': 1, 'GPU': 1}]"
            )
        if strategy not in STRATEGIES:
            raise ValueError(
                f"PlacementGroupFactory(strategy={strategy!r}) is not valid: use one of "
                f"{', '.join(STRATEGIES)}"
            )
        unknown = set(kwargs) - {"name", "lifetime"}
        if args or unknown:
            raise TypeError(
                "PlacementGroupFactory takes bundles, strategy and optionally name= and "
                f"lifetime= (Ray's placement_group arguments), not {args or sorted(unknown)!r}"
            )
        parsed = [_bundle(b, f"PlacementGroupFactory(bundles)[{i}]") for i, b in enumerate(bundles)]
        self._head_bundle_is_empty = not parsed[0][1]
        if self._head_bundle_is_empty:
            parsed.pop(0)
            if not parsed:
                raise ValueError(
                    f"PlacementGroupFactory(bundles={bundles!r}) asks for nothing: the first "
                    "bundle is empty and there are no others"
                )
        for i, (_, ours) in enumerate(parsed):
            if not ours and (i or not self._head_bundle_is_empty):
                index = i + int(self._head_bundle_is_empty)
                raise ValueError(
                    f"PlacementGroupFactory(bundles)[{index}]={bundles[index]!r} asks for "
                    "nothing: only the first bundle may be empty"
                )
        self._bundles = [theirs for theirs, _ in parsed]
        self._ours = [ours for _, ours in parsed]
        self._strategy = strategy
        self._options = dict(kwargs)

    @property
    def bundles(self) -> list[dict[str, float]]:
        """A copy of the bundles (an empty head bundle left out), in Ray's names."""
        return [dict(b) for b in self._bundles]

    @property
    def strategy(self) -> str:
        """How the bundles are spread over nodes: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD."""
        return self._strategy

    @property
    def head_bundle_is_empty(self) -> bool:
        """True when the trial's own process needs nothing (only the other bundles do)."""
        return self._head_bundle_is_empty

    @property
    def head_cpus(self) -> float:
        """The CPUs of the trial's own process (0 when the head bundle is empty)."""
        return 0.0 if self._head_bundle_is_empty else self._bundles[0].get("CPU", 0.0)

    @property
    def required_resources(self) -> dict[str, float]:
        """The sum of the bundles, in Ray's names: what the trial holds in all."""
        total: dict[str, float] = {}
        for bundle in self._bundles:
            for key, value in bundle.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def own_bundles(self) -> list[dict[str, float]]:
        """The bundles in tunefleet's names (``cpu``, ``gpu``, ``memory``, custom)."""
        return [dict(b) for b in self._ours]

    def totals(self) -> dict[str, float]:
        """The sum of the bundles in tunefleet's names, with ``cpu`` and ``gpu`` always set."""
        total: dict[str, float] = {"cpu": 0.0, "gpu": 0.0}
        for bundle in self._ours:
            for key, value in bundle.items():
                total[key] = total.get(key, 0.0) + value
        return total

    @classmethod
    def of(cls, resources: Mapping[str, float]) -> PlacementGroupFactory:
        """One bundle of a normalized request such as ``{"cpu": 2.0, "gpu": 0.0}``."""
        bundle = {
            _RAY_NAMES.get(k, k): float(v) for k, v in resources.items() if v and k != GPU_AUTO
        }
        if bundle:
            return cls([bundle])
        nothing = cls.__new__(cls)  # a trial that asked for nothing (Ray refuses to build it)
        nothing._head_bundle_is_empty, nothing._bundles, nothing._ours = False, [{}], [{}]
        nothing._strategy, nothing._options = "PACK", {}
        return nothing

    def __getitem__(self, key: str) -> float:
        """tunefleet's earlier dict form: ``resources["cpu"]`` is the trial's total."""
        name = key.lower()
        if name not in ("cpu", "gpu") and name not in self.totals():
            raise KeyError(key)
        return self.totals().get(name, 0.0)

    def get(self, key: str, default: float | None = None) -> float | None:
        """``resources.get("cpu")``: the total of one resource (tunefleet's earlier form)."""
        try:
            return self[key]
        except KeyError:
            return default

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlacementGroupFactory)
            and self._bundles == other._bundles
            and self._strategy == other._strategy
            and self._head_bundle_is_empty == other._head_bundle_is_empty
            and self._options == other._options
        )

    def __hash__(self) -> int:
        return hash((repr(self._bundles), self._strategy, self._head_bundle_is_empty))

    def __repr__(self) -> str:
        head: list[dict[str, float]] = [{}] if self._head_bundle_is_empty else []
        return f"PlacementGroupFactory({head + self._bundles!r}, strategy={self._strategy!r})"


def _bundle(spec: Any, where: str) -> tuple[dict[str, float], dict[str, float]]:
    """One bundle in Ray's names and in ours; amounts of 0 dropped, nothing implied."""
    if not isinstance(spec, dict):
        raise TypeError(f"{where} must be a dict such as {{'CPU': 1}}, not {spec!r}")
    given = {k.lower() if isinstance(k, str) else k for k in spec}
    out = normalize_resources(spec, where)
    if not given & {"cpu", "cpus", "num_cpus"}:
        out["cpu"] = 0.0
    ours = {k: v for k, v in out.items() if v > 0}
    theirs: dict[str, float] = {}
    for key in spec:  # Ray's names, custom resources as the user spelled them
        name = _canonical(key)
        if name in ours:
            theirs[_RAY_NAMES.get(name, str(key))] = ours[name]
    return theirs, ours


def _canonical(key: Any) -> str:
    name = str(key).lower()
    return {"cpus": "cpu", "num_cpus": "cpu", "gpus": "gpu", "num_gpus": "gpu"}.get(name, name)


__all__ = [
    "PlacementGroupFactory",
]
