"""Files that other people put where the radar reads (a deploy inbox, a server's log folder): opened only
as what they claim to be, a regular file of that folder.

Why: the radar may run with more rights than whoever dropped the file. A symbolic link would point it at a
secret (a ``.pgpass``, its own ``/proc/self/environ``, a config file) whose first line a parse error then
quotes into a rejection reason, a log and a JSON row; a FIFO blocks the open forever; a device never ends.
The open itself refuses a link (``O_NOFOLLOW``) and never waits (``O_NONBLOCK``); what was opened is
checked (``fstat``), so a file swapped between the listing and the open is judged as what it is then."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO


class ForeignFileRefused(Exception):
    """Not read: the name is a link, or not a regular file. The message says which, never the content."""


_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _open_no_follow(path: Path) -> int:
    if not hasattr(os, "O_NOFOLLOW") and path.is_symlink():  # no O_NOFOLLOW (Windows): check first
        raise ForeignFileRefused("a symbolic link, not followed")
    try:
        return os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW on a link (EMLINK: FreeBSD)
            raise ForeignFileRefused("a symbolic link, not followed") from None
        raise


def open_foreign_file(path: Path, links_within: Path | None = None) -> BinaryIO:
    """``path`` opened for reading when it is a regular file; else ForeignFileRefused (a link, a FIFO, a
    device, a folder). ``links_within``: a link whose target resolves inside this folder is followed (a
    log folder's "current" link to one of its own files); any other link is refused."""
    try:
        fd = _open_no_follow(path)
    except ForeignFileRefused:
        if links_within is None:
            raise
        target = path.resolve()
        if not target.is_relative_to(links_within.resolve()):
            raise ForeignFileRefused("a symbolic link to a file outside its folder, not followed") from None
        fd = _open_no_follow(target)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ForeignFileRefused(f"{kind_of(info.st_mode)}, not a regular file: not read")
    return os.fdopen(fd, "rb")
