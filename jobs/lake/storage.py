"""Where the lake lives: a local folder or an object store, behind one path interface.

``lake_path`` turns what a user configured (``data/lake``, ``file:///srv/lake``, ``s3://bucket/lake``,
``gs://…``, ``az://…``) into a ``pathlib.Path`` or an ``ObjectPath``; the lake's code then joins, globs,
reads and writes through that one interface. The few operations whose guarantees differ by backend have
one home here: ``write_atomically`` (temp file + fsync + rename locally, one PUT on an object store) and
``create_exclusive`` (``O_EXCL`` locally, a conditional PUT on an object store).

Library: obstore (Python bindings of the Rust ``object_store`` crate, the one polars reads with): conditional
PUTs for S3, GCS and Azure, the standard credential chains, no boto/aiobotocore version pins; polars scans
the same URIs natively and DuckDB reads them through obstore's fsspec adapter (``duckdb_filesystem``).
"""

from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.lake import objectpath
from jobs.lake.objectpath import ObjectPath, ObjectStat, client_options, is_object_uri

LakePath = Path | ObjectPath
"""A lake location: a local folder or a key prefix in an object store."""

__all__ = [
    "LakePath",
    "ObjectPath",
    "ObjectStat",
    "create_exclusive",
    "duckdb_filesystem",
    "forget_stores",
    "is_object_store",
    "is_object_uri",
    "lake_path",
    "polars_storage_options",
    "write_atomically",
]


def lake_path(value: str | os.PathLike[str] | ObjectPath) -> LakePath:
    """The lake location ``value`` names: ``s3://``/``gs://``/``az://`` URIs become ``ObjectPath``s,
    ``file://`` URIs and plain paths ``Path``s."""
    if isinstance(value, ObjectPath | Path):
        return value
    text = os.fspath(value)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    if "://" in text:
        if is_object_uri(text):
            return ObjectPath(text)
        raise ValueError(f"unsupported lake location {text!r}: use a path, file://, s3://, gs:// or az://")
    return Path(text)


def is_object_store(path: object) -> bool:
    return isinstance(path, ObjectPath)


def polars_storage_options(path: object) -> dict[str, str] | None:
    """What polars needs beyond the environment to read ``path`` (plain HTTP for a local server)."""
    if not isinstance(path, ObjectPath):
        return None
    return {"allow_http": "true"} if client_options().get("allow_http") else None


def write_atomically(final: LakePath, data: bytes) -> None:
    """Put ``data`` at ``final`` so that a reader sees the old file or the whole new one, never a part."""
    if isinstance(final, ObjectPath):
        final.write_bytes(data)  # one PUT is atomic
        return
    tmp = final.with_name(f".tmp-{final.name}.{uuid.uuid4().hex}.partial")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            exc.filename = str(final)  # a full disk says so at write() or fsync(), naming no file
        raise


def create_exclusive(path: LakePath, data: bytes) -> bool:
    """Create ``path`` holding ``data`` only if it does not exist; False when it does."""
    if isinstance(path, ObjectPath):
        return path.create_exclusive(data)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def duckdb_filesystem(path: object, cache_bytes: int = 256 << 20) -> Any | None:
    """An fsspec filesystem for DuckDB to read ``path``'s store through (``register_filesystem``), or None
    for a local lake.

    obstore's adapter, with three changes for how DuckDB reads a lake of many small files: globbing takes
    DuckDB's full ``s3://`` URIs (through ``ObjectPath.glob``, one listing); a listed file's size comes from
    the listing (no HEAD); and a file is fetched whole with one GET and kept in memory (least recently used
    first out, at most ``cache_bytes``, keyed by size and ETag), because DuckDB reads every file's footer at
    bind time (``union_by_name``) and then its columns, each a ranged request otherwise.
    """
    if not isinstance(path, ObjectPath):
        return None
    key = (path.scheme, path.bucket, cache_bytes)
    with _DUCKDB_GUARD:
        if key not in _DUCKDB_FILESYSTEMS:
            _DUCKDB_FILESYSTEMS[key] = _new_duckdb_filesystem(path, cache_bytes)
        return _DUCKDB_FILESYSTEMS[key]


_DUCKDB_FILESYSTEMS: dict[tuple[str, str, int], Any] = {}
_DUCKDB_GUARD = threading.Lock()


def forget_stores() -> None:
    """Drop the cached stores and DuckDB filesystems (tests that restart a local server or change the
    environment)."""
    objectpath.forget_stores()
    with _DUCKDB_GUARD:
        _DUCKDB_FILESYSTEMS.clear()


def _new_duckdb_filesystem(path: ObjectPath, cache_bytes: int) -> Any:
    """One per (scheme, bucket) and process: the whole-file cache serves every connection."""
    import io
    from collections import OrderedDict

    from obstore.fsspec import FsspecStore

    class _DuckDBStore(FsspecStore):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._listed: dict[str, ObjectStat] = {}
            self._bodies: OrderedDict[tuple[str, int, str | None], bytes] = OrderedDict()
            self._held = 0
            self._guard = threading.Lock()

        def glob(self, path: str, **kwargs: Any) -> list[str]:
            pattern = ObjectPath(path)  # scheme, bucket, and the key pattern ObjectPath.glob matches
            bucket = ObjectPath(f"{pattern.scheme}://{pattern.bucket}")
            found = list(bucket.glob(pattern.key, files_only=True))
            with self._guard:
                for item in found:
                    self._listed[str(item)] = item.listed_stat()
            return [str(item) for item in found]

        def _stat(self, path: str) -> ObjectStat:
            uri = path if "://" in path else f"{self.protocol_prefix}{path}"
            with self._guard:
                known = self._listed.get(uri)
            return known if known is not None else ObjectPath(uri).stat()

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            stat = self._stat(path)
            return {"name": path, "size": stat.st_size, "type": "file"}

        def size(self, path: str) -> int:
            return self._stat(path).st_size

        def modified(self, path: str) -> datetime:  # DuckDB asks this of every file it opens
            return datetime.fromtimestamp(self._stat(path).st_mtime, UTC)

        def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
            if mode != "rb":
                raise PermissionError(f"the lake's DuckDB views are read-only: {path}")
            uri = path if "://" in path else f"{self.protocol_prefix}{path}"
            stat = self._stat(uri)
            key = (uri, stat.st_size, stat.etag)
            with self._guard:
                body = self._bodies.get(key)
                if body is not None:
                    self._bodies.move_to_end(key)
            if body is None:
                body = ObjectPath(uri).read_bytes()
                with self._guard:
                    self._bodies[key] = body
                    self._held += len(body)
                    while self._held > cache_bytes and len(self._bodies) > 1:
                        self._held -= len(self._bodies.popitem(last=False)[1])
            return io.BytesIO(body)

        @property
        def protocol_prefix(self) -> str:
            proto = self.protocol if isinstance(self.protocol, str) else self.protocol[0]
            return f"{proto}://"

    return _DuckDBStore(path.scheme, client_options=client_options())
