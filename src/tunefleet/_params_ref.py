"""`tune.with_parameters` objects by reference: written once, loaded once per process.

While a backend pickles the trainable inside `spill_to(directory)`, parameters that
pickle to `SPILL_MIN_BYTES` or more are written once to ``directory/params_<sha256>.pkl``
and the trainable carries only a `ParamsRef` (the path and the content hash). A worker
process unpickling it loads the file once, checks its hash (the reference itself comes
inside the verified trainable file, so the hash vouches for the file) and keeps the
objects by hash for every later trial. Outside `spill_to` (the Ray backend, which puts
the whole trainable in Ray's object store once) parameters stay inline.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple

SPILL_MIN_BYTES = 1 << 20  # smaller parameters ride inline: a file costs more than they do

_spill_dir: ContextVar[str | None] = ContextVar("tunefleet_params_spill_dir", default=None)
_loaded: dict[str, dict[str, Any]] = {}  # sha256 -> parameters, in this process
files_read = 0  # parameter files this process has read (tests observe it)


class ParamsRef(NamedTuple):
    """Where `with_parameters`' objects were written, and the sha256 of that file."""

    path: str
    sha256: str


@contextlib.contextmanager
def spill_to(directory: str) -> Iterator[None]:
    """Within: large `with_parameters` objects pickled are written once into `directory`."""
    token = _spill_dir.set(directory)
    try:
        yield
    finally:
        _spill_dir.reset(token)


def reference(params: dict[str, Any]) -> dict[str, Any] | ParamsRef:
    """What to pickle for `params`: themselves, or a `ParamsRef` to the file holding them."""
    directory = _spill_dir.get()
    if directory is None or not params:
        return params
    import cloudpickle

    data = cloudpickle.dumps(params)
    if len(data) < SPILL_MIN_BYTES:
        return params
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(directory, f"params_{digest}.pkl")
    if not os.path.exists(path):  # the same objects in one experiment: one file
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    _loaded[digest] = params  # the driver has them already
    return ParamsRef(path, digest)


def resolve(value: dict[str, Any] | ParamsRef) -> dict[str, Any]:
    """The parameters `reference` gave `value` for, read at most once per process."""
    global files_read
    if not isinstance(value, ParamsRef):
        return value
    cached = _loaded.get(value.sha256)
    if cached is not None:
        return cached
    import cloudpickle

    try:
        with open(value.path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise RuntimeError(
            f"tune.with_parameters: cannot read the parameters file {value.path}: {exc}"
        ) from exc
    if hashlib.sha256(data).hexdigest() != value.sha256:
        raise RuntimeError(
            f"tune.with_parameters: refusing to unpickle {value.path}: its sha256 does not "
            "match the one this run recorded (it was changed since it was written)"
        )
    files_read += 1
    params: dict[str, Any] = cloudpickle.loads(data)
    _loaded[value.sha256] = params
    return params


def remove_spilled(directory: str) -> None:
    """Delete the parameter files written into `directory` (the run is over)."""
    for path in glob.glob(os.path.join(directory, "params_*.pkl")):
        with contextlib.suppress(OSError):
            os.remove(path)
