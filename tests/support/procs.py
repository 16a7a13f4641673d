"""The process table as Linux's /proc shows it: for the tests and benchmarks that look at the processes a
run leaves or starts."""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def stat_of(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process (state "Z": ended, not yet reaped), None when it is gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def cpu_of(pid: int) -> tuple[int, str, float] | None:
    """(owner uid, command name, utime + stime + cutime + cstime in clock ticks) of a process: its CPU
    time with that of the children it waited for; None when it is gone."""
    stat = PROC / str(pid) / "stat"
    try:
        uid = stat.parent.stat().st_uid
        head, tail = stat.read_text().rsplit(")", 1)
    except (OSError, ValueError):
        return None
    return uid, head.split("(", 1)[-1], float(sum(int(v) for v in tail.split()[11:15]))


def process_stats() -> dict[int, tuple[str, int]]:
    """(state, parent pid) of every process."""
    stats = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := stat_of(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    return stats


def alive(pid: int) -> bool:
    """Running (or stopped), not ended."""
    stat = stat_of(pid)
    return stat is not None and stat[0] != "Z"
