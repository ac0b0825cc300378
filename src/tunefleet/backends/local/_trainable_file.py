"""The trainable file: written once by the driver, unpickled by workers only if it verifies.

The file holds ``MAGIC``, the hex HMAC-SHA256 of the payload and a newline, then
the cloudpickled payload. The key is random for each run and reaches the workers
only over their socket to the driver, never the disk, their environment or their
arguments (``/proc/<pid>/environ`` and ``cmdline`` would show it): a file this run did
not write (a leftover of an earlier run, or one changed since) is refused before
a byte of it is unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Any

_MAGIC = b"tunefleet-trainable hmac-sha256\n"
_DIGEST_HEX = 64


class TrainableFileError(RuntimeError):
    """The trainable file is missing, malformed, or was not written by this run."""


def new_key() -> bytes:
    return secrets.token_bytes(32)


def _digest(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).hexdigest().encode("ascii")


def write_trainable_file(path: str, payload: object, key: bytes) -> None:
    """Pickle `payload` with cloudpickle and write it, signed, atomically (mode 0600)."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(payload)
    except Exception as exc:
        raise TypeError(
            f"the trainable cannot be sent to worker processes (pickling failed: {exc}); "
            "objects it uses must be picklable: pass large or special objects with "
            "tune.with_parameters, or create them inside the trainable"
        ) from exc
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(_MAGIC + _digest(key, data) + b"\n")
        f.write(data)
    os.replace(tmp, path)


def read_trainable_file(path: str, key: bytes) -> Any:
    """The payload written by `write_trainable_file` with `key`; refuses anything else."""
    import cloudpickle

    if not key:
        raise TrainableFileError(
            f"refusing to load the trainable file {path}: this worker was given no key "
            "by the driver, so the file cannot be verified"
        )
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TrainableFileError(f"cannot read the trainable file {path}: {exc}") from exc
    header_end = len(_MAGIC) + _DIGEST_HEX + 1
    signed = data[header_end:]
    digest = data[len(_MAGIC) : header_end - 1]
    if (
        not data.startswith(_MAGIC)
        or data[header_end - 1 : header_end] != b"\n"
        or not hmac.compare_digest(digest, _digest(key, signed))
    ):
        raise TrainableFileError(
            f"refusing to unpickle the trainable file {path}: its HMAC-SHA256 does not "
            "match, so it was not written by this run of the experiment or it was changed "
            "since"
        )
    return cloudpickle.loads(signed)
