"""Shared fixtures: every test owns a fresh log, and real engines run as real processes."""

from __future__ import annotations

import os

# Qt must never try to open a display in the test run (it aborts the whole process without one).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steplog.killtest.procs import kill_group as _kill_group

TESTS = Path(__file__).parent
AGENTS = TESTS / "engine" / "agents_for_tests.py"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """The session's PostgreSQL server (tests/postgres_server.py): skips, with how to get one,
    where none answers and none can be started; fails instead under CI."""
    from postgres_server import NoServer, Server

    try:
        server = Server()
    except (NoServer, ImportError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL tests cannot run under CI: {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def postgres_session_db(postgres_server: Any) -> Any:
    """One fresh database for the whole session (tests in it use run ids of their own)."""
    from steplog.log.location import PgUrl

    return PgUrl(postgres_server.create())


@pytest.fixture
def postgres_db(postgres_server: Any) -> Any:
    """A fresh, empty PostgreSQL database of this test's own, as a ``PgUrl``."""
    from steplog.log.location import PgUrl

    return PgUrl(postgres_server.create())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``@pytest.mark.backends("sqlite", "postgres")`` on a test (or ``pytestmark`` of a module)
    runs it once per log backend: its ``db`` fixture is then a file or a PostgreSQL URL."""
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None and "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", marker.args, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Any:
    """A fresh log of this test's own (not created yet): a file path, or with the ``postgres``
    backend an empty database's URL."""
    if backend == "postgres":
        return request.getfixturevalue("postgres_db")
    return tmp_path / "data" / "steplog.db"


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
        if not self.db.exists():
            return 0
        try:
            sql = "SELECT count(*) FROM event WHERE kind = ?" + (
                " AND seq = ?" if seq is not None else ""
            )
            return int(self.query(sql, kind, *([seq] if seq is not None else []))[0][0])
        except sqlite3.DatabaseError:
            return 0  # the engine is creating the schema right now

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if isinstance(self.db, str):  # a PostgreSQL log (steplog.log.location.PgUrl)
            return query_log(self.db, sql, *args)
        conn = sqlite3.connect(f"{self.db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()


def query_log(db: Any, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (``?`` placeholders) on a log file or a PostgreSQL log, as tuples."""
    if isinstance(db, str):
        from steplog.log.pg import connect

        pconn = connect(db)
        try:
            return [tuple(r) for r in pconn.execute(sql, args).fetchall()]
        finally:
            pconn.close()
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def log_bytes(db: Any) -> bytes:
    """The log's whole content, to prove that a refused command wrote nothing: a file's bytes,
    or for a PostgreSQL log every row of every table, in a fixed order."""
    if not isinstance(db, str):
        return Path(db).read_bytes()
    from steplog.log.pg import connect, tables

    conn = connect(db)
    try:
        out = []
        for table in sorted(tables(conn)):
            rows = conn.execute(f'SELECT * FROM "{table}"').fetchall()
            out.append(repr((table, sorted(map(repr, rows)))))
        return "\n".join(out).encode()
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


@pytest.fixture
def engine(db: Any, tmp_path: Path) -> Iterator[Engine]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLOG_")}
    if isinstance(
        db, str
    ):  # PostgreSQL: default workdirs go "beside" it, in the user data directory
        env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TESTS.parent / "engine"), str(TESTS.parent / "gui"), env.get("PYTHONPATH", "")]
    )
    yield Engine(db=db, env=env)
