"""Ray's ``generate_variants``: every grid point of a spec, each resolved once.

Ray's searchers and tests expand a spec such as ``{"config": space}`` with it; a
`sample_from` function's ``spec.config`` is the ``"config"`` entry (the whole spec
when it has none).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

from tunefleet.space._domains import Domain, Path
from tunefleet.space._errors import SearchSpaceError
from tunefleet.space._resolve import _is_grid, grid_points, resolve, validate_space
from tunefleet.space._sampling import as_rng

_SEED_BOUND = 2**63


def _variable_paths(node: Any, path: Path) -> Iterator[Path]:
    if isinstance(node, Domain) or _is_grid(node):
        yield path
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _variable_paths(value, (*path, key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _variable_paths(value, (*path, i))


def _at(config: Any, path: Path) -> Any:
    for key in path:
        config = config[key]
    return config


def generate_variants(
    unresolved_spec: Mapping[str, Any],
    constant_grid_search: bool = False,
    random_state: Any = None,
) -> Iterator[tuple[dict[tuple[Any, ...], Any], dict[str, Any]]]:
    """Yield ``(resolved_vars, spec)`` for each grid point of `unresolved_spec`, as Ray.

    Args:
        unresolved_spec: a dict; its ``"config"`` entry (or itself, without one) is
            the search space.
        constant_grid_search: draw the random values once and use them for every grid
            point (Ray's `BasicVariantGenerator` option); otherwise each grid point
            gets its own draws.
        random_state: None (numpy's global generator), an int seed, a
            `random.Random`, or a numpy Generator / RandomState.

    Yields:
        ``resolved_vars`` maps each variable's key path (a tuple starting with
        ``"config"``) to its value; ``spec`` is `unresolved_spec` with the config resolved.

    Example:
        >>> from tunefleet.space import grid_search
        >>> [s["config"]["a"] for _, s in generate_variants({"config": {"a": grid_search([1, 2])}})]
        [1, 2]
    """
    if not isinstance(unresolved_spec, Mapping):
        raise SearchSpaceError(
            "generate_variants: unresolved_spec must be a dict, "
            f"not {type(unresolved_spec).__name__}"
        )
    nested = isinstance(unresolved_spec.get("config"), Mapping)
    space: Mapping[str, Any] = unresolved_spec["config"] if nested else unresolved_spec
    prefix: Path = ("config",) if nested else ()
    validate_space(space, root="config" if nested else "spec")
    rng = as_rng(random_state, "generate_variants")
    seed = rng.randrange(_SEED_BOUND)
    paths = list(_variable_paths(dict(space), ()))
    for point in grid_points(space):
        draws = random.Random(seed) if constant_grid_search else rng
        config = resolve(space, draws, point)
        resolved = {(*prefix, *path): _at(config, path) for path in paths}
        spec = {**unresolved_spec, "config": config} if nested else config
        yield resolved, dict(spec)
