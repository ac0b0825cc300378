"""Where storage is: a `storage_path` (a local path, or a URL or path in an fsspec filesystem).

`parse_storage` checks a value once, where the user gave it (`RunConfig`,
`Tuner.restore`, `Checkpoint(path, filesystem)`), and names what is wrong with it.
A remote location is a `Storage`: its canonical URL and the fsspec filesystem
reaching it. fsspec is imported only when a URL is used.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from typing import Any

from tunefleet.storage.paths import is_url

_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
# Stores where a put replaces an object whole, and folders do not exist.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
_ONE_SLASH = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")  # "s3:/b"; not "C:/" (one letter)


@dataclass(frozen=True)
class Storage:
    """A remote location: its canonical URL (no trailing ``/``) and the filesystem reaching it."""

    url: str
    fs: Any

    @property
    def path(self) -> str:
        """The location inside `fs` (the URL without its protocol)."""
        return strip(self.fs, self.url)

    def join(self, *parts: str) -> str:
        return "/".join((self.url, *parts))


def parse_storage(
    value: Any,
    filesystem: Any = None,
    *,
    where: str = "RunConfig.storage_path",
    fs_where: str = "RunConfig.storage_filesystem",
) -> Storage | None:
    """The remote storage `value` names; None for a local path (or no path).

    A URL (``s3://bucket/prefix``) is remote. With `filesystem` (an fsspec
    filesystem), `value` is a path in it, with or without the protocol; a local
    filesystem means a local path.

    Raises:
        ValueError: the value is not usable (unknown protocol, no bucket, ...), named.
        ImportError: fsspec or the protocol's implementation is missing; names the extra.
        TypeError: `filesystem` is not an fsspec filesystem.
    """
    if filesystem is not None:
        _check_filesystem(filesystem, fs_where)
    if value is None:
        if filesystem is not None:
            raise ValueError(
                f"{fs_where} is given but {where} is not: give the location in that "
                "filesystem, e.g. storage_path='s3://bucket/experiments'"
            )
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{where}={value!r} is not valid: give a local path or a URL such as "
            "'s3://bucket/experiments'"
        )
    if value.startswith("file:") or (filesystem is None and not is_url(value)):
        typo = _ONE_SLASH.match(value)
        if typo is not None and not value.startswith("file:"):
            fixed = f"{typo.group(1)}://{value[typo.end() :]}"
            raise ValueError(
                f"{where}={value!r} is not valid: it looks like a URL with one '/' too few; "
                f"did you mean {fixed!r}?"
            )
        return None
    protocol = value.split("://", 1)[0].lower() if is_url(value) else None
    if filesystem is None:
        assert protocol is not None
        fs, path = _from_url(value, protocol, where)
    else:
        fs = filesystem
        if "file" in _protocols(fs) or "local" in _protocols(fs):
            return None
        if protocol is not None and protocol not in _protocols(fs):
            raise ValueError(
                f"{where}={value!r} does not match {fs_where} ({type(fs).__name__}, "
                f"protocol {' or '.join(_protocols(fs))})"
            )
        path = strip(fs, value)
    if not path.strip("/"):
        raise ValueError(
            f"{where}={value!r} is not valid: it names no bucket or folder "
            "(e.g. 's3://bucket/experiments')"
        )
    return Storage(str(fs.unstrip_protocol(path)).rstrip("/"), fs)


def _fsspec(value: str, protocol: str | None, where: str) -> Any:
    try:
        return importlib.import_module("fsspec")
    except ImportError as exc:
        raise ImportError(
            f"{where}={value!r} needs fsspec (and its implementation of {protocol!r}): "
            f"{_install_hint(protocol)}"
        ) from exc


def _install_hint(protocol: str | None) -> str:
    extra = _EXTRAS.get(protocol or "")
    if extra is not None:
        return f'pip install "tunefleet[{extra}]"'
    return f"install fsspec and its implementation of {protocol!r} (see fsspec's documentation)"


def _from_url(value: str, protocol: str, where: str) -> tuple[Any, str]:
    fsspec = _fsspec(value, protocol, where)
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        raise ImportError(
            f"{where}={value!r} needs fsspec's implementation of {protocol!r}, which is not "
            f"installed: {_install_hint(protocol)} ({exc})"
        ) from exc
    except ValueError as exc:
        raise ValueError(
            f"{where}={value!r} is not valid: {protocol!r} is not a protocol fsspec knows "
            "(e.g. s3, gs, abfs, hdfs, sftp)"
        ) from exc
    try:
        fs, path = fsspec.core.url_to_fs(value)
    except Exception as exc:  # the implementation's own complaint about the URL
        raise ValueError(f"{where}={value!r} is not valid: {type(exc).__name__}: {exc}") from exc
    return fs, str(path).rstrip("/")


def _check_filesystem(filesystem: Any, where: str) -> None:
    fsspec = _fsspec("", None, where)
    if not isinstance(filesystem, fsspec.AbstractFileSystem):
        ray_hint = (
            " (Ray Tune takes a pyarrow filesystem here; tunefleet takes fsspec's)"
            if type(filesystem).__module__.startswith("pyarrow")
            else ""
        )
        raise TypeError(
            f"{where}={filesystem!r} is not an fsspec filesystem{ray_hint}: pass e.g. "
            "s3fs.S3FileSystem(endpoint_url=...), or leave it out to use fsspec's defaults"
        )


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def strip(fs: Any, url: str) -> str:
    """The path of `url` inside the fsspec filesystem `fs` (no protocol, no trailing ``/``)."""
    return str(fs._strip_protocol(url)).rstrip("/")


def object_store(fs: Any) -> bool:
    """Whether `fs` is an object store: a put replaces an object whole, and there are no folders."""
    return any(p in _OBJECT_STORES for p in _protocols(fs))
