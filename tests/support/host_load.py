"""How busy the host is with work that is not a test's own: Linux's /proc/stat (every CPU's busy and stolen
time) less the CPU time of the test's process and of the embedded servers' processes.

A real-server test that claims "no alert on a quiet host" reads this to tell a noisy neighbour (another
process, or a hypervisor stealing time) from a false alert of the radar: the radar sees neither (it has
no host-speed probe, docs/limitations.md)."""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from jobs.local.embedded import SERVICE_USER
from tests.support.procs import PROC, cpu_of

TICK = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds at one moment: all CPUs' busy and stolen time, and the part of it that is the
    test's own (its process with its waited-for children, the servers' processes with theirs)."""

    at: datetime
    monotonic: float
    busy: float
    own: float


def _host_busy_seconds() -> float:
    """user + nice + system + irq + softirq + steal of every CPU (idle and iowait left out)."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) * TICK


def _service_uid() -> int | None:
    try:
        return pwd.getpwnam(SERVICE_USER).pw_uid
    except KeyError:
        return None


def cpu_reading() -> CpuReading:
    """The host's busy CPU seconds and the test's own share of them, now: this process and every
    ``postgres`` process of this user or the servers' service user (a backend that ended is in its
    postmaster's children's time). Short-lived processes of other kinds count as foreign."""
    owners = {os.getuid(), _service_uid()}
    ticks = (cpu_of(os.getpid()) or (0, "", 0.0))[2]
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (found := cpu_of(int(entry.name))) is not None:
            uid, command, process_ticks = found
            if uid in owners and command == "postgres":
                ticks += process_ticks
    return CpuReading(datetime.now(UTC), time.monotonic(), _host_busy_seconds(), ticks * TICK)


def foreign_cores(first: CpuReading, last: CpuReading) -> float:
    """CPUs' worth of time, on average between two readings, that went to neither the test nor its servers
    (other processes, and time the hypervisor stole)."""
    seconds = last.monotonic - first.monotonic
    if seconds <= 0:
        return 0.0
    return max(0.0, ((last.busy - first.busy) - (last.own - first.own)) / seconds)
