"""Who holds a run, and whether that holder is gone.

A holder on this host and boot whose process is dead (or whose pid now belongs to another
process) is gone *now*: a relaunch after a kill takes over at once. Any other holder is only
gone when its lease has expired, because we cannot see its process.

A lease's expiry is written twice: in wall-clock time (``lease_expires``, which every host can
read) and in this boot's clock (``lease_expires_boot``, seconds since boot, ``boot_clock``). On
the holder's own host and boot the second decides: a wall clock stepped back (NTP, a person) would
otherwise stretch the lease of a holder that stopped answering (SIGSTOP, a hung process) by the
size of the jump. Other hosts can only use the wall clock.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

DEFAULT_LEASE_SECONDS = 15.0
MAX_LEASE_SECONDS = 86_400.0
"""A day: a longer lease only keeps a run from being taken over after its remote engine died."""


LEASE_COLUMNS = (
    "lease_pid, lease_host, lease_boot, lease_proc_start, lease_expires, lease_expires_boot"
)
"""A run row's lease, in the order ``lease_vacancy`` reads it."""
LEASE_FIELDS = tuple(c.strip() for c in LEASE_COLUMNS.split(","))


def boot_clock() -> float:
    """Seconds since this machine booted, the same in every process and blind to wall-clock
    steps: Linux's CLOCK_BOOTTIME (suspend included); elsewhere the monotonic clock, which
    macOS and Windows also count from boot for every process."""
    if sys.platform == "linux":
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    boot: str
    proc_start: float


BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


@cache
def boot_id(source: Path = BOOT_ID_FILE) -> str:
    """Identifies this boot of this machine, so a pid from before a reboot is never trusted:
    Linux's boot id, else (macOS, Windows) the boot time as psutil reads it."""
    try:
        return source.read_text().strip()
    except OSError:
        import psutil

        return f"boot@{psutil.boot_time():.0f}"


_PROC = Path("/proc/self/stat")


@cache
def _linux_boot_time() -> float:
    for line in Path("/proc/stat").read_bytes().splitlines():
        if line.startswith(b"btime"):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def _proc_start_linux(pid: int) -> float | None:
    """``psutil.Process(pid).create_time()`` computed as psutil does it on Linux (start time in
    clock ticks since boot, plus the boot time), without importing psutil: a relaunched engine
    asks this once for itself and once for the dead holder, and psutil's import cost ~6 ms of
    the kill -> first step time."""
    if sys.platform != "win32":  # always so where /proc exists; says so to mypy's Windows check
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return None
        fields = stat[stat.rindex(b")") + 2 :].split()  # the command name may hold spaces and ')'
        if fields[0] == b"Z":
            return None  # killed and not yet reaped by its parent: dead for our purpose
        return int(fields[19]) / os.sysconf("SC_CLK_TCK") + _linux_boot_time()
    raise OSError("no /proc on Windows")


def _proc_start(pid: int) -> float | None:
    if sys.platform != "win32" and _PROC.exists():
        try:
            return _proc_start_linux(pid)
        except (OSError, ValueError, IndexError):
            pass  # an unusual /proc: ask psutil
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None  # killed and not yet reaped by its parent: dead for our purpose
        return float(proc.create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def process_alive(pid: int) -> bool:
    """Is ``pid`` a live process on this machine (a zombie awaiting its parent counts as dead)?"""
    return _proc_start(pid) is not None


def holder_seen(pid: int | None, host: str | None) -> Literal["none", "live", "gone", "remote"]:
    """The engine holding a run's lease, as ``steplog status`` shows it: "none" (nobody holds
    it), "live" or "gone" (its process on this host is alive, or died: run the same command to
    resume), or "remote" (another host's, which only its lease speaks for: ``vacancy``)."""
    if pid is None:
        return "none"
    if host != _hostname():
        return "remote"
    return "live" if process_alive(pid) else "gone"


@cache
def me() -> Holder:
    pid = os.getpid()
    return Holder(pid=pid, host=_hostname(), boot=boot_id(), proc_start=_proc_start(pid) or 0.0)


def _hostname() -> str:
    if sys.platform != "win32":
        return os.uname().nodename  # what socket.gethostname() returns on POSIX, without the import
    import socket

    return socket.gethostname()


def vacancy(
    *,
    pid: int | None,
    host: str | None,
    boot: str | None,
    proc_start: float | None,
    expires: float | None,
    now: float,
    expires_boot: float | None = None,
) -> str | None:
    """Why the lease can be taken (a short reason for the log), or ``None`` while it is held.
    ``expires_boot``: the expiry in the holder's ``boot_clock``, which decides on its own boot."""
    if pid is None:
        return "free"
    if host == me().host and boot == me().boot:
        start = _proc_start(pid)
        if start is None:
            return f"holder pid {pid} is dead"
        if proc_start is not None and abs(start - proc_start) > 0.5:
            return f"holder pid {pid} was reused by another process"
        if expires_boot is not None:
            return (
                f"holder pid {pid} let its lease expire" if expires_boot <= boot_clock() else None
            )
    if expires is not None and expires <= now:
        return f"holder pid {pid} on {host} let its lease expire"
    return None


def lease_vacancy(lease: Sequence[Any], now: float) -> str | None:
    """``vacancy`` of a row's ``LEASE_COLUMNS`` (a tuple, or a row read by position)."""
    pid, host, boot, proc_start, expires, expires_boot = (lease[i] for i in range(6))
    return vacancy(
        pid=pid,
        host=host,
        boot=boot,
        proc_start=proc_start,
        expires=expires,
        now=now,
        expires_boot=expires_boot,
    )


def row_vacancy(row: Any, now: float) -> str | None:
    """``vacancy`` of a run row read with its lease columns by name (``sqlite3.Row`` and alike)."""
    return lease_vacancy([row[c] for c in LEASE_FIELDS], now)
