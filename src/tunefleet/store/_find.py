"""Finding experiments on disk: the experiments under a storage path, and the one a name
or a path names (with the names that exist when none matches)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from tunefleet.store._schema import DB_FILENAME
from tunefleet.store._schema import default_storage_path as _default_storage


def list_experiments(storage_path: str | os.PathLike[str] | None = None) -> list[Path]:
    """The experiment directories directly under `storage_path`, by name.

    Args:
        storage_path: where to look (default: `default_storage_path()`).
    """
    root = Path(storage_path if storage_path is not None else _default_storage()).expanduser()
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if (p / DB_FILENAME).is_file()), key=lambda p: p.name)


def resolve_experiment(
    name_or_path: str, storage_path: str | os.PathLike[str] | None = None
) -> Path:
    """The directory of an experiment given by path (directory or its database) or by name.

    Args:
        name_or_path: a path to the experiment directory or to its ``experiment.db``,
            or the name of an experiment under `storage_path`.
        storage_path: where names are looked up (default: `default_storage_path()`).

    Raises:
        FileNotFoundError: nothing matches; the message lists the experiments that exist.
    """
    given = Path(name_or_path).expanduser()
    if given.is_file() and given.suffix == ".db":
        return given.resolve().parent
    if (given / DB_FILENAME).is_file():
        return given.resolve()
    root = Path(storage_path if storage_path is not None else _default_storage()).expanduser()
    if not given.is_absolute() and (root / given / DB_FILENAME).is_file():
        return (root / given).resolve()
    names = [p.name for p in list_experiments(root)]
    close = difflib.get_close_matches(str(name_or_path), names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    if names:
        shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
        known = f"experiments under {root}: {shown}"
    else:
        known = f"there are no experiments under {root}"
    raise FileNotFoundError(
        f"No experiment {str(name_or_path)!r}: not a directory with an {DB_FILENAME}, nor an "
        f"experiment name under {root}.{hint} ({known})"
    )
