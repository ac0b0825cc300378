"""JSON for the browser: flat configs, redacted values, no NaN, safe inside HTML."""

from __future__ import annotations

import json
import math
from typing import Any

from tunefleet._redact import redact


def clean(obj: Any) -> Any:
    """`obj` redacted, with non-finite floats as strings and anything odd as text."""
    return _finite(redact(obj))


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return str(obj)


def to_json(obj: Any) -> str:
    """Strict JSON text (no NaN), safe to embed in HTML (no ``<``, ``>`` or ``&``)."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
