"""A real PostgreSQL server for the tests, never a mock.

``STEPLOG_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``) names a
server and a database the tests may connect to and ``CREATE DATABASE`` from. Where nothing
answers there, a throwaway server is started from the installed binaries (``initdb`` and
``pg_ctl`` on PATH or in ``/usr/lib/postgresql/*/bin``): a temp folder, a Unix socket only, trust
authentication, stopped at the end of the session. Where there are no binaries either, the
PostgreSQL tests skip and say how to get a server, except under CI (``CI`` set), where they fail:
``.ci/run`` installs and starts one, so CI never skips them.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
HOW = (
    "no PostgreSQL server answers at $STEPLOG_TEST_POSTGRES ({url}) and no server binaries "
    "(initdb, pg_ctl) are installed to start one: `apt-get install postgresql` (or set "
    "STEPLOG_TEST_POSTGRES to a server where this user may CREATE DATABASE)"
)


class NoServer(Exception):
    pass


def answers(url: str) -> str | None:
    """``None`` if a server answers at ``url``, else why not."""
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=3).close()
        return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _binaries() -> tuple[str, str] | None:
    for folder in [None, *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]:
        initdb = shutil.which("initdb", path=folder) if folder else shutil.which("initdb")
        pg_ctl = shutil.which("pg_ctl", path=folder) if folder else shutil.which("pg_ctl")
        if initdb and pg_ctl:
            return initdb, pg_ctl
    return None


class Throwaway:
    """A server of our own: ``initdb`` + ``pg_ctl`` in a temp folder, on a Unix socket (``tcp``:
    on a free TCP port of 127.0.0.1 too, the way a remote server is reached). A test that stops or
    restarts a server does it to one of these, never to the shared one."""

    def __init__(self, *, tcp: bool = False) -> None:
        self.tcp = tcp
        found = _binaries()
        if found is None:
            raise NoServer("no initdb/pg_ctl")
        self.initdb, self.pg_ctl = found
        self.root = Path(tempfile.mkdtemp(prefix="steplog-pg-"))
        self.user: str | None = None
        if os.geteuid() == 0:  # initdb refuses to run as root: run the server as its own user
            try:
                self.user = pwd.getpwnam("postgres").pw_name
            except KeyError:
                raise NoServer(
                    "running as root and there is no 'postgres' user to run a server as"
                ) from None
            shutil.chown(self.root, self.user)
            self.root.chmod(0o700)
        self.data = self.root / "data"
        self.port = _free_port()

    def _run(self, *argv: str) -> None:
        cmd = list(argv)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise NoServer(
                f"{' '.join(argv[:2])} failed: {(done.stderr or done.stdout).strip()[-400:]}"
            )

    def start(self) -> str:
        self._run(
            self.initdb,
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        self.up()
        if self.tcp:
            return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        host = quote(str(self.root), safe="")
        return f"postgresql://postgres@/postgres?host={host}&port={self.port}"

    def up(self) -> None:
        """Start the server (again, after ``down``); returns once it answers."""
        listen = "127.0.0.1" if self.tcp else ""
        opts = f"-k {self.root} -c listen_addresses='{listen}' -p {self.port} -c fsync=on"
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def down(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: the server ends every session and stops (``up`` again)."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: every session is ended (``fast``: at once, open
        transactions rolled back), then the server starts again with the same options; returns
        once it answers."""
        # -l again: without it the new server would write to (and hold open) pg_ctl's stdout pipe.
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-m",
            mode,
            "-l",
            str(self.root / "log"),
            "-w",
            "restart",
        )

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop")
        except NoServer:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


class Server:
    """The session's server: ``create()`` makes a fresh database and returns its URL."""

    def __init__(self) -> None:
        self.admin = os.environ.get("STEPLOG_TEST_POSTGRES", DEFAULT)
        self.throwaway: Throwaway | None = None
        self.made: list[str] = []
        why = answers(self.admin)
        if why is not None:
            try:
                self.throwaway = Throwaway()
                self.admin = self.throwaway.start()
            except NoServer as exc:
                raise NoServer(HOW.format(url=self.admin) + f" [{why}; {exc}]") from None
        self.prefix = f"steplog_test_{os.getpid()}_{secrets.token_hex(2)}"

    def create(self) -> str:
        import psycopg

        name = f"{self.prefix}_{len(self.made)}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        self.made.append(name)
        return with_database(self.admin, name)

    def close(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.admin, autocommit=True) as conn:
                for name in self.made:
                    for _ in range(3):
                        try:
                            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                            break
                        except psycopg.Error:
                            time.sleep(0.5)
        finally:
            if self.throwaway is not None:
                self.throwaway.stop()
