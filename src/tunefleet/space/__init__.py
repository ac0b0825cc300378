"""Search spaces: the domains, the functions that build them, and operations over a space.

`_domains` holds the domains and their constructors, `_resolve` validation, grid
expansion, resolution and `sample_from`, `_json` reading a space back from JSON.
Import every name from here.
"""

from tunefleet._metrics import flatten
from tunefleet.space._domains import (
    GRID_KEY,
    Categorical,
    Domain,
    Float,
    Integer,
    Normal,
    Path,
    PathKey,
    format_path,
    space_to_json,
)
from tunefleet.space._errors import RecursiveDependencyError, SearchSpaceError
from tunefleet.space._functions import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    uniform,
)
from tunefleet.space._json import space_from_json
from tunefleet.space._resolve import (
    Chooser,
    Function,
    grid_axes,
    grid_point,
    grid_points,
    grid_size,
    has_domains,
    parameter_name,
    resolve,
    sample_from,
    validate_space,
)
from tunefleet.space._variants import generate_variants

__all__ = [
    "GRID_KEY",
    "Categorical",
    "Chooser",
    "Domain",
    "Float",
    "Function",
    "Integer",
    "Normal",
    "Path",
    "PathKey",
    "RecursiveDependencyError",
    "SearchSpaceError",
    "choice",
    "flatten",
    "format_path",
    "generate_variants",
    "grid_axes",
    "grid_point",
    "grid_points",
    "grid_search",
    "grid_size",
    "has_domains",
    "lograndint",
    "loguniform",
    "parameter_name",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "resolve",
    "sample_from",
    "space_from_json",
    "space_to_json",
    "uniform",
    "validate_space",
]
