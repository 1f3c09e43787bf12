"""The monitor knows no database: which one holds the log, and the SQL that reads it, are the
log's business (``steplog.log``). The monitor asks the log's read API and is told.

Every module of ``steplog_gui`` is read as Python (``ast`` for imports, names and every string,
docstrings and f-strings included; ``tokenize`` for comments) and must not

- import a database driver or a dialect's own module of the log (``sqlite3``, ``psycopg``,
  ``steplog.log.pg``, ``pglisten``, ``pgschema``, ``jsonsql``);
- name a dialect (``postgres``, ``sqlite``, ``psycopg``, ``PgUrl``) in a name, a string or a
  comment: a label that must say "PostgreSQL" gets the word from the log;
- hold SQL text (``SELECT … FROM``, ``PRAGMA``, ``LISTEN``, ``INSERT INTO`` …).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import steplog_gui

PACKAGE = Path(steplog_gui.__file__).parent

DIALECT_MODULES = re.compile(
    r"^(sqlite3|psycopg\w*|steplog\.log\.(pg|pglisten|pgschema|jsonsql|sqlite|postgres))(\.|$)"
)
DIALECT_WORDS = re.compile(r"postgres|sqlite|psycopg|pg_?url|pg_?watch|pg_?listen", re.I)
SQL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b"
    r"|\bINSERT\s+INTO\b|\bDELETE\s+FROM\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bCREATE\s+(TABLE|INDEX|TRIGGER|VIEW)\b|\bBEGIN\s+IMMEDIATE\b"
    r"|\bPRAGMA\b|\bLISTEN\b|\bNOTIFY\b|\bVACUUM\b"
    r"|\bselect\b[^.]*\bfrom\s+(run|event|step|effect)\b"
)


def offences(source: str) -> list[str]:
    """Where ``source`` (one module's text) knows the database: one line per finding."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            modules = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            modules = []
        found += [f"{line}: imports {m}" for m in modules if DIALECT_MODULES.match(m)]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text: str | None = node.value
        elif isinstance(node, ast.JoinedStr):  # an f-string, its fields as "{}"
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        else:
            text = None
        for pattern, what in ((DIALECT_WORDS, "names a dialect"), (SQL, "holds SQL")):
            if text is not None and (hit := pattern.search(text)):
                found.append(f"{line}: a string {what}: {hit.group(0)!r}")
        names = _names(node)
        found += [
            f"{line}: the name {n!r} names a dialect" for n in names if DIALECT_WORDS.search(n)
        ]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            for pattern, what in ((DIALECT_WORDS, "names a dialect"), (SQL, "holds SQL")):
                if hit := pattern.search(token.string):
                    found.append(f"{token.start[0]}: a comment {what}: {hit.group(0)!r}")
    return found


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.asname or node.name.rsplit(".", 1)[-1]]
    return []


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_scan_reads_the_whole_monitor() -> None:
    rooms = {p.parent.name for p in MODULES}
    assert {"model", "feeds", "processes", "views", "timeline", "compare"} <= rooms
    assert len(MODULES) > 30


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_of_the_monitor_knows_the_database(path: Path) -> None:
    found = offences(path.read_text(encoding="utf-8"))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import sqlite3\n",
        "from psycopg import sql\n",
        "from steplog.log.pglisten import Listener\n",
        "from steplog.log import jsonsql\n",
        "from steplog.log.location import PgUrl\n",
        "if isinstance(path, PgUrl):\n    pass\n",
        "on = repo.on_postgres\n",
        'label = "following the log live (LISTEN steplog_event)"\n',
        'rows = q("SELECT status FROM run WHERE id = ?")\n',
        'rows = q(f"select {c} from event where id > {n}")\n',
        '"""Polls PRAGMA data_version."""\n',
        "x = 1  # a log on PostgreSQL serves a fleet\n",
        'FILTER = "logs (*.db *.sqlite3)"\n',
    ],
)
def test_the_scan_finds_a_database_where_one_is_named(source: str) -> None:
    """The scan itself: each of these would let the database back into the monitor."""
    assert offences(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import pyqtgraph as pg\npg.setConfigOptions(antialias=False)\n",
        'tip = "select that run to kill it"\n',
        "from steplog.log.reader import LogRepository\n",
        '"""Reads the events since a bookmark through the log\'s read API."""\n',
    ],
)
def test_the_scan_leaves_ordinary_words_alone(source: str) -> None:
    assert offences(source) == []
