"""Shared fixtures: every test owns a fresh log, and real engines run as real processes.

Fixtures only: what a test imports comes from the ``helpers`` package (``tests/helpers``)."""

from __future__ import annotations

import os

# Qt must never try to open a display in the test run (it aborts the whole process without one).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.openai_server import FakeOpenAI
from helpers.paths import ROOT


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """The session's PostgreSQL server (``helpers.postgres_server``): skips, with how to get one,
    where none answers and none can be started; fails instead under CI."""
    from helpers.postgres_server import NoServer, Server

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


@pytest.fixture
def engine(db: Any, tmp_path: Path) -> Iterator[Engine]:
    """``steplog`` commands on this test's log, run as real processes with this checkout's code
    and none of the developer's ``STEPLOG_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLOG_")}
    if isinstance(db, str):  # PostgreSQL: default workdirs go "beside" it, in the user data dir
        env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "engine"), str(ROOT / "gui"), env.get("PYTHONPATH", "")]
    )
    yield Engine(db=db, env=env)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running fake OpenAI-compatible server (``helpers.openai_server``), closed after the
    test."""
    with FakeOpenAI() as fake:
        yield fake
