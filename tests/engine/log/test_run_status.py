"""A run's status is one enum, ``steplog.RunStatus``: its members are the strings the log stores
and the JSON prints, the schema allows exactly those, and the code names them, not bare strings."""

from __future__ import annotations

import ast
import json
import re
import sqlite3

import pytest

import steplog
from helpers.engine import Engine
from helpers.paths import AGENTS, ROOT
from steplog.errors import Cancelled, GaveUp, RunFailed, RunStopped
from steplog.log.pgschema import PG_OVERRIDES, create_statements
from steplog.log.runstatus import ACTIVE, TERMINAL, RunStatus

STORED = ("queued", "running", "waiting", "succeeded", "gave_up", "failed", "cancelled")
"""The values the log has always stored (CONTRACT: ``status --json``); never to change."""
NOOP = f"{AGENTS}:noop"


def test_the_members_are_the_stored_strings_and_print_as_them() -> None:
    assert steplog.RunStatus is RunStatus and "RunStatus" in steplog.__all__
    assert [m.value for m in RunStatus] == list(STORED)
    for member in RunStatus:
        assert member == member.value and isinstance(member, str)
        assert str(member) == f"{member}" == f"{member:>0}" == member.value
        assert json.dumps({"status": member}) == json.dumps({"status": member.value})
        assert member.__doc__, f"{member.name} says what it means"
    assert RunStatus("gave_up") is RunStatus.GAVE_UP
    assert TERMINAL | ACTIVE == set(RunStatus) and not TERMINAL & ACTIVE
    assert TERMINAL == {"succeeded", "gave_up", "failed", "cancelled"}


def test_the_exceptions_for_a_stopped_run_carry_its_status() -> None:
    # steplog.errors sits below the log (the layers contract), so it names them as strings.
    assert RunStopped.status == RunFailed.status == RunStatus.FAILED
    assert GaveUp.status == RunStatus.GAVE_UP
    assert Cancelled.status == RunStatus.CANCELLED


def _check_list(table_sql: str) -> list[str]:
    found = re.search(r"CHECK\s*\(\s*status\s+IN\s*\(([^)]*)\)\s*\)", table_sql)
    assert found, table_sql
    return re.findall(r"'([^']*)'", found.group(1))


def test_the_run_tables_check_constraint_lists_exactly_the_members(engine: Engine) -> None:
    done = engine.run("submit", NOOP, "--run-id", "q", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(engine.db)
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'run'").fetchone()
        assert _check_list(sql) == list(RunStatus)
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE run SET status = 'gave up' WHERE id = 'q'")
    finally:
        conn.close()
    pg = create_statements()
    (pg_run,) = [x for x in pg if re.match(r'CREATE TABLE "?run"?\s', x)]
    assert _check_list(pg_run) == list(RunStatus)
    (pg_upgrade,) = [x for x in PG_OVERRIDES[1] if "run_status_check CHECK" in x]
    assert _check_list(pg_upgrade) == list(RunStatus)
    # Only a finished run may be pruned: the trigger's list is TERMINAL, in both dialects.
    (pg_trigger,) = [x for x in pg if "pruned_only_finished_runs_check()" in x and "NOT IN" in x]
    listed = re.search(r"NOT IN \(([^)]*)\)", pg_trigger)
    assert listed and set(re.findall(r"'([^']*)'", listed.group(1))) == TERMINAL


def test_status_and_runs_json_print_the_plain_strings(engine: Engine) -> None:
    db = str(engine.db)
    assert engine.run("run", NOOP, "--run-id", "ok", "--param", "n=2", "--db", db).returncode == 0
    short = engine.run("run", NOOP, "--run-id", "short", "--max-steps", "1", "--db", db)
    assert short.returncode == 3, short.stderr
    for rid in ("queued", "gone"):
        assert engine.run("submit", NOOP, "--run-id", rid, "--db", db).returncode == 0
    assert engine.run("cancel", "gone", "--db", db).returncode == 0
    expected = {"ok": "succeeded", "short": "gave_up", "queued": "queued", "gone": "cancelled"}

    for rid, status in expected.items():
        out = engine.run("status", rid, "--db", db, "--json").stdout
        assert re.search(rf'"status": ?"{status}"', out), out
        assert json.loads(out)["status"] == status
    out = engine.run("runs", "--db", db, "--json").stdout
    assert "RunStatus" not in out
    assert {r["run_id"]: r["status"] for r in json.loads(out)} == expected
    # The terminal record written from a member holds the same plain string.
    (data,) = engine.query("SELECT data FROM event WHERE run_id = 'gone' AND kind = 'run_finished'")
    assert '"status":"cancelled"' in data[0]


# -- no bare run statuses in the code --------------------------------------------------------

ENUM_MODULE = ROOT / "engine" / "steplog" / "log" / "runstatus.py"
MAX_BARE = 28
"""Literals spelled like a run status that remain outside ``runstatus.py``, and why:
4 the ``status`` of the exceptions in ``errors.py`` (below the log; checked above); 6 words for a
person that happen to be spelled so (exit meanings, the worker's "failed"); 13 other vocabularies
sharing a word: a step's status (``step`` table; a stream entry's cut test reads it too), a kill's
step state, a verdict phase, the event
kind ``waiting``, a timeline bar's outcome; 5 JSON keys (an event's ``"queued": true``, a kill-test
report's ``"failed"`` count). Lower it when one goes; never raise it for a run's status."""
MAX_IN_SQL = 18
"""SQL text naming statuses in quotes (CHECK constraints, triggers, ``UPDATE ... SET status =``);
the step table's CHECK is in two migrations (v1, and v6's rebuild ``WITHOUT ROWID``)."""


def _literals() -> tuple[list[str], list[str]]:
    pattern = re.compile("'(" + "|".join(STORED) + ")'")
    bare: list[str] = []
    in_sql: list[str] = []
    for folder in (ROOT / "engine" / "steplog", ROOT / "gui" / "steplog_gui"):
        for path in sorted(folder.rglob("*.py")):
            if path == ENUM_MODULE:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(
                    node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                )
                and node.body
                and isinstance(node.body[0], ast.Expr)
            }
            for node in ast.walk(tree):
                if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                    continue
                if id(node) in docstrings:
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}"
                if node.value in STORED:
                    bare.append(where)
                elif pattern.search(node.value):
                    in_sql.append(where)
    return bare, in_sql


def test_run_statuses_are_named_by_the_enum_not_spelled_out() -> None:
    bare, in_sql = _literals()
    assert len(bare) <= MAX_BARE, "use steplog.RunStatus instead of:\n" + "\n".join(bare)
    assert len(in_sql) <= MAX_IN_SQL, "\n".join(in_sql)
