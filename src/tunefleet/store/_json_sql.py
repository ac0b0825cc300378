"""SQL that reads keys out of a result's JSON text, as `tunefleet._metrics.lookup` does.

For `StoreReader.result_values` and `StoreReader.result_ranges`: a key is a result key
or a "/"-joined path into nested dicts (a top-level "a/b" key first). Only results
SQLite can parse are read in SQL; the others (``NaN``, ``Infinity``) are decoded in
Python and given the same way (`as_sql`).
"""

from __future__ import annotations

import json
from typing import Any

from tunefleet._metrics import MISSING


def as_sql(value: Any) -> Any:
    """A value looked up in Python as `extract_sql` gives it."""
    if value is MISSING or value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return json.dumps(value, separators=(",", ":"))


def from_json_text(text: str | None) -> Any:
    """A value `extract_sql` read (JSON text): numbers as numbers, null as None."""
    if text is None or text == "null":
        return None
    if text[0] in "-0123456789":
        return float(text) if "." in text or "e" in text or "E" in text else int(text)
    return text


def extract_sql(key: str) -> str:
    """SQL reading `key` of a valid result as `lookup` would, as JSON text (``->``)."""
    paths = ["$." + _quoted(key)]
    if "/" in key:  # a top-level "a/b" first, else the nested path
        paths.append("$." + ".".join(_quoted(part) for part in key.split("/")))
    reads = [f"data -> '{p}'" for p in paths]
    read = reads[0] if len(reads) == 1 else f"COALESCE({', '.join(reads)})"
    return f"CASE WHEN json_valid(data) THEN {read} END"  # else: decoded in Python


def number_sql(key: str) -> str:
    """SQL for `key` of a valid result when it is a number (as `lookup` reads it), else NULL."""
    first = "$." + _quoted(key)

    def number(path: str) -> str:
        return (
            f"CASE json_type(data, '{path}') WHEN 'integer' THEN json_extract(data, '{path}') "
            f"WHEN 'real' THEN json_extract(data, '{path}') END"
        )

    read = number(first)
    if "/" in key:  # a top-level "a/b" if there is one, else the nested path
        nested = "$." + ".".join(_quoted(part) for part in key.split("/"))
        read = f"CASE WHEN json_type(data, '{first}') IS NULL THEN {number(nested)} ELSE {read} END"
    return f"CASE WHEN json_valid(data) THEN {read} END"


def _quoted(part: str) -> str:
    """One JSON path step, quoted (the key has no double quote or backslash)."""
    return '"' + part.replace("'", "''") + '"'
