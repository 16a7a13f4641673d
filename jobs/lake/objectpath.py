"""A ``pathlib``-shaped path into an object store (S3, GCS, Azure), on obstore.

Why a path class: the lake's readers and writers are written against ``pathlib.Path`` (join, glob, stat,
read, write, unlink). ``ObjectPath`` offers the part of that interface the lake uses, with object-store
semantics underneath, so one code path serves a local folder and a bucket:

- a write is one PUT, atomic by itself (a reader sees the old object or the new one, never a part);
  ``create_exclusive`` is a conditional PUT (``If-None-Match: *``) that fails when the key exists;
- folders are key prefixes: ``mkdir`` does nothing, a folder exists while a key lies under it;
- ``rename`` is copy then delete (object stores have no atomic rename): the lake only renames into the
  quarantine, where a reader seeing both copies for a moment is harmless;
- ``stat`` gives the object's size and last-modified time (``st_mtime_ns``), which the lake's file-check
  caches key on.

Credentials and endpoints come from the store's usual environment chain (``AWS_*``, ``GOOGLE_*``,
``AZURE_*``, instance metadata, web identity), read by obstore; this module never logs or formats them.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.store import ObjectStore, from_url

SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss")
_URI = re.compile(r"^(?P<scheme>[a-z0-9]+)://(?P<bucket>[^/]+)/?(?P<key>.*)$")
_STORES: dict[tuple[str, str], ObjectStore] = {}
_STORES_GUARD = threading.Lock()


def is_object_uri(value: object) -> bool:
    """True for ``s3://…``, ``gs://…``, ``az://…`` (and their aliases)."""
    match = _URI.match(str(value)) if isinstance(value, str | ObjectPath) else None
    return bool(match and match["scheme"] in SCHEMES)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def client_options() -> dict[str, Any]:
    """Client options the environment asks for (``AWS_ALLOW_HTTP`` for a plain-HTTP endpoint such as a
    local S3-compatible server); credentials are not options and are left to the store's own chain."""
    return {"allow_http": True} if _env_flag("AWS_ALLOW_HTTP") else {}


def store_for(scheme: str, bucket: str) -> ObjectStore:
    """One store per (scheme, bucket) and process, built from the environment's configuration."""
    key = (scheme, bucket)
    with _STORES_GUARD:
        store = _STORES.get(key)
        if store is None:
            store = from_url(f"{scheme}://{bucket}", client_options=client_options())  # type: ignore[arg-type]
            _STORES[key] = store
        return store


def forget_stores() -> None:
    """Drop the cached stores (tests that restart a local server, or change the environment)."""
    with _STORES_GUARD:
        _STORES.clear()


@dataclass(frozen=True)
class ObjectStat:
    """What ``ObjectPath.stat`` returns: the fields of ``os.stat_result`` the lake reads."""

    st_size: int
    st_mtime_ns: int
    etag: str | None

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9


def _segment_regex(segment: str) -> str:
    if segment == "**":
        return r"(?:[^/]+/)*"
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        close = segment.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif close != -1:
            body = segment[i + 1 : close]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = close
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out) + "/"


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A glob pattern (``*``, ``?``, ``[...]`` within a segment; ``**`` across segments) as a regex over
    relative keys; matched against ``relative + "/"`` so files and implied folders match alike."""
    parts = [p for p in pattern.split("/") if p]
    return re.compile("".join(_segment_regex(p) for p in parts) + r"\Z", re.DOTALL)


class ObjectPath:
    """``s3://bucket/some/key`` as a path. Immutable, hashable, ordered by its URI."""

    __slots__ = ("_listed", "bucket", "key", "scheme")

    def __init__(self, uri: str | ObjectPath, *more: str) -> None:
        match = _URI.match(str(uri))
        if not match or match["scheme"] not in SCHEMES:
            raise ValueError(f"not an object-store URI: {uri!r} (expected one of {', '.join(SCHEMES)})")
        key = "/".join(p for p in [match["key"], *more] if p)
        self.scheme: str = match["scheme"]
        self.bucket: str = match["bucket"]
        self.key: str = "/".join(p for p in key.split("/") if p and p != ".")
        self._listed: ObjectStat | None = None

    # -- pure path operations ------------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: ObjectPath) -> bool:
        return str(self) < str(other)

    def __truediv__(self, other: str | os.PathLike[str]) -> ObjectPath:
        return ObjectPath(str(self), str(other))

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else ""

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(
            f"{self.scheme}://{self.bucket}/{self.key.rsplit('/', 1)[0] if '/' in self.key else ''}"
        )

    @property
    def parts(self) -> tuple[str, ...]:
        return (f"{self.scheme}://{self.bucket}", *self.key.split("/")) if self.key else (str(self),)

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def with_suffix(self, suffix: str) -> ObjectPath:
        return self.with_name(self.stem + suffix)

    def relative_to(self, other: ObjectPath | str) -> PurePosixPath:
        base = ObjectPath(str(other)) if not isinstance(other, ObjectPath) else other
        prefix = base.key + "/" if base.key else ""
        if (base.scheme, base.bucket) != (self.scheme, self.bucket) or not self.key.startswith(prefix):
            raise ValueError(f"{self} is not under {base}")
        return PurePosixPath(self.key[len(prefix) :] or ".")

    def resolve(self) -> ObjectPath:
        return self

    def absolute(self) -> ObjectPath:
        return self

    def expanduser(self) -> ObjectPath:
        return self

    @property
    def store(self) -> ObjectStore:
        return store_for(self.scheme, self.bucket)

    # -- reading the store -----------------------------------------------------------------------------------
    def stat(self) -> ObjectStat:
        try:
            meta = obstore.head(self.store, self.key)
        except NotFoundError:
            raise FileNotFoundError(str(self)) from None
        return _stat_of(meta)

    def listed_stat(self) -> ObjectStat:
        """The size and time the listing that found this path reported (no request); a HEAD otherwise."""
        return self._listed if self._listed is not None else self.stat()

    def _with_listing(self, meta: Any) -> ObjectPath:
        self._listed = _stat_of(meta)
        return self

    def is_file(self) -> bool:
        try:
            self.stat()
        except FileNotFoundError:
            return False
        return True

    def is_dir(self) -> bool:
        for chunk in obstore.list(self.store, self.key + "/" if self.key else None, chunk_size=1):
            return bool(chunk)
        return False

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def iterdir(self) -> Iterator[ObjectPath]:
        listed = obstore.list_with_delimiter(self.store, self.key + "/" if self.key else None)
        found = [
            ObjectPath(f"{self.scheme}://{self.bucket}/{p.rstrip('/')}") for p in listed["common_prefixes"]
        ]
        found += [
            ObjectPath(f"{self.scheme}://{self.bucket}/{m['path']}")._with_listing(m)
            for m in listed["objects"]
        ]
        yield from sorted(found)

    def _keys_under(self) -> Iterator[Any]:
        prefix = self.key + "/" if self.key else None
        for chunk in obstore.list(self.store, prefix, chunk_size=1000):
            yield from chunk

    def glob(self, pattern: str, *, files_only: bool = False) -> Iterator[ObjectPath]:
        """Keys and implied folders under this path matching ``pattern`` (sorted; only keys with
        ``files_only``). One segment lists one level (a delimiter listing); deeper patterns list the prefix
        before their first wildcard."""
        parts = [p for p in pattern.split("/") if p]
        if not parts:
            return iter(())
        if len(parts) == 1 and parts[0] != "**" and not files_only:
            return iter(sorted(p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, parts[0])))
        literal = 0
        while literal < len(parts) - 1 and not any(c in parts[literal] for c in "*?["):
            literal += 1
        base = self / "/".join(parts[:literal]) if literal else self
        regex = _pattern_regex("/".join(parts[literal:]))
        prefix = base.key + "/" if base.key else ""
        found: dict[str, Any] = {}
        for meta in base._keys_under():
            relative = meta["path"][len(prefix) :]
            segments = relative.split("/")
            for depth in range(len(segments) if files_only else 1, len(segments) + 1):
                candidate = "/".join(segments[:depth])
                if regex.match(candidate + "/"):
                    found[candidate] = meta if depth == len(segments) else found.get(candidate)
        return iter(
            ObjectPath(str(base), c)._with_listing(found[c]) if found[c] else ObjectPath(str(base), c)
            for c in sorted(found)
        )

    def rglob(self, pattern: str) -> Iterator[ObjectPath]:
        return self.glob(f"**/{pattern}")

    def read_bytes(self) -> bytes:
        try:
            return bytes(obstore.get(self.store, self.key).bytes())
        except NotFoundError:
            raise FileNotFoundError(str(self)) from None

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def read_range(self, start: int, end: int) -> bytes:
        try:
            return bytes(obstore.get_range(self.store, self.key, start=start, end=end))
        except NotFoundError:
            raise FileNotFoundError(str(self)) from None

    def open(self, mode: str = "rb", encoding: str | None = None) -> IO[Any]:
        """``rb``/``r``: the whole object in memory; ``wb``/``w``: buffered, one PUT on close."""
        if mode in ("rb", "r"):
            data = io.BytesIO(self.read_bytes())
            return data if mode == "rb" else io.TextIOWrapper(data, encoding=encoding or "utf-8")
        if mode in ("wb", "w"):
            writer = _PutOnClose(self)
            return writer if mode == "wb" else io.TextIOWrapper(writer, encoding=encoding or "utf-8")
        raise ValueError(f"ObjectPath.open: unsupported mode {mode!r}")

    # -- writing the store -----------------------------------------------------------------------------------
    def write_bytes(self, data: bytes) -> int:
        obstore.put(self.store, self.key, data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def create_exclusive(self, data: bytes) -> bool:
        """Write only if no object has this key (a conditional PUT); False when one exists."""
        try:
            obstore.put(self.store, self.key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        """Folders are key prefixes: nothing to create."""

    def touch(self, exist_ok: bool = True) -> None:
        if not self.is_file():
            self.write_bytes(b"")

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(str(self))
        obstore.delete(self.store, self.key)

    def rmdir(self) -> None:
        """Folders vanish with their last key."""

    def rename(self, target: ObjectPath | str) -> ObjectPath:
        """Copy then delete (no atomic rename in object stores); refuses an existing target (checked first:
        S3 has no conditional copy without extra configuration)."""
        target = target if isinstance(target, ObjectPath) else ObjectPath(str(target))
        if target.is_file():
            raise FileExistsError(str(target))
        return self.replace(target)

    def replace(self, target: ObjectPath | str) -> ObjectPath:
        target = target if isinstance(target, ObjectPath) else ObjectPath(str(target))
        if (target.scheme, target.bucket) != (self.scheme, self.bucket):
            raise OSError(f"cannot move {self} across buckets to {target}")
        try:
            obstore.copy(self.store, self.key, target.key, overwrite=True)
        except NotFoundError:
            raise FileNotFoundError(str(self)) from None
        obstore.delete(self.store, self.key)
        return target


def _stat_of(meta: Any) -> ObjectStat:
    modified = meta["last_modified"]
    return ObjectStat(int(meta["size"]), int(modified.timestamp() * 1_000_000) * 1000, meta.get("e_tag"))


class _PutOnClose(io.BytesIO):
    """A write buffer that becomes one PUT when closed (an object store write is all or nothing)."""

    def __init__(self, path: ObjectPath) -> None:
        super().__init__()
        self._path = path
        self._done = False

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is not None:
            self._done = True  # a failed write leaves nothing behind
        self.close()

    def close(self) -> None:
        if not self._done and not self.closed:
            self._done = True
            self._path.write_bytes(self.getvalue())
        super().close()
