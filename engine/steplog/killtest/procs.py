"""Real engines as real process groups, and a read-only eye on their log.

Each run of the kill test lives in a ``Sandbox`` of its own (log, workdir, outbox file, engine
output). Engines are started and killed by ``steplog.control.procs`` (a new session each, so a kill
takes the engine and anything it started, and nothing else).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from steplog.control.procs import child_env, kill_group, python_argv, spawn
from steplog.log.db import LogConnection, LogFailure, open_follower
from steplog.log.location import LogLocation
from steplog.log.logread import Event, EventTail
from steplog.runtime import crashpoints

__all__ = ["Event", "Exited", "LogWatch", "Sandbox", "kill_group"]

POLL_SECONDS = 0.002
"""How often the log is looked at while waiting for a kill moment (a demo step takes ~7 ms)."""


@dataclass
class Exited:
    code: int
    stderr: str


@dataclass
class Sandbox:
    """One run's own folder: ``steplog.db``, ``work/``, ``outbox.db`` and each engine's output."""

    root: Path
    agent: str
    run_id: str
    params: dict[str, str]
    outbox_url: str = ""
    launches: int = field(default=0)
    log: LogLocation | None = None
    """A log shared by every run of the kill test (each under its own run id: a database server
    the command line was given); ``None``: a SQLite file of this sandbox's own."""

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def db(self) -> LogLocation:
        return self.log if self.log is not None else self.root / "steplog.db"

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    @property
    def outbox_db(self) -> Path:
        return self.root / "outbox.db"

    def argv(self) -> list[str]:
        params = [a for k, v in self.params.items() for a in ("--param", f"{k}={v}")]
        return python_argv(
            "steplog",
            "run",
            self.agent,
            "--run-id",
            self.run_id,
            "--db",
            str(self.db),
            "--workdir",
            str(self.workdir),
            "--outbox",
            self.outbox_url,
            "--pace",
            "0",
            *params,
        )

    def launch(
        self, crash_at: str | None = None, killed_at: float | None = None
    ) -> subprocess.Popen[bytes]:
        """Start an engine on this run (a new one or a resume) in its own process group;
        ``killed_at``: when the previous engine was killed (recorded with its takeover)."""
        env = child_env(drop=[crashpoints.ENV])
        if crash_at:
            env[crashpoints.ENV] = crash_at
        self.launches += 1
        out = self.root / f"engine-{self.launches}"
        with open(f"{out}.stdout", "wb") as stdout, open(f"{out}.stderr", "wb") as stderr:
            argv = self.argv() + (["--killed-at", repr(killed_at)] if killed_at is not None else [])
            return spawn(argv, stdout=stdout, stderr=stderr, env=env)

    def stderr_of(self, launch: int | None = None) -> str:
        path = self.root / f"engine-{launch or self.launches}.stderr"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait(self, proc: subprocess.Popen[bytes], timeout: float) -> Exited:
        """Wait for the engine to exit; past ``timeout`` kill its group and say so."""
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"the engine ({' '.join(self.argv()[3:5])}) did not finish within {timeout:.0f} s; "
                f"its output is in {self.root}"
            ) from None
        finally:
            if proc.poll() is None:  # timed out or interrupted: leave no engine behind
                kill_group(proc)
        return Exited(code, self.stderr_of())


class LogWatch:
    """New ``event`` rows of a log, read-only, holding no transaction between polls.

    The log may not exist yet (the first engine is still starting): ``poll`` then returns nothing.
    """

    def __init__(self, db: LogLocation, run_id: str) -> None:
        self.db = db
        self.run_id = run_id
        self._tail = EventTail(run_id=run_id)
        self.max_seq = 0
        """The furthest step any engine has reached so far."""
        self._conn: LogConnection | None = None

    def poll(self) -> list[Event]:
        if self._conn is None:
            self._conn = open_follower(self.db)  # None: the first engine is still starting
        if self._conn is None:
            return []
        try:
            events = self._tail.read(self._conn)  # steplog.log.logread: the one reader of the log
        except LogFailure:  # not initialised yet: look again next time, with a fresh connection
            self.close()
            return []
        self.max_seq = max([self.max_seq, *(e.seq for e in events if e.seq is not None)])
        return events

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
