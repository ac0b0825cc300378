"""What the Ray cluster has: its alive nodes (read at most once a second), our names for
Ray's resources, whether a trial fits, and what Ray's message on a dead actor says."""

from __future__ import annotations

import time
from typing import Any

from tunefleet.resources import PlacementGroupFactory

NODES_REFRESH_S = 1.0  # how often the cluster's nodes are read (ray.nodes())
_EPS = 1e-9
# Ray's names of the resources a trial asks for, and ours
_RAY_NAMES = {"CPU": "cpu", "GPU": "gpu", "memory": "memory"}
_OUR_NAMES = {ours: theirs for theirs, ours in _RAY_NAMES.items()}
_NOT_RESOURCES = ("node:", "object_store_memory", "accelerator_type:")

Shape = tuple[tuple[str, float], ...]


class Nodes:
    """The alive nodes of the cluster and their resources (under our names)."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self.alive: dict[str, dict[str, float]] = {}  # node id -> its resources
        self._read = -1.0
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._read < NODES_REFRESH_S:
            return
        self._read = now
        self.alive = {
            node["NodeID"]: _ours(node.get("Resources", {}))
            for node in self._ray.nodes()
            if node.get("Alive") or node.get("alive")
        }

    def total(self) -> dict[str, float]:
        total: dict[str, float] = {"cpu": 0.0, "gpu": 0.0, "memory": 0.0}
        for resources in self.alive.values():
            for key, value in resources.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def placeable(self, resources: dict[str, float], group: PlacementGroupFactory | None) -> bool:
        """Could the alive nodes hold this trial (with its placement group) if nothing else ran?"""
        nodes = list(self.alive.values())
        if group is None or group.strategy == "STRICT_PACK":
            return any(fits(resources, node) for node in nodes)
        if group.strategy == "STRICT_SPREAD" and len(nodes) < len(group.own_bundles()):
            return False
        return all(any(fits(b, node) for node in nodes) for b in group.own_bundles())

    def largest(self) -> dict[str, float]:
        """The resources of the node with the most CPUs (for messages)."""
        return max(self.alive.values(), key=lambda r: r.get("cpu", 0.0), default={})


def _ours(ray_resources: dict[str, float]) -> dict[str, float]:
    """A node's Ray resources under our names (cpu, gpu, memory, custom)."""
    out: dict[str, float] = {}
    for key, value in ray_resources.items():
        if key.startswith(_NOT_RESOURCES):
            continue
        out[_RAY_NAMES.get(key, key)] = float(value)
    return out


def ray_name(key: str) -> str:
    return _OUR_NAMES.get(key, key)


def shape_of(resources: dict[str, float]) -> Shape:
    return tuple(sorted((k, v) for k, v in resources.items() if v))


def fits(want: dict[str, float], free: dict[str, float]) -> bool:
    return all(v <= free.get(k, 0.0) + _EPS for k, v in want.items() if v > 0)


def minus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: v - b.get(k, 0.0) for k, v in a.items()}


def describe(resources: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()) if v) or "nothing"


def node_death_wait_s() -> float:
    """How long Ray may take to declare a killed node dead (its health checks), + 1 s."""
    try:
        import importlib

        config: Any = importlib.import_module("ray._raylet").Config  # Ray's RayConfig
        checks = config.health_check_period_ms() * config.health_check_failure_threshold()
        return float(min(60.0, (checks + config.health_check_timeout_ms()) / 1000 + 1.0))
    except Exception:  # another Ray: its defaults
        return 26.0


def why(message: str) -> str:
    """The telling part of Ray's message on a dead actor: its exit detail if given."""
    for marker in ("Worker exit detail:", "exit detail:"):
        if marker in message:
            detail = message.split(marker, 1)[1].strip()
            return detail.split(". Some common causes", 1)[0].strip()
    return first_lines(message)


def first_lines(message: str, n: int = 3) -> str:
    return " ".join(line.strip() for line in message.splitlines()[:n] if line.strip())
