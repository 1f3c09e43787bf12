"""The log is the engine's one backend seam: SQL, SQLite and PostgreSQL live under ``steplog/log/``.

Read as a reviewer would, with a tool: every module of ``steplog`` outside ``log/`` is parsed and
its code (docstrings and comments are prose, not read) must hold no SQL statement in a string, no
import of a database driver or of the PostgreSQL backend's modules, and no name that asks which
database a log is on (``isinstance(db, PgUrl)``, ``is_postgres``, ``conn.dialect``, ``sqlstate``).
A caller asks the log package for what it wants done; the log's backend (``log/backend.py``,
chosen once from the location) knows how on SQLite and how on PostgreSQL.

The exceptions are listed in ``ALLOWED`` with the reason beside each, and are as narrow as the
reason: one function where one function is the exception.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine" / "steplog"

ALLOWED: dict[tuple[str, str], str] = {
    # The outbox is a separate service that ships with steplog: its deliveries live in a SQLite
    # file of its own, never in the log (CONTRACT: "apart from the engine's log").
    ("outbox/store.py", "*"): "the outbox service's own database",
    # ``run.merge`` upserts a row into the *user's* database in the workdir: an effect target,
    # like a file or an HTTP endpoint, not the log.
    ("runtime/effects.py", "merge"): "the user's merge-target database (an effect target)",
    ("runtime/effects.py", "target_storage_problem"): "the merge target's words for a full disk",
    # The verdict compares the workdir's databases (merge targets) with the reference run's.
    ("verdict/outputs.py", "_tables_of"): "the user's workdir databases (effect targets)",
    # The naive agent shows what an agent *without* steplog does: sqlite3 by hand, on purpose.
    ("agents/naive.py", "*"): "the deliberately naive agent",
    # The command line's help and messages name what ``--db`` accepts.
    ("cli/commands.py", "<text>"): "help text naming postgresql:// URLs",
    ("cli/run_options.py", "<text>"): "the --db help, naming postgresql:// URLs",
}
"""(module under ``steplog/``, function or ``*``) -> why it may hold SQL or name a driver.
``<text>``: string literals only (help text), never code."""

_SQL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+(?:OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b|\b(?:CREATE|ALTER|DROP)\s+(?:TABLE|INDEX|TRIGGER|VIEW)\b|\bPRAGMA\s+\w"
    r"|^\s*(?:BEGIN|COMMIT|ROLLBACK)\b|\bWHERE\s+\w+\s*(?:=|<|>|IN\b|IS\b)|\b\w+\s*=\s*\?"
)
"""SQL as a statement or a fragment of one (upper-case keywords: prose does not shout)."""

_DRIVERS = ("sqlite3", "psycopg", "psycopg2", "psycopg_pool", "sqlalchemy", "sqlmodel")
_BACKEND_MODULES = re.compile(r"^steplog\.log\.(pg|pgschema|pglisten|jsonsql|schema)\b")
"""The PostgreSQL backend's modules and the schema: the log's inside, reached only from the log."""
_DIALECT_NAME = re.compile(
    r"postgres|psycopg|sqlite3|dialect|sqlstate|^Pg[A-Z]|^pg_|^is_url$|^SCHEMES$|^for_update$",
    re.I,
)
"""Names that ask which database a log is on, or reach for one's own words."""


@dataclass(frozen=True)
class Finding:
    module: str
    line: int
    scope: str
    what: str

    def __str__(self) -> str:
        return f"steplog/{self.module}:{self.line} ({self.scope}): {self.what}"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (of a module, class or function), or
    the attribute docstrings the code base writes under a constant or field."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                out.add(id(stmt.value))
    return out


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's literal parts joined around ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
            for v in node.values
        )
    return None


def _scoped(tree: ast.Module) -> Iterator[tuple[ast.AST, str]]:
    """Every node with the name of the outermost function or class it is in (``<module>``)."""
    for top in tree.body:
        scope = (
            top.name
            if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            else "<module>"
        )
        for node in ast.walk(top):
            yield node, scope


def findings(path: Path) -> Iterator[Finding]:
    return findings_in(path.read_text(), path.relative_to(ENGINE).as_posix())


def findings_in(source: str, module: str) -> Iterator[Finding]:
    """What in ``source`` (module ``module`` under ``steplog/``) knows SQL or a database."""
    tree = ast.parse(source, module)
    docs = _docstrings(tree)
    inner: set[int] = set()  # literal parts of an f-string, read once as part of the whole
    for node, scope in _scoped(tree):
        if isinstance(node, ast.JoinedStr):
            inner.update(id(v) for v in node.values)
        text = None if id(node) in docs or id(node) in inner else _text(node)
        if text is not None:
            if _SQL.search(text):
                yield Finding(module, node.lineno, scope, f"SQL text {text[:60]!r}")
            if re.search(r"postgres(?:ql)?://", text, re.I):
                yield Finding(module, node.lineno, scope, f"a PostgreSQL URL {text[:60]!r}")
            elif re.fullmatch(r"\w+", text) and _DIALECT_NAME.search(text):
                yield Finding(module, node.lineno, scope, f"dialect name {text!r} (getattr)")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _DRIVERS or _BACKEND_MODULES.match(alias.name):
                    yield Finding(module, node.lineno, scope, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if name.split(".")[0] in _DRIVERS or _BACKEND_MODULES.match(name):
                yield Finding(module, node.lineno, scope, f"from {name} import ...")
            for alias in node.names:
                backend_module = name == "steplog.log" and alias.name in (
                    "pg",
                    "pgschema",
                    "pglisten",
                )
                if backend_module or _DIALECT_NAME.search(alias.name):
                    yield Finding(module, node.lineno, scope, f"imports {alias.name}")
        elif isinstance(node, ast.Name) and _DIALECT_NAME.search(node.id):
            yield Finding(module, node.lineno, scope, f"dialect name {node.id}")
        elif isinstance(node, ast.Attribute) and _DIALECT_NAME.search(node.attr):
            yield Finding(module, node.lineno, scope, f"dialect attribute .{node.attr}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _DIALECT_NAME.search(
            node.name
        ):
            yield Finding(module, node.lineno, scope, f"dialect function {node.name}")


def _allowed(f: Finding) -> bool:
    if (f.module, "*") in ALLOWED or (f.module, f.scope) in ALLOWED:
        return True
    text_only = (f.module, "<text>") in ALLOWED
    return text_only and f.what.startswith("a PostgreSQL URL")


def outside_the_log() -> list[Finding]:
    found: list[Finding] = []
    for path in sorted(ENGINE.rglob("*.py")):
        if path.is_relative_to(ENGINE / "log"):
            continue
        found += [f for f in findings(path) if not _allowed(f)]
    return found


def test_sql_drivers_and_dialect_checks_live_only_in_the_log_package() -> None:
    found = outside_the_log()
    assert found == [], "\n".join(map(str, found))


def test_every_exception_still_names_something_that_exists() -> None:
    """A stale allowance would let the next file in: each one names a module and a function
    that are there, and that still need it."""
    for (module, scope), why in ALLOWED.items():
        path = ENGINE / module
        assert path.exists(), (module, why)
        if scope in ("*", "<text>"):
            continue
        assert any(f.scope == scope for f in findings(path)), (module, scope, why)


def test_the_scan_sees_what_it_is_meant_to_refuse() -> None:
    """The detector itself: each kind of leak in a module is reported."""
    source = (
        "import sqlite3\n"
        "from steplog.log.location import PgUrl\n"
        "def f(conn, db):\n"
        "    if isinstance(db, PgUrl) or db.startswith('postgresql://'):\n"
        "        pass\n"
        "    if getattr(conn, 'dialect', '') == 'x':\n"
        "        pass\n"
        "    return conn.execute('SELECT id FROM run WHERE id = ?', (1,))\n"
    )
    whats = [f.what for f in findings_in(source, "control/probe.py")]
    assert "import sqlite3" in whats
    assert "imports PgUrl" in whats
    assert "dialect name PgUrl" in whats
    assert "dialect name 'dialect' (getattr)" in whats
    assert any(w.startswith("a PostgreSQL URL") for w in whats)
    assert any(w.startswith("SQL text") for w in whats)
    docstring_only = '"""Reads SELECT x FROM run WHERE id = ? on sqlite3."""\n'
    assert list(findings_in(docstring_only, "control/probe.py")) == []


# -- one owner per idea ------------------------------------------------------------------------


def _literals(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        text = None if id(node) in docs else _text(node)
        if text is not None:
            yield node.lineno, text


def test_one_function_appends_an_event_and_every_writer_calls_it() -> None:
    """``journal.append_event`` is the only code that writes an ``event`` row: the engine's
    journal, claims, run control, the queue and prune all call it."""
    writes = [
        f"{path.relative_to(ENGINE).as_posix()}:{line}"
        for path in sorted(ENGINE.rglob("*.py"))
        for line, text in _literals(path)
        if re.search(r"\bINSERT\s+INTO\s+\"?event\b", text)
    ]
    assert len(writes) == 1 and writes[0].startswith("log/journal.py:"), writes


def test_a_step_row_is_defined_once_and_every_reader_agrees_with_the_schema() -> None:
    import dataclasses
    import sqlite3

    from steplog.log.reader import StepDetail
    from steplog.log.schema import MIGRATIONS, split_statements
    from steplog.log.steps import STEP_COLUMNS, StepRecord
    from steplog.log.tables import StepRow

    conn = sqlite3.connect(":memory:")
    for migration in MIGRATIONS:
        for statement in split_statements(migration):
            conn.execute(statement)
    schema = tuple(r[1] for r in conn.execute("PRAGMA table_info(step)"))
    assert STEP_COLUMNS == schema
    assert tuple(f.name for f in dataclasses.fields(StepRecord)) == schema
    assert tuple(f.name for f in dataclasses.fields(StepDetail)) == (*schema, "effects")
    assert tuple(c.name for c in StepRow.__table__.columns) == schema  # type: ignore[attr-defined]


def test_the_backend_is_chosen_by_the_location_and_carried_by_the_connection(
    tmp_path: Path,
) -> None:
    """A file is SQLite's, a ``postgresql://`` URL PostgreSQL's (no server needed to choose), and
    a connection or an error answers for its own log."""
    import sqlite3

    from steplog.log.backend import Backend, backend_for, backend_of
    from steplog.log.location import parse
    from steplog.log.pg import POSTGRES, PgError
    from steplog.log.sqlite import SQLITE

    assert backend_for(parse(str(tmp_path / "steplog.db"))) is SQLITE
    assert backend_for(parse("postgresql://me@localhost:5432/steplog")) is POSTGRES
    conn = sqlite3.connect(":memory:")
    assert backend_of(conn) is SQLITE
    assert backend_of(sqlite3.OperationalError("database is locked")) is SQLITE
    assert backend_of(PgError("server closed the connection")) is POSTGRES
    members = {m for m in dir(Backend) if not m.startswith("_")} | set(Backend.__annotations__)
    for backend in (SQLITE, POSTGRES):
        assert {m for m in members if not hasattr(backend, m)} == set(), type(backend).__name__


def test_whether_a_holder_is_alive_is_the_leases_answer(tmp_path: Path) -> None:
    """``status --json``'s ``engine`` and a takeover ask one module (``lease``): a live process
    here, a dead one, another host's (only its lease speaks for it), or nobody."""
    import os
    import subprocess
    import sys

    from steplog.log.lease import holder_seen, me

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert holder_seen(os.getpid(), me().host) == "live"
    assert holder_seen(dead.pid, me().host) == "gone"
    assert holder_seen(os.getpid(), "another-host.example") == "remote"
    assert holder_seen(None, None) == "none"
