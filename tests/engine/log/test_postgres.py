"""The log on PostgreSQL: the same schema, semantics and guarantees as a SQLite file.

Most engine tests run on both logs (``@pytest.mark.backends``: kills, leases and fencing,
budgets, run control, effects). These are the PostgreSQL-only ones: the schema made from the one
definition, the append-only trigger, foreign and newer databases refused untouched, the URL's
password never shown, the same JSON as on SQLite, ``killtest demo --db postgresql://…``, and a
log made by an older steplog (schemas 1-4) brought to the current one with its runs going on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.logs import log_bytes, query_log
from helpers.paths import AGENTS
from steplog.log.location import PgUrl, parse, redact_url

pytestmark = pytest.mark.backends("postgres")


def admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def test_the_schema_is_made_from_the_one_definition_and_matches_the_sqlmodel_tables(
    db: PgUrl,
) -> None:
    from steplog.log.db import open_log
    from steplog.log.pgschema import META_TABLE, PG_ONLY, create_statements
    from steplog.log.schema import SCHEMA_VERSION
    from steplog.log.tables import (
        EffectRow,
        EventRow,
        MessageRow,
        RunEventRow,
        RunRow,
        SignalRow,
        StepRow,
    )

    assert any("steplog_refuse" in s for s in create_statements())
    open_log(db).close()
    for model in (RunRow, StepRow, EffectRow, EventRow, SignalRow, MessageRow, RunEventRow):
        table = model.__table__  # type: ignore[attr-defined]
        actual = [
            r[0]
            for r in query_log(
                db,
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
                " AND table_schema = current_schema() ORDER BY ordinal_position",
                table.name,
            )
        ]
        assert [c.name for c in table.columns] == actual, table.name
    assert dict(query_log(db, f"SELECT key, value FROM {META_TABLE}")) == {
        "application": "steplog",
        "schema_version": str(SCHEMA_VERSION),
        "pg_only": str(len(PG_ONLY)),
    }
    # 64-bit integers and doubles, as SQLite stores them
    types = dict(
        query_log(
            db,
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
            "'run'",
        )
    )
    assert types["used_tokens"] == "bigint" and types["used_seconds"] == "double precision"


def test_the_event_table_is_append_only(db: PgUrl) -> None:
    from steplog.log.db import open_log

    conn = open_log(db)
    try:
        conn.execute(
            "INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES ('r', 1, 1, 'x', '{}')"
        )
        for statement in ("UPDATE event SET kind = 'y'", "DELETE FROM event", "TRUNCATE event"):
            import sqlite3

            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(statement)
        assert conn.execute("SELECT kind FROM event").fetchall() == [("x",)]
    finally:
        conn.close()


def test_a_run_then_status_runs_and_verdict_give_the_same_json_as_on_sqlite(
    engine: Engine, tmp_path: Path
) -> None:
    def shape(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__

    outputs = {}
    for name, log in (("postgres", str(engine.db)), ("sqlite", str(tmp_path / "s.db"))):
        done = engine.run(
            "run",
            f"{AGENTS}:noop",
            "--run-id",
            "n",
            "--db",
            log,
            "--max-steps",
            "1000",
            "--workdir",
            str(tmp_path / name),
        )
        assert done.returncode == 0, done.stderr
        status = json.loads(engine.run("status", "n", "--db", log, "--json").stdout)
        runs = json.loads(engine.run("runs", "--db", log, "--json").stdout)
        verdict = engine.run("verdict", "n", "--db", log, "--json")
        assert verdict.returncode == 0, verdict.stderr
        outputs[name] = (status, runs, json.loads(verdict.stdout))
    pg, lite = outputs["postgres"], outputs["sqlite"]
    assert shape(pg) == shape(lite)
    for key in (
        "status",
        "steps_committed",
        "step_executions",
        "incarnations",
        "budget",
        "params",
        "result",
    ):
        if key != "budget":
            assert pg[0][key] == lite[0][key], key
    assert pg[0]["budget"]["steps"] == lite[0]["budget"]["steps"]
    assert pg[2]["verdict"] == lite[2]["verdict"] == "UNTESTED"
    check = engine.run("check", "--db", str(engine.db))
    assert check.returncode == 0 and check.stdout.startswith("ok: 1 runs, "), (
        check.stdout + check.stderr
    )


def test_a_foreign_database_is_refused_with_exit_2_and_nothing_written(engine: Engine) -> None:
    with admin(engine.db) as conn:
        conn.execute("CREATE TABLE run (id TEXT PRIMARY KEY, note TEXT)")
        conn.execute("INSERT INTO run VALUES ('x', 'theirs')")
    before = log_bytes(engine.db)
    for args in (
        ["run", f"{AGENTS}:noop", "--run-id", "a"],
        ["status", "a"],
        ["runs"],
        ["check"],
        ["signal", "a", "go"],
        ["cancel", "a"],
    ):
        done = engine.run(*args, "--db", str(engine.db))
        assert done.returncode == 2, (args, done.stderr)
        assert "not a steplog log" in done.stderr and "left untouched" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert log_bytes(engine.db) == before


def test_a_log_of_a_newer_schema_is_refused_with_exit_2_and_nothing_written(engine: Engine) -> None:
    assert (
        engine.run("run", f"{AGENTS}:noop", "--run-id", "a", "--db", str(engine.db)).returncode == 0
    )
    with admin(engine.db) as conn:
        conn.execute("UPDATE steplog_meta SET value = '99' WHERE key = 'schema_version'")
    before = log_bytes(engine.db)
    for args in (["run", f"{AGENTS}:noop", "--run-id", "b"], ["status", "a"], ["runs"]):
        done = engine.run(*args, "--db", str(engine.db))
        assert done.returncode == 2 and "newer steplog (schema 99" in done.stderr, done.stderr
    assert log_bytes(engine.db) == before


def test_a_log_missing_a_table_is_refused(engine: Engine) -> None:
    assert (
        engine.run("run", f"{AGENTS}:noop", "--run-id", "a", "--db", str(engine.db)).returncode == 0
    )
    with admin(engine.db) as conn:
        conn.execute("DROP TABLE signal")
    done = engine.run("runs", "--db", str(engine.db))
    assert done.returncode == 2 and "without its table(s) signal" in done.stderr


def test_a_password_in_the_url_is_never_shown_nor_recorded(
    engine: Engine, postgres_server: Any
) -> None:
    """The server trusts local users, so any password is accepted and must still never appear."""
    secret = "s3cr3t-Pa55"
    url = PgUrl(str(engine.db).replace("postgres@", f"postgres:{secret}@", 1))
    if (
        "@" not in str(engine.db).split("//", 1)[1].split("/", 1)[0]
        or str(engine.db).count("@") != 1
    ):
        pytest.skip("the test server's URL has no user@host part to add a password to")
    assert secret not in f"{url}" and secret not in repr(url) and secret in str(url)
    assert redact_url(str(url)) == str(engine.db)
    done = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", "p", "--db", str(url), "--max-steps", "5"
    )
    assert done.returncode == 3, done.stderr
    outputs = [done.stdout + done.stderr]
    for args in (
        ["status", "p", "--json"],
        ["runs"],
        ["verdict", "p"],
        ["check"],
        ["status", "nope"],
    ):
        outputs.append(
            "".join(engine.run(*args, "--db", str(url)).__dict__[k] for k in ("stdout", "stderr"))
        )
    bad = str(url).replace(str(url).rsplit("/", 1)[1], "no_such_database")
    refused = engine.run("runs", "--db", bad)
    assert refused.returncode == 2 and "cannot connect" in refused.stderr
    outputs.append(refused.stderr)
    assert all(secret not in o for o in outputs), [o for o in outputs if secret in o]
    assert secret.encode() not in log_bytes(engine.db)


def test_bad_urls_and_unreachable_servers_are_one_line_errors(engine: Engine) -> None:
    cases = {
        "sqlite://x.db": "not supported",
        "postgresql://postgres@127.0.0.1:notaport/x": "port is not a number",
        "postgresql://postgres@127.0.0.1:5432": "names no database",
        "postgresql://postgres@127.0.0.1:1/steplog": "cannot connect",
    }
    for url, words in cases.items():
        done = engine.run("runs", "--db", url)
        assert done.returncode == 2 and words in done.stderr, (url, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert isinstance(parse("postgres://u@h/d"), PgUrl) and isinstance(parse("x.db"), Path)


def test_the_monitor_refuses_a_bad_url_or_an_unreachable_server_in_one_line(engine: Engine) -> None:
    cases = {
        "postgresql://postgres@127.0.0.1:1/steplog": "cannot connect",
        "postgresql://postgres@127.0.0.1:5432": "names no database",
    }
    for cmd in ("gui", "demo"):
        for url, words in cases.items():
            done = engine.run(cmd, "--db", url, timeout=30)
            assert done.returncode == 2 and words in done.stderr, (cmd, url, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _insert_event(conn: Any, commit: bool = True) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for _ in range(2):
        conn.execute(
            "INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES ('r', 1, 1, 'x', '{}')"
        )
    conn.execute("COMMIT" if commit else "ROLLBACK")


def test_a_commit_to_the_event_table_is_notified_with_its_newest_id_and_a_rollback_is_not(
    db: PgUrl,
) -> None:
    from steplog.log.db import open_log
    from steplog.log.pglisten import Listener

    conn = open_log(db)
    listener = Listener(db)
    try:
        listener.connect()
        _insert_event(conn, commit=False)
        assert listener.wait(0.3) is None
        _insert_event(conn)
        newest = conn.execute("SELECT max(id) FROM event").fetchone()[0]
        assert listener.wait(5) == newest
        assert (
            listener.wait(0.1) is None
        )  # one statement-level notification per insert, read at once
    finally:
        listener.close()
        conn.close()


def test_a_log_made_before_the_notify_trigger_gets_it_from_the_next_engine_that_opens_it(
    db: PgUrl,
) -> None:
    from steplog.log.db import open_log, open_readonly
    from steplog.log.pglisten import Listener
    from steplog.log.pgschema import META_TABLE, PG_ONLY

    conn = open_log(db)
    conn.execute("DROP TRIGGER event_notify ON event")
    conn.execute(f"DELETE FROM {META_TABLE} WHERE key = 'pg_only'")
    conn.close()
    open_readonly(db).close()  # a reader changes nothing
    assert not query_log(db, "SELECT 1 FROM pg_trigger WHERE tgname = 'event_notify'")
    conn = open_log(db)
    listener = Listener(db)
    try:
        assert dict(query_log(db, f"SELECT key, value FROM {META_TABLE}"))["pg_only"] == str(
            len(PG_ONLY)
        )
        listener.connect()
        _insert_event(conn)
        assert listener.wait(5) is not None
    finally:
        listener.close()
        conn.close()
    open_log(db).close()  # and once done, not again: one row, one trigger
    assert len(query_log(db, "SELECT 1 FROM pg_trigger WHERE tgname = 'event_notify'")) == 1


def test_two_engines_racing_to_create_the_schema_make_it_once(db: PgUrl) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from steplog.log.db import open_log

    with ThreadPoolExecutor(4) as pool:
        conns = list(pool.map(lambda _: open_log(db), range(4)))
    for c in conns:
        c.close()
    assert query_log(db, "SELECT value FROM steplog_meta WHERE key = 'schema_version'")


def test_sql_is_translated_outside_string_literals_only() -> None:
    from steplog.log.pg import translate

    assert (
        translate("SELECT ? WHERE a = '?' AND b LIKE 'x%'", True)
        == "SELECT %s WHERE a = '?' AND b LIKE 'x%%'"
    )
    assert (
        translate("INSERT OR IGNORE INTO t (a) VALUES (?) RETURNING a", True)
        == "INSERT INTO t (a) VALUES (%s) ON CONFLICT DO NOTHING RETURNING a"
    )
    assert translate("SELECT 1 % 2", False) == "SELECT 1 % 2"


@pytest.mark.slow
def test_killtest_demo_passes_on_postgres(engine: Engine) -> None:
    done = engine.run(
        "killtest",
        "demo",
        "--kills",
        "12",
        "--seed",
        "3",
        "--param",
        "tickets=6",
        "--json",
        "--db",
        str(engine.db),
        timeout=280,
    )
    report = json.loads(done.stdout)
    verdict = report["storm"]["verdict"]
    assert done.returncode == 0, json.dumps(verdict["checks"], indent=1) + done.stderr
    assert report["passed"] and report["storm"]["kills"] >= 8
    assert verdict["duplicates"] == verdict["missing"] == verdict["different"] == []
    assert set(verdict["redone_per_kill"]) <= {"0", "1"}
    again = engine.run(
        "killtest",
        "demo",
        "--kills",
        "2",
        "--param",
        "tickets=2",
        "--db",
        str(engine.db),
        timeout=200,
    )
    assert again.returncode == 0, (
        again.stdout[-2000:] + again.stderr
    )  # a second kill test in the same log
    ids = [r[0] for r in query_log(engine.db, "SELECT id FROM run ORDER BY id")]
    assert len(ids) == 4 and len({i.rsplit("-", 1)[0] for i in ids}) == 2


def test_history_reads_a_postgresql_log_as_typed_rows(engine: Engine) -> None:
    from steplog.log.history import History

    assert (
        engine.run(
            "run", f"{AGENTS}:noop", "--run-id", "h", "--param", "n=3", "--db", str(engine.db)
        ).returncode
        == 0
    )
    with History(str(engine.db)) as h:
        assert [r.id for r in h.runs()] == ["h"]
        assert [s.seq for s in h.steps("h")] == [1, 2, 3]
        assert h.events("h")[0].kind == "run_created"


# -- the upgrade path --------------------------------------------------------------------------


def _columns(db: PgUrl, table: str) -> list[str]:
    return [
        r[0]
        for r in query_log(
            db,
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
            " AND table_schema = current_schema() ORDER BY ordinal_position",
            table,
        )
    ]


def _shape(db: PgUrl) -> dict[str, Any]:
    """What a log's schema is: every column with its type and default, constraint, index, trigger
    and function."""
    return {
        "constraints": sorted(
            query_log(
                db,
                "SELECT r.relname, c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
                " JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace n"
                " ON n.oid = r.relnamespace WHERE n.nspname = current_schema()",
            )
        ),
        "columns": query_log(
            db,
            "SELECT table_name, column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = current_schema()"
            " ORDER BY table_name, ordinal_position",
        ),
        "indexes": sorted(
            query_log(
                db, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            )
        ),
        "triggers": sorted(
            query_log(
                db,
                "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t"
                " JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal",
            )
        ),
        "functions": sorted(
            query_log(
                db,
                "SELECT proname, prosrc FROM pg_proc p JOIN pg_namespace n"
                " ON n.oid = p.pronamespace WHERE n.nspname = current_schema()",
            )
        ),
    }


def _old_log(db: PgUrl, version: int, source: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Make ``db`` the log an older steplog (schema ``version``) would have left, holding the
    rows of the SQLite log ``source``: the DDL of ``MIGRATIONS[:version]`` translated as
    ``pgschema`` translates, the meta rows of that version, and each table's rows in the
    columns that version had (events inserted in order, their ids given by the identity column,
    as the old engine's inserts were). Schema 2 predates the PostgreSQL-only steps. The rows
    as written, by table."""
    import sqlite3

    from steplog.log.pgschema import create_statements, pg_only_statements

    pg_only = set(pg_only_statements(0))
    ddl = [s for s in create_statements(version) if version >= 4 or s not in pg_only]
    with admin(db) as conn:
        for statement in ddl:
            conn.execute(statement)
    lite = sqlite3.connect(source)
    written: dict[str, list[tuple[Any, ...]]] = {}
    try:
        with admin(db) as conn:
            for table, order in (
                ("run", "id"),
                ("step", "run_id, seq"),
                ("effect", "key"),
                ("event", "id"),
            ):
                names = [c for c in _columns(db, table) if c != "id" or table != "event"]
                rows = lite.execute(
                    f"SELECT {', '.join(names)} FROM {table} ORDER BY {order}"
                ).fetchall()
                marks = ", ".join("%s" for _ in names)
                for row in rows:
                    conn.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", row)
                written[table] = [tuple(r) for r in rows]
    finally:
        lite.close()
    return written


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_log_of_an_older_schema_is_upgraded_and_its_runs_go_on(
    engine: Engine, tmp_path: Path, version: int, postgres_server: Any
) -> None:
    """A log an older steplog made on PostgreSQL (schema 1: before run control, whose ``run``
    table SQLite rebuilds and PostgreSQL alters; 2: before pruning and the queue; 3: before the
    queue; 4: before the boot-clock lease), holding a run its engine died in after step 3 of 5, is
    brought to the current schema by the first engine that opens it for writing: the same
    tables, indexes, triggers and functions a new log has, the old rows as they were, the event
    table still append-only, the run resumed where it stopped, and new runs written and read."""
    import sqlite3

    from steplog.log.pgschema import META_TABLE, PG_ONLY
    from steplog.log.schema import SCHEMA_VERSION

    source = tmp_path / "old.db"
    died = engine.run(
        "run",
        f"{AGENTS}:noop",
        "--run-id",
        "old",
        "--param",
        "n=5",
        "--db",
        str(source),
        "--workdir",
        str(tmp_path / "w"),
        env={"STEPLOG_CRASH_AT": "after_step_record@3"},
    )
    assert died.returncode == 86, died.stderr
    written = _old_log(engine.db, version, source)
    old_step_columns = _columns(engine.db, "step")  # the step table as that version had it
    assert [len(written[t]) for t in ("run", "step")] == [1, 3] and written["event"]
    meta = dict(query_log(engine.db, f"SELECT key, value FROM {META_TABLE}"))
    assert meta["schema_version"] == str(version) and ("pg_only" in meta) == (version >= 4)
    assert bool(_columns(engine.db, "signal")) == (version >= 2)
    assert bool(_columns(engine.db, "pruned")) == (version >= 3)
    assert ("launch" in _columns(engine.db, "run")) == (version >= 4)
    assert "lease_expires_boot" not in _columns(engine.db, "run")

    # Reading it changes nothing and shows the run as it was left.
    before = log_bytes(engine.db)
    s = engine.status("old")
    assert (s["status"], s["steps_committed"], s["incarnations"]) == ("running", 3, 1), s
    assert log_bytes(engine.db) == before

    # The next engine upgrades the log and resumes the run from step 4.
    resumed = engine.run(
        "run",
        f"{AGENTS}:noop",
        "--run-id",
        "old",
        "--db",
        str(engine.db),
        "--workdir",
        str(tmp_path / "w"),
    )
    assert resumed.returncode == 0, resumed.stderr
    meta = dict(query_log(engine.db, f"SELECT key, value FROM {META_TABLE}"))
    assert (meta["schema_version"], meta["pg_only"]) == (str(SCHEMA_VERSION), str(len(PG_ONLY)))
    s = engine.status("old")
    # The engine died just after step 3's commit, and step 4 writes no start (a deferred start):
    # the log cannot tell that death from one inside step 4, and counts step 4 run twice.
    assert (s["status"], s["steps_committed"], s["step_executions"], s["incarnations"]) == (
        "succeeded",
        5,
        6,
        2,
    ), s
    step_cols = old_step_columns
    old_steps = query_log(
        engine.db, f"SELECT {', '.join(step_cols)} FROM step WHERE seq <= 3 ORDER BY seq"
    )
    assert old_steps == written["step"]
    event_cols = [c for c in _columns_of_sqlite(source, "event") if c != "id"]
    events = query_log(engine.db, f"SELECT {', '.join(event_cols)} FROM event ORDER BY id")
    assert events[: len(written["event"])] == written["event"]
    assert [
        k
        for (k,) in query_log(
            engine.db, "SELECT kind FROM event WHERE id > ? ORDER BY id", len(written["event"])
        )
    ][:1] == ["lease_acquired"]

    # The same schema as a log made new by this version, pruning's triggers and the notify trigger
    # included.
    fresh = PgUrl(postgres_server.create())
    assert (
        engine.run(
            "run", f"{AGENTS}:noop", "--run-id", "x", "--param", "n=1", "--db", fresh
        ).returncode
        == 0
    )
    assert _shape(engine.db) == _shape(fresh)

    # Still append-only, and a run leaves only by pruning (steplog.log.pg raises sqlite3's error
    # classes).
    from steplog.log.db import open_log

    log = open_log(engine.db)
    try:
        for statement in ("UPDATE event SET kind = 'x'", "DELETE FROM event", "TRUNCATE event"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                log.execute(statement)
        with pytest.raises(sqlite3.IntegrityError, match="only by steplog prune"):
            log.execute("DELETE FROM run WHERE id = 'old'")
        with pytest.raises(sqlite3.IntegrityError, match="only a finished run can be pruned"):
            log.execute(
                "INSERT INTO pruned (run_id, agent, status, created_at, pruned_at) VALUES ('nope', "
                "'a', 's', 1, 1)"
            )
    finally:
        log.close()

    # New runs are written and read, a queued one by a worker too.
    new = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", "new", "--param", "n=2", "--db", str(engine.db)
    )
    assert new.returncode == 0, new.stderr
    assert engine.status("new")["steps_committed"] == 2
    queued = engine.run(
        "submit", f"{AGENTS}:noop", "--run-id", "q", "--param", "n=2", "--db", str(engine.db)
    )
    assert queued.returncode == 0, queued.stderr
    drained = engine.run("worker", "--db", str(engine.db), "--drain", "--poll", "0.05")
    assert drained.returncode == 0 and "1 claimed, 1 succeeded" in drained.stderr, drained.stderr
    listed = json.loads(engine.run("runs", "--db", str(engine.db), "--json").stdout)
    assert sorted(r["run_id"] for r in listed) == ["new", "old", "q"]
    check = engine.run("check", "--db", str(engine.db))
    assert check.returncode == 0 and check.stdout.startswith("ok: 3 runs, "), (
        check.stdout + check.stderr
    )


def _columns_of_sqlite(path: Path, table: str) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()
