"""Errors of bad input that several layers raise (a fleet file, a config file, a duration), and how an OS
error on storage is told; the CLI maps each to its exit code."""

from __future__ import annotations

import errno


class ConfigError(ValueError):
    """The fleet file is unusable; the message names the file and the instance."""


# OS errors that say the storage refused a write: full, over quota, read-only, not permitted, failing.
STORAGE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
)
_PLAIN_NAMES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for the file system",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "I/O error",
}
_WHAT_TO_DO = {
    errno.ENOSPC: "free space, then run again",
    errno.EDQUOT: "free space or raise the quota, then run again",
    errno.EROFS: "make the lake writable, then run again",
    errno.EACCES: "give this user write access, then run again",
    errno.EPERM: "give this user write access, then run again",
}


def describe_os_error(exc: OSError) -> str:
    """``disk full (ENOSPC: No space left on device)``: what a user acts on first, the OS's words after."""
    code = errno.errorcode.get(exc.errno or 0, "")
    words = exc.strerror or str(exc)
    plain = _PLAIN_NAMES.get(exc.errno or 0)
    detail = f"{code}: {words}" if code else words
    return f"{plain} ({detail})" if plain else detail


def os_error_advice(exc: OSError) -> str:
    """What to do about ``exc`` before running again."""
    return _WHAT_TO_DO.get(exc.errno or 0, "fix it, then run again")
