"""``steplog`` commands run as real processes, the way the monitor and the kill test run them."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.logs import query_log
from helpers.paths import ROOT
from steplog.killtest.procs import kill_group as _kill_group


def checkout_env(**extra: str) -> dict[str, str]:
    """The environment of an engine process: this one's, less the developer's ``STEPLOG_*``
    settings, with this checkout's code first on ``PYTHONPATH`` (without it a child imports
    whatever ``steplog`` is installed, which may be another checkout's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLOG_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "engine"), str(ROOT / "gui"), env.get("PYTHONPATH", "")]
    )
    return {**env, **extra}


@dataclass
class Engine:
    """A ``steplog`` command run as its own process group, like the monitor and killtest do."""

    db: Path
    env: dict[str, str]

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "steplog", *args]

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**self.env, **(env or {})},
            start_new_session=True,
        )

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            start_new_session=True,
        )

    def status(self, run_id: str) -> dict[str, Any]:
        done = self.run("status", run_id, "--db", str(self.db), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def events(self, kind: str, seq: int | None = None) -> int:
        """How many events of ``kind`` (for step ``seq``) the log holds; 0 before it exists."""
        if isinstance(self.db, Path) and not self.db.exists():
            return 0
        try:
            sql = "SELECT count(*) FROM event WHERE kind = ?" + (
                " AND seq = ?" if seq is not None else ""
            )
            return int(self.query(sql, kind, *([seq] if seq is not None else []))[0][0])
        except sqlite3.DatabaseError:
            return 0  # the engine is creating the schema right now

    def committed(self, run_id: str) -> int:
        """How many of the run's steps are committed; 0 while the engine creates the log."""
        try:
            return int(
                self.query(
                    "SELECT count(*) FROM step WHERE run_id = ? AND status = 'committed'", run_id
                )[0][0]
            )
        except Exception:  # the engine is creating the log right now
            return 0

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if isinstance(self.db, str):  # a PostgreSQL log (steplog.log.location.PgUrl)
            return query_log(self.db, sql, *args)
        conn = sqlite3.connect(f"{self.db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()


def kill_group(proc: subprocess.Popen[str]) -> float:
    """SIGKILL the whole process group without warning (the product's own kill); returns the
    time of the kill once the group is dead."""
    at = _kill_group(proc)  # type: ignore[arg-type]
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
    return at


@dataclass
class Storm:
    kills: int
    kill_times: list[float]
    exit_code: int


def storm(
    engine: Engine,
    args: list[str],
    rng: random.Random,
    max_kills: int,
    low: float = 0.0,
    high: float = 0.6,
) -> Storm:
    """Run ``steplog ARGS`` until it ends by itself, SIGKILLing its process group at random
    moments (up to ``max_kills`` times) and relaunching it after each kill."""
    times: list[float] = []
    while True:
        proc = engine.start(*args)
        try:
            code = proc.wait(timeout=rng.uniform(low, high) if len(times) < max_kills else 600)
        except subprocess.TimeoutExpired:
            times.append(kill_group(proc))
            continue
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
        return Storm(kills=len(times), kill_times=times, exit_code=code)
