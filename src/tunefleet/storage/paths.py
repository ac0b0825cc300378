"""Names become paths only as checked names or slugs plus ids, and never leave their base.

- An experiment name the user gives (``RunConfig(name=...)``) is kept as it is if it
  is safe, and refused otherwise (`experiment_dirname`); a generated one is a slug.
- A trial directory is the trial id, or the slug of what ``trial_dirname_creator``
  returned plus the trial id (`trial_dirname`), with the trial's secrets hidden.
- Every such path goes through `safe_child`: resolved (symlinks too), it must lie
  strictly inside its base directory.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from typing import Any

MAX_SLUG = 100
"""Characters kept of a slug (the trial id is appended after it)."""
MAX_NAME_BYTES = 200
"""Longest experiment name, in UTF-8 bytes: room for a timestamp suffix under 255."""
_MAX_COMPONENT_BYTES = 255  # NAME_MAX on Linux and macOS

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_EDGES = "._- "


def is_url(path: object) -> bool:
    """Whether `path` is a URL of remote storage such as ``s3://bucket/x`` (not a local path).

    ``file://`` URLs are local paths, not remote storage.

    Example:
        >>> is_url("s3://bucket/exp"), is_url("/tmp/exp"), is_url("file:///tmp/exp")
        (True, False, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None and not path.startswith("file:")


def local_path(path: str) -> str:
    """A local path given as a path or a ``file:`` URL, as a path.

    Example:
        >>> local_path("file:///tmp/exp"), local_path("/tmp/exp")
        ('/tmp/exp', '/tmp/exp')
    """
    if path.startswith("file://"):
        return path[len("file://") :]
    return path[len("file:") :] if path.startswith("file:") else path


def slug(text: str, max_len: int = MAX_SLUG) -> str:
    """`text` reduced to ``[A-Za-z0-9._-]``: other runs become ``_``, no leading or
    trailing ``. _ -`` (so never ``.``, ``..`` or a hidden name), at most `max_len`
    characters. May be empty.

    Example:
        >>> slug("../../etc/passwd")
        'etc_passwd'
        >>> slug("lr=0.1, layers=3")
        'lr_0.1_layers_3'
    """
    return _UNSAFE.sub("_", text).strip(_EDGES)[:max_len].rstrip(_EDGES)


def experiment_dirname(name: str) -> str:
    """A user-given experiment name, unchanged if it is safe as one directory name.

    Raises:
        ValueError: naming the value and the rule it breaks.
    """
    rule = _unsafe_name(name)
    if rule is not None:
        raise ValueError(
            f"RunConfig.name={name!r} is not valid: {rule}. It is the experiment's directory "
            "name under storage_path; put parent folders in storage_path"
        )
    return name


def _unsafe_name(name: Any) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "it must be a non-empty string"
    if name in (".", ".."):
        return "'.' and '..' are not names"
    if "/" in name or "\\" in name or (os.altsep and os.altsep in name):
        return "it must not contain '/' or '\\'"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it must not contain NUL or other control characters"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"it must be at most {MAX_NAME_BYTES} bytes long"
    return None


def default_experiment_name(trainable_name: str, stamp: str) -> str:
    """``<slug of the trainable's name>_<stamp>`` (a lambda's ``<lambda>`` -> ``lambda``)."""
    return f"{slug(trainable_name, 60) or 'experiment'}_{stamp}"


def trial_dirname(raw: Any, trial_id: str, config: dict[str, Any] | None = None) -> str:
    """The directory name of a trial from what ``trial_dirname_creator`` returned.

    The trial's secrets are hidden, the rest slugged and capped at `MAX_SLUG`
    characters; the trial id is appended unless the slug already holds it as a
    whole word, so names stay unique. Nothing (None) gives the trial id itself.

    Example:
        >>> trial_dirname("../x", "a1b2c_00003")
        'x_a1b2c_00003'
    """
    if raw is None:
        return trial_id
    from tunefleet._redact import redact_text, secret_values

    text = redact_text(str(raw), secret_values(config or {}))
    name = slug(text)
    if not name:
        return trial_id
    if re.search(rf"(?<![A-Za-z0-9]){re.escape(trial_id)}(?![A-Za-z0-9])", name):
        return name
    return f"{name}_{trial_id}"


@functools.lru_cache(maxsize=16)
def _real_base(base: str) -> str:
    """``realpath(base)``, resolved once per process: an experiment's folder is the base of
    every trial's folder, and resolving it walks every component of its path."""
    return os.path.realpath(base)


def _resolved_under(root: str, text: str) -> str:
    """``realpath(root/text)`` for a resolved `root`, with one ``lstat`` per component of
    `text` instead of one per component of the whole path (a trial's folder is made this
    way once per trial)."""
    parts = text.split(os.sep)
    if any(part in ("", ".", "..") for part in parts):
        return os.path.realpath(os.path.join(root, text))
    path = root
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except OSError:  # nothing below exists: no link to follow
            return os.path.join(path, *parts[i + 1 :])
        if stat.S_ISLNK(mode):
            return os.path.realpath(os.path.join(root, text))
    return path


def safe_child(base: str | os.PathLike[str], name: str | os.PathLike[str]) -> str:
    """The resolved path of `name` under `base`, checked to stay strictly inside it.

    `name` is relative (it may have several components). Symlinks are resolved
    before the check, so a link pointing outside is refused too.

    Raises:
        ValueError: naming the value and the rule (absolute, NUL, too long, outside).

    Example:
        >>> safe_child("/tmp/exp", "trials/t_00001")
        '/tmp/exp/trials/t_00001'
    """
    text = os.fspath(name)
    if not isinstance(text, str) or not text:
        raise ValueError(f"path name {name!r} is not valid: it must be a non-empty string")
    if "\x00" in text:
        raise ValueError(f"path name {name!r} is not valid: it must not contain a NUL character")
    if os.path.isabs(text):
        raise ValueError(
            f"path name {name!r} is not valid: it is absolute; it must be relative to {base}"
        )
    for part in text.split(os.sep):
        if len(part.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT_BYTES:
            raise ValueError(
                f"path name {name!r} is not valid: a component is longer than "
                f"{_MAX_COMPONENT_BYTES} bytes"
            )
    root = _real_base(os.path.abspath(base))  # a relative base: from the cwd of now
    child = _resolved_under(root, text)
    inside = root if root.endswith(os.sep) else root + os.sep
    if not child.startswith(inside):
        raise ValueError(
            f"path name {name!r} is not valid: it resolves to {child}, which is not inside "
            f"{root}; names must stay inside their directory"
        )
    return child
