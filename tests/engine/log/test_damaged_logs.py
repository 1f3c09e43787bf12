"""A damaged log (a page overwritten with garbage) is never written to: every command that meets
the damage exits 2 with one line that says so, and ``steplog check`` says what is wrong.

The damage is real: a log made by real runs, then one page of one table (found from
``sqlite_master.rootpage`` and the b-tree's own child pointers) overwritten with seeded garbage.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.engine import Engine, checkout_env
from helpers.paths import AGENTS
from steplog.log.schema import SCHEMA_VERSION

RUNS = ("a", "b", "c")
STEPS_PER_RUN = 60


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real log with three finished runs, checkpointed so that every page is in the main file."""
    path = tmp_path_factory.mktemp("healthy") / "steplog.db"
    env = checkout_env()
    for rid in RUNS:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "steplog",
                "run",
                f"{AGENTS}:noop",
                "--run-id",
                rid,
                "--param",
                f"n={STEPS_PER_RUN}",
                "--db",
                str(path),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _leaves(data: bytes, page: int, page_size: int) -> list[int]:
    """The leaf pages of the b-tree rooted at ``page`` (SQLite file format, section 1.6): a
    table's, or a ``WITHOUT ROWID`` table's (an index b-tree; its interior cells start with the
    child page number too)."""
    start = (page - 1) * page_size
    header = start + (100 if page == 1 else 0)
    kind = data[header]
    if kind in (0x0D, 0x0A):
        return [page]
    assert kind in (0x05, 0x02), f"page {page} is not a b-tree page"
    cells = int.from_bytes(data[header + 3 : header + 5], "big")
    children = []
    for i in range(cells):
        offset = int.from_bytes(data[header + 12 + 2 * i : header + 14 + 2 * i], "big")
        children.append(int.from_bytes(data[start + offset : start + offset + 4], "big"))
    children.append(int.from_bytes(data[header + 8 : header + 12], "big"))
    return [leaf for child in children for leaf in _leaves(data, child, page_size)]


def damage(path: Path, table: str, where: str) -> int:
    """Overwrite the root page (``where="root"``) or the last leaf page of ``table`` with
    garbage."""
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True
    )  # leaves no -wal
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    page = root if where == "root" else _leaves(bytes(data), root, page_size)[-1]
    assert where == "root" or page != root, f"{table} has a single page; make the log bigger"
    garbage = random.Random(page).randbytes(page_size)
    data[(page - 1) * page_size : page * page_size] = garbage
    path.write_bytes(bytes(data))
    return page


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steplog: "), stderr
    return lines[0]


DAMAGES = [
    ("run", "root"),
    ("event", "root"),
    ("step", "root"),
    ("step", "leaf"),
    ("event", "leaf"),
    ("effect", "root"),
]
WRITERS = {
    "run-new": ["run", f"{AGENTS}:noop", "--run-id", "new", "--param", "n=5"],
    "run-finished": ["run", f"{AGENTS}:noop", "--run-id", "a", "--param", f"n={STEPS_PER_RUN}"],
}
READERS = {
    "status": ["status", "a"],
    "status-json": ["status", "a", "--json"],
    "runs": ["runs"],
    "runs-json": ["runs", "--json"],
    "verdict": ["verdict", "a", "--json"],
    "export": ["export", "a"],
    "export-file": ["export", "a", "-o", "{tmp}/a.jsonl.gz"],
    "check": ["check"],
}


@pytest.mark.parametrize("command", [*WRITERS, *READERS])
@pytest.mark.parametrize(("table", "where"), DAMAGES)
def test_a_damaged_log_is_refused_in_one_line_and_never_written(
    engine: Engine, healthy: Path, tmp_path: Path, table: str, where: str, command: str
) -> None:
    """Every command that reads the log refuses it when a page it depends on is damaged: exit 2,
    one line on stderr, nothing on stdout, the file byte for byte as it was and no -wal written.

    ``run`` reads every page it would write before writing any. The readers read what they show
    (``status``, ``verdict`` and ``export``: the run's row, steps and effects in full and the
    tail of its events; ``runs``: the whole run table) and, all of them, the path to the newest
    row of every table: a damaged page there is where the next write of any engine lands, so a
    listing that read "ok" would be a lie about the log. (``check`` reads every page.)"""
    path = tmp_path / "steplog.db"
    shutil.copy(healthy, path)
    damage(path, table, where)
    before = sha(path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in {**WRITERS, **READERS}[command]]

    done = engine.run(*args, "--db", str(path))

    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert f"{path} is damaged" in line, line
    if command != "check":  # check lists every problem on stdout, and is itself the way to see them
        assert "steplog check --db" in line and done.stdout == "", done.stdout
    assert sha(path) == before
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "nothing was written to the -wal either"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steplog.db"], "no archive, -wal or -shm"


@pytest.mark.parametrize("command", list(READERS))
def test_the_readers_read_a_healthy_log_without_writing_to_it(
    engine: Engine, healthy: Path, tmp_path: Path, command: str
) -> None:
    """The same commands on the same log undamaged: exit 0, and still not a byte written."""
    path = tmp_path / "steplog.db"
    shutil.copy(healthy, path)
    before = sha(path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in READERS[command]]

    done = engine.run(*args, "--db", str(path))

    assert done.returncode == 0, done.stdout + done.stderr
    assert sha(path) == before
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def test_check_says_ok_with_what_the_log_holds(engine: Engine, healthy: Path) -> None:
    before = sha(healthy)
    done = engine.run("check", "--db", str(healthy))
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == f"ok: {len(RUNS)} runs, {len(RUNS) * STEPS_PER_RUN} steps, schema v{SCHEMA_VERSION}"
    )
    assert sha(healthy) == before
    assert not Path(f"{healthy}-wal").exists() and not Path(f"{healthy}-shm").exists()


@pytest.mark.parametrize(("table", "where"), DAMAGES)
def test_check_says_what_is_wrong_with_a_damaged_log(
    engine: Engine, healthy: Path, tmp_path: Path, table: str, where: str
) -> None:
    """Exit 2, one line on stderr naming the damaged table; every problem found on stdout; the
    file read without a byte written and without -wal or -shm files. (SQLite aborts a whole
    ``integrity_check`` at a page it cannot read at all, so tables are then checked one by one.)"""
    path = tmp_path / "steplog.db"
    shutil.copy(healthy, path)
    damage(path, table, where)
    before = sha(path)

    done = engine.run("check", "--db", str(path))

    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert f"{path} is damaged" in line, line
    assert f"table {table}" in line and f"table {table}" in done.stdout, (
        "the damaged table is named"
    )
    assert sha(path) == before
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


@pytest.mark.parametrize("content", ["missing", "garbage", "foreign"])
def test_check_of_something_that_is_not_a_log(engine: Engine, tmp_path: Path, content: str) -> None:
    path = tmp_path / "x.db"
    if content == "garbage":
        path.write_bytes(b"not a database at all" * 50)
    elif content == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        conn.commit()
        conn.close()
    done = engine.run("check", "--db", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert {
        "missing": "does not exist",
        "garbage": "not a SQLite database",
        "foreign": "not a steplog log",
    }[content] in line
    assert content == "missing" or not Path(f"{path}-wal").exists()
