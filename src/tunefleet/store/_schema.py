"""The experiment database: file layout, schema, and the JSON encoding of every value.

Columns that hold JSON are declared TEXT on purpose: SQLite gives a column typed
``JSON`` NUMERIC affinity, which would turn the text ``"5"`` into the integer 5.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tunefleet._metrics import json_data
from tunefleet._redact import redact, redact_state

DB_FILENAME = "experiment.db"
TRIALS_DIRNAME = "trials"
SCHEMA_VERSION = 1
DEFAULT_STORAGE = "~/tunefleet_results"
STORAGE_ENV = "TUNEFLEET_STORAGE"

# One transaction: a reader sees all of tunefleet's tables or none (a new database).
SCHEMA = """
BEGIN;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated REAL);
-- the items of a state's StateLogs (`tunefleet._state_log`), each written once
CREATE TABLE IF NOT EXISTS state_log (
    key TEXT NOT NULL,
    path TEXT NOT NULL,
    seq INTEGER NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (key, path, seq)
);
CREATE TABLE IF NOT EXISTS trials (
    trial_id TEXT PRIMARY KEY,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    data TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    trial_id TEXT,
    kind TEXT NOT NULL,
    data TEXT
);
CREATE INDEX IF NOT EXISTS events_by_trial ON events (trial_id, seq);
CREATE TABLE IF NOT EXISTS results (
    trial_id TEXT NOT NULL,
    iteration INTEGER,
    time REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_trial ON results (trial_id, iteration);
CREATE TABLE IF NOT EXISTS checkpoints (
    trial_id TEXT NOT NULL,
    iteration INTEGER,
    path TEXT NOT NULL,
    metrics TEXT NOT NULL,
    time REAL NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS checkpoints_by_trial ON checkpoints (trial_id, iteration);
CREATE INDEX IF NOT EXISTS checkpoints_by_path ON checkpoints (path);
COMMIT;
"""


def default_storage_path() -> str:
    """Where experiments go when no storage path is given.

    ``$TUNEFLEET_STORAGE`` if set, else ``~/tunefleet_results`` (user-expanded).
    """
    return os.path.expanduser(os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE)


def db_path(experiment_path: str | os.PathLike[str]) -> Path:
    """The database file of an experiment directory (or the file itself if given)."""
    path = Path(experiment_path).expanduser()
    return path if path.name == DB_FILENAME and not path.is_dir() else path / DB_FILENAME


def _default(obj: Any) -> Any:
    """`json.dumps` hook, and the whole value when that fails: JSON types only, redacted."""
    return redact(json_data(obj))


# one encoder for every record: `json.dumps` with options builds a new one per call
_ENCODER = json.JSONEncoder(default=_default, separators=(",", ":"))


def _chunked_encoder() -> Callable[[Any], str]:
    """`_ENCODER.encode`, without building the C encoder anew at each call (2-5 us of a
    result's 7-13): the same C encoder, kept. No circular check (a RecursionError
    instead, which `encode` answers as it did)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator in this Python
        return _ENCODER.encode
    e = _ENCODER  # its settings, so that the two cannot differ
    chunks = make(
        None,
        e.default,
        json.encoder.encode_basestring_ascii if e.ensure_ascii else json.encoder.encode_basestring,
        e.indent,
        e.key_separator,
        e.item_separator,
        e.sort_keys,
        e.skipkeys,
        e.allow_nan,
    )
    return lambda obj: "".join(chunks(obj, 0))


_ENCODE = _chunked_encoder()


def _safe_str(obj: Any) -> str:
    try:
        return str(obj)
    except Exception:
        return f"<unprintable {type(obj).__name__}>"


def encode(obj: Any, *, state: bool = False) -> str:
    """JSON text of `obj`; never raises.

    NaN and infinities are written as ``NaN`` / ``Infinity`` (what `json.loads`
    reads back). Values json cannot take are made JSON by `tunefleet._metrics.json_data`
    (numpy and torch values as numbers and lists, else `str()`); keys that are not
    strings become strings.

    Secrets are hidden first (`tunefleet._redact.redact`: secret-looking keys,
    `tune.Secret`, URL passwords), so nothing written to the store holds one. An
    algorithm's saved state (`state=True`) goes through `redact_state` instead, which
    does not judge its keys by their names, so that it reads back exactly.
    """
    obj = _redacted(obj, state)
    try:
        return _ENCODE(obj)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return json.dumps(_default(obj), separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return json.dumps(_safe_str(obj))


def _redacted(obj: Any, state: bool) -> Any:
    try:
        return redact_state(obj) if state else redact(obj)
    except Exception:  # encode never raises: something odd is made plain JSON first
        return _default(obj)


def decode(text: str | bytes | None) -> Any:
    """Read what `encode` wrote (None stays None)."""
    if text is None:
        return None
    return json.loads(text)


def decode_many(texts: Sequence[str | bytes | None]) -> list[Any] | None:
    """`decode` of each of `texts`, in one parse of them all (as the items of one JSON
    array): a call per item, most of the cost of reading many small ones (a state log's
    300,000 rows), is paid once, and equal keys decode to one string. None when they
    are not exactly one JSON value each: decode them one by one, for the error of the
    one that is not."""
    try:  # a bytes text that is not UTF-8 is a ValueError (UnicodeDecodeError) too
        parts = ["null" if t is None else t.decode() if isinstance(t, bytes) else t for t in texts]
        values = json.loads(f"[{','.join(parts)}]")
    except ValueError:
        return None
    return values if isinstance(values, list) and len(values) == len(parts) else None


DECODED_AT_ONCE = 4096  # texts parsed together by `decode_each`


def decode_each(texts: Sequence[str | bytes | None]) -> list[Any]:
    """`decode` of each of `texts`, `DECODED_AT_ONCE` parsed together (`decode_many`); a
    chunk with a text that is not one JSON value is decoded one by one, so the error
    raised is that text's own."""
    values: list[Any] = []
    for at in range(0, len(texts), DECODED_AT_ONCE):
        chunk = texts[at : at + DECODED_AT_ONCE]
        parsed = decode_many(chunk)
        values.extend([decode(text) for text in chunk] if parsed is None else parsed)
    return values
