"""The lake's settings, its errors and its locks (a file lock on a folder, a conditional object on a
store)."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from jobs.errors import describe_os_error, os_error_advice
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath, create_exclusive, lake_path

LOCKS = "_locks"
COMPACTION_LOCK = "compaction"

log = logging.getLogger("jobs.lake.locks")


@dataclass(frozen=True)
class LakeConfig:
    """Thresholds of the lake's writers and locks."""

    stale_temp_after_s: float = 3600.0
    """A ``.tmp-*.partial`` file older than this is a crashed writer's leftover and is removed by whoever
    finds it (every write sweeps its folder, compaction the lake); a younger one may be a live writer's."""
    lock_wait_s: float = 10.0
    """How long a run waits for a lake lock (samples, compaction) before failing with LakeLockError."""
    object_lock_lease_s: float = 300.0
    """On an object-store lake, a lock is an object created with a conditional PUT and renewed every third of
    this; a lock not renewed for this long belongs to a run that died and is taken over."""
    analysis_retention_days: int = 30
    """Analysis rows (performance_regressions, resource_regressions, instance_slowdowns, plan_diffs,
    analysis_runs) of runs more than this many days old are deleted by compaction (``jobs.lake.compaction``),
    whole date partitions at a time; 0 keeps them forever. They are derived: a full detection run (or a
    samples rebuild and a full run) makes them again from the samples that are still there."""


class LakeError(RuntimeError):
    """A lake file could not be written or read; the message names the file."""


class LakeLockError(LakeError):
    """Another run holds a lake lock; the message names the lock, the holder's pid and since when."""


KEPT_ON_FAILED_WRITE = "every file already in the lake, whole (this one was not written; no temp file left)"
"""What a refused write keeps: every lake write goes to a temp name and is renamed into place (one PUT on a
bucket), so the failed file keeps its earlier version, or stays absent."""


class LakeStorageError(LakeError, OSError):
    """The operating system refused a lake write (disk full, over quota, read-only, not permitted, I/O
    error): one line naming the path, the OS's reason and what is kept, for its own exit code. A traceback
    or "internal error" told an operator nothing about whether collected data survived; it always does.
    Still an OSError: code that kept going past a refused write (the deploy inbox leaves the file for the
    next run) still does."""

    def __init__(self, path: object, cause: OSError, kept: str = KEPT_ON_FAILED_WRITE) -> None:
        self.path, self.cause, self.kept = path, cause, kept
        super().__init__(
            f"{describe_os_error(cause)}: cannot write {path}; kept: {kept}; {os_error_advice(cause)}"
        )

    def keeping(self, more: str) -> LakeStorageError:
        """The same error with what the caller's job kept (committed instances, an uncommitted run)."""
        return LakeStorageError(self.path, self.cause, f"{self.kept}; {more}")


# ---------------------------------------------------------------------------------------------------------
# Locks


def _lock_holder(path: LakePath) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    where = f" on {holder['host']}" if holder.get("host") else ""
    return f"pid {holder.get('pid', 'unknown')}{where}, since {holder.get('since', 'unknown')}"


def object_lock_holder(path: ObjectPath) -> dict[str, object] | None:
    """The lease object's content and whether its lease ran out; None when no lock object exists."""
    try:
        body = json.loads(path.read_text() or "{}")
    except FileNotFoundError:
        return None
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    try:
        expires = float(body.get("expires_at_epoch", 0.0))
    except (TypeError, ValueError):
        expires = 0.0  # not a lease this code wrote: treated as run out
    return {**body, "expired": time.time() > expires}


@contextmanager
def exclusive_lock(root: LakePath, name: str, config: LakeConfig | None = None) -> Iterator[LakePath]:
    """Hold ``<root>/_locks/<name>.lock`` for the block; wait at most ``config.lock_wait_s``.

    Raises LakeLockError "another run holds the <name> lock (pid …, since …)" when the wait runs out. On a
    local lake the lock is the kernel's (flock): a run that dies releases it, and a lock file left behind
    means nothing. On an object store it is a lease object (see ``_object_lock``).
    """
    config = config or LakeConfig()
    root = lake_path(root)
    if isinstance(root, ObjectPath):
        with _object_lock(root, name, config) as held:
            yield held
        return
    folder = Path(root) / LOCKS
    path = folder / f"{name}.lock"
    nothing_written = "every file already in the lake (the run stopped before writing under this lock)"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LakeStorageError(path, exc, nothing_written) from exc
    deadline = time.monotonic() + max(0.0, config.lock_wait_s)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LakeLockError(
                        f"another run holds the {name} lock ({_lock_holder(path)}; lock file {path}); "
                        f"waited {config.lock_wait_s:g} s: try again when it has finished"
                    ) from None
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        holder = json.dumps({"pid": os.getpid(), "since": datetime.now(UTC).isoformat(timespec="seconds")})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
        except OSError as exc:
            fcntl.flock(fd, fcntl.LOCK_UN)
            raise LakeStorageError(path, exc, nothing_written) from exc
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _object_lock(root: ObjectPath, name: str, config: LakeConfig) -> Iterator[ObjectPath]:
    """A lock in an object store: ``_locks/<name>.lock`` created with a conditional PUT (exactly one
    creator wins), holding a token and a lease renewed by a thread every third of
    ``object_lock_lease_s``; deleted on release. A lease that ran out (its run died) is deleted and taken
    over; the winner re-reads the object to confirm its token, so two takers never both hold it."""
    path = root / LOCKS / f"{name}.lock"
    token = uuid.uuid4().hex
    since = datetime.now(UTC).isoformat(timespec="seconds")
    lease = max(1.0, config.object_lock_lease_s)

    def body() -> bytes:
        return json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": since,
                "token": token,
                "expires_at_epoch": time.time() + lease,
            }
        ).encode()

    def ours() -> bool:
        holder = object_lock_holder(path)
        return holder is not None and holder.get("token") == token

    deadline = time.monotonic() + max(0.0, config.lock_wait_s)
    while True:
        try:
            if create_exclusive(path, body()) and ours():
                break
            holder = object_lock_holder(path)
            if holder is not None and holder["expired"]:
                log.warning(
                    f"taking over the {name} lock of a run whose lease ran out ({_lock_holder(path)})"
                )
                path.unlink(missing_ok=True)
                continue
        except Exception as exc:
            if isinstance(exc, LakeError):
                raise
            raise LakeError(f"cannot take the {name} lock {path}: {type(exc).__name__}: {exc}") from exc
        if time.monotonic() >= deadline:
            raise LakeLockError(
                f"another run holds the {name} lock ({_lock_holder(path)}; lock object {path}); "
                f"waited {config.lock_wait_s:g} s: try again when it has finished"
            )
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease / 3):
            try:
                if ours():
                    path.write_bytes(body())
            except Exception as exc:  # a missed renewal is retried; the lease still has two thirds left
                log.warning(f"could not renew the {name} lock {path}: {type(exc).__name__}")

    renewer = threading.Thread(target=renew, name=f"lake-lock-{name}", daemon=True)
    renewer.start()
    try:
        yield path
    finally:
        stop.set()
        renewer.join()
        try:
            if ours():
                path.unlink(missing_ok=True)
        except Exception as exc:
            log.warning(
                f"could not release the {name} lock {path} ({type(exc).__name__}); its lease runs out"
            )
