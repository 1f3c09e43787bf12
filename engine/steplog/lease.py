"""Who holds a run, and whether that holder is gone.

A holder on this host and boot whose process is dead (or whose pid now belongs to another
process) is gone *now*: a relaunch after a kill takes over at once. Any other holder is only
gone when its lease has expired, because we cannot see its process.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import psutil

DEFAULT_LEASE_SECONDS = 15.0
MAX_LEASE_SECONDS = 86_400.0
"""A day: a longer lease only keeps a run from being taken over after its remote engine died."""


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
        return f"boot@{psutil.boot_time():.0f}"


def _proc_start(pid: int) -> float | None:
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


@cache
def me() -> Holder:
    pid = os.getpid()
    return Holder(pid=pid, host=socket.gethostname(), boot=boot_id(), proc_start=_proc_start(pid) or 0.0)


def vacancy(
    *,
    pid: int | None,
    host: str | None,
    boot: str | None,
    proc_start: float | None,
    expires: float | None,
    now: float,
) -> str | None:
    """Why the lease can be taken (a short reason for the log), or ``None`` while it is held."""
    if pid is None:
        return "free"
    if host == me().host and boot == me().boot:
        start = _proc_start(pid)
        if start is None:
            return f"holder pid {pid} is dead"
        if proc_start is not None and abs(start - proc_start) > 0.5:
            return f"holder pid {pid} was reused by another process"
    if expires is not None and expires <= now:
        return f"holder pid {pid} on {host} let its lease expire"
    return None
