"""``steplog prune`` and ``steplog import`` behave the same on a SQLite file and a PostgreSQL log.

Each test runs on both backends unless it says otherwise (a fresh file, or a fresh database of
its own, dropped at the end); real engine processes write the logs and the commands run as a
user runs them. The PostgreSQL-only ones are about what only a server has: a prune whose
transaction is held open locks only the runs it prunes, and ``VACUUM`` gives the room back.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, kill_group
from helpers.logs import log_bytes
from helpers.paths import AGENTS
from steplog.log.schema import RUN_TABLES

pytestmark = pytest.mark.backends("sqlite", "postgres")

NOOP = f"{AGENTS}:noop"
WITNESS = f"{AGENTS}:witness"


def noop_runs(engine: Engine, *ids: str, n: int = 20) -> None:
    for rid in ids:
        done = engine.run("run", NOOP, "--run-id", rid, "--db", str(engine.db), "--param", f"n={n}")
        assert done.returncode == 0, done.stderr


def rows_of(engine: Engine, run_id: str) -> dict[str, int]:
    return {
        t: engine.query(f"SELECT count(*) FROM {t} WHERE {c} = ?", run_id)[0][0]
        for t, c in RUN_TABLES
    }


def prune(engine: Engine, *args: str) -> dict[str, Any]:
    done = engine.run("prune", "--db", str(engine.db), "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def write(db: Any, sql: str, *args: Any) -> None:
    """One statement on the log, as another program would run it (not through steplog)."""
    if isinstance(db, str):
        from steplog.log.pg import connect

        pconn = connect(db)
        try:
            pconn.execute(sql, args)
        finally:
            pconn.close()
        return
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(sql, args)
    finally:
        conn.close()


def without_export_time_and_new_ids(text: str) -> list[dict[str, Any]]:
    """An export as the documented round trip keeps it: imported events get new ids."""
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        obj.pop("exported_at", None)
        if obj.get("table") in ("event", "signal"):
            obj["row"].pop("id")
        out.append(obj)
    return out


def killed_witness_run(engine: Engine, tmp_path: Path, run_id: str = "w") -> None:
    """A run with effects, killed inside one (a crash after its ledger row), then finished."""
    args = [
        "run",
        WITNESS,
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        "n=4",
        "--param",
        f"witness={tmp_path / 'witness.db'}",
    ]
    assert engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_started@3"}).returncode == 86
    done = engine.run(*args)
    assert done.returncode == 0, done.stderr


# -- on both logs -------------------------------------------------------------------------------


def test_prune_chooses_runs_by_id_status_age_and_keep_last(engine: Engine) -> None:
    noop_runs(engine, "a", "b", "c", "d", n=5)
    gave_up = engine.run(
        "run", NOOP, "--run-id", "g", "--db", str(engine.db), "--param", "n=5", "--max-steps", "2"
    )
    assert gave_up.returncode == 3
    write(engine.db, "UPDATE run SET finished_at = finished_at - 10 * 86400 WHERE id IN ('a', 'b')")
    a_rows = rows_of(engine, "a")

    assert prune(engine, "--older-than", "5", "--dry-run")["runs"] == ["a", "b"]
    assert prune(engine, "--status", "gave_up", "--dry-run")["runs"] == ["g"]
    assert prune(engine, "--status", "succeeded", "--keep-last", "3", "--dry-run")["runs"] == ["a"]
    report = prune(engine, "--older-than", "5", "--keep-last", "1")  # b is the newer of the two
    assert report["runs"] == ["a"] and report["rows_by_table"] == a_rows
    assert prune(engine, "c", "--status", "succeeded")["runs"] == ["c"]

    assert [r[0] for r in engine.query("SELECT id FROM run ORDER BY id")] == ["b", "d", "g"]
    assert rows_of(engine, "a") == dict.fromkeys(a_rows, 0)
    records = engine.query("SELECT run_id, state, rows, status FROM pruned ORDER BY id")
    assert [(r[0], r[1], r[3]) for r in records] == [
        ("a", "done", "succeeded"),
        ("c", "done", "succeeded"),
    ]
    assert json.loads(records[0][2]) == a_rows
    told = engine.query("SELECT run_id, data FROM event WHERE kind = 'runs_pruned' ORDER BY id")
    assert [(r[0], json.loads(r[1])["runs"]) for r in told] == [("", ["a"]), ("", ["c"])]
    gone = engine.run("status", "a", "--db", str(engine.db))
    assert gone.returncode == 2 and f"no run 'a' in {engine.db}: it was pruned at " in gone.stderr
    bare = engine.run("prune", "--db", str(engine.db))
    assert bare.returncode == 2 and "say which runs to prune" in bare.stderr
    unknown = engine.run("prune", "nope", "--db", str(engine.db))
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr
    check = engine.run("check", "--db", str(engine.db))
    assert check.returncode == 0 and check.stdout.startswith("ok: 3 runs, "), check.stdout


def test_a_dry_run_writes_nothing_and_estimates_what_it_frees(engine: Engine) -> None:
    from steplog.log.prune import estimate

    noop_runs(engine, "a", "b", n=200)
    before = log_bytes(engine.db)

    report = prune(engine, "a", "--dry-run")

    assert log_bytes(engine.db) == before
    assert report["dry_run"] and report["runs"] == ["a"]
    assert report["rows_by_table"] == rows_of(engine, "a")
    assert 10_000 < report["estimated_bytes"] < 200_000
    [found] = estimate(engine.db, ["a"])  # what the monitor asks before it offers to prune
    assert found.rows == {t: n for t, n in rows_of(engine, "a").items() if n}
    assert found.bytes == report["estimated_bytes"]


def test_archive_then_import_brings_the_runs_back_as_they_were(
    engine: Engine, tmp_path: Path
) -> None:
    killed_witness_run(engine, tmp_path)
    noop_runs(engine, "other")
    status = engine.status("w")
    assert status["incarnations"] == 2 and rows_of(engine, "w")["effect"] > 4
    verdict = engine.run("verdict", "w", "--db", str(engine.db), "--json").stdout
    exported = engine.run("export", "w", "--db", str(engine.db)).stdout
    archive = tmp_path / "old-runs.jsonl.gz"

    report = prune(engine, "w", "other", "--archive", str(archive))

    assert report["runs"] == ["w", "other"] and report["archive"] == str(archive)
    assert archive.stat().st_mode & 0o777 == 0o600
    assert rows_of(engine, "w") == {t: 0 for t, _ in RUN_TABLES}
    gone = engine.run("status", "w", "--db", str(engine.db))
    assert f"(archived to {archive}: `steplog import {archive}` brings it back)" in gone.stderr
    done = engine.run("import", str(archive), "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"imported 2 runs into {engine.db}: w, other"
    assert engine.status("w") == status
    assert engine.run("verdict", "w", "--db", str(engine.db), "--json").stdout == verdict
    again = engine.run("export", "w", "--db", str(engine.db)).stdout
    assert without_export_time_and_new_ids(again) == without_export_time_and_new_ids(exported)
    # A finished run, imported, is finished: `run` prints its result and changes nothing.
    rerun = engine.run("run", NOOP, "--run-id", "other", "--db", str(engine.db))
    assert rerun.returncode == 0, rerun.stderr
    assert engine.status("other")["steps_committed"] == 20


def test_a_running_run_is_never_pruned_and_steps_on(engine: Engine, tmp_path: Path) -> None:
    noop_runs(engine, "done")
    proc = engine.start(
        "run",
        WITNESS,
        "--run-id",
        "live",
        "--db",
        str(engine.db),
        "--param",
        "n=50",
        "--param",
        "pause=0.2",
        "--param",
        f"witness={tmp_path / 'w.db'}",
    )
    try:
        deadline = time.monotonic() + 60
        while engine.committed("live") < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        refused = engine.run("prune", "live", "--db", str(engine.db))
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            "steplog: run live is running; prune removes finished runs only (wait for it to "
            "finish, or cancel it first)"
        ]
        committed = engine.committed("live")
        assert prune(engine, "--older-than", "0")["runs"] == ["done"]
        while engine.committed("live") <= committed + 2:  # the live run goes on undisturbed
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        kill_group(proc)
    # Killed, its engine is gone, but the run is not finished: it stays, resumable.
    assert prune(engine, "--older-than", "0")["runs"] == []
    assert rows_of(engine, "live")["step"] > 0
    running = engine.run("prune", "--status", "running", "--db", str(engine.db))
    assert running.returncode == 2 and "never a queued, running or waiting one" in running.stderr


def test_import_never_overwrites_a_run(engine: Engine, tmp_path: Path) -> None:
    noop_runs(engine, "r1")
    export = tmp_path / "r1.jsonl"
    assert engine.run("export", "r1", "--db", str(engine.db), "-o", str(export)).returncode == 0
    before = log_bytes(engine.db)

    done = engine.run("import", str(export), "--db", str(engine.db))

    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"steplog: run 'r1' is already in {engine.db}; import never overwrites a run: "
        "prune it first, or import into another --db"
    )
    assert log_bytes(engine.db) == before


# -- PostgreSQL only ----------------------------------------------------------------------------


@pytest.mark.backends("postgres")
def test_a_sqlite_run_exported_imports_into_postgresql_and_exports_the_same(
    engine: Engine, tmp_path: Path
) -> None:
    """SQLite -> export -> PostgreSQL (a new, empty database) -> export -> a new SQLite file:
    the same run all the way, its status and verdict unchanged."""
    sqlite = Engine(db=tmp_path / "from" / "steplog.db", env=engine.env)
    killed_witness_run(sqlite, tmp_path)
    exported = tmp_path / "w.jsonl"
    assert sqlite.run("export", "w", "--db", str(sqlite.db), "-o", str(exported)).returncode == 0

    done = engine.run("import", str(exported), "--db", str(engine.db))

    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert engine.status("w") == sqlite.status("w")
    verdict = sqlite.run("verdict", "w", "--db", str(sqlite.db), "--json").stdout
    assert engine.run("verdict", "w", "--db", str(engine.db), "--json").stdout == verdict
    from_pg = engine.run("export", "w", "--db", str(engine.db)).stdout
    assert without_export_time_and_new_ids(from_pg) == without_export_time_and_new_ids(
        exported.read_text()
    )
    back = Engine(db=tmp_path / "back" / "steplog.db", env=engine.env)
    (tmp_path / "from-pg.jsonl").write_text(from_pg)
    assert back.run("import", str(tmp_path / "from-pg.jsonl"), "--db", str(back.db)).returncode == 0
    assert without_export_time_and_new_ids(
        back.run("export", "w", "--db", str(back.db)).stdout
    ) == without_export_time_and_new_ids(exported.read_text())
    rerun = engine.run("run", WITNESS, "--run-id", "w", "--db", str(engine.db))
    assert rerun.returncode == 0, rerun.stderr
    assert engine.status("w") == sqlite.status("w"), "a finished run changes nothing"


@pytest.mark.backends("postgres")
def test_a_prune_held_open_locks_only_the_runs_it_prunes(engine: Engine, db: Any) -> None:
    """The prune's transaction is kept open (another program holds the second run's row): the
    run it has deleted and the one it waits for are locked; an engine stepping another run, and
    a new run from start to end, go on meanwhile."""
    import psycopg

    noop_runs(engine, "old1", "old2", n=5)
    live = engine.start("run", NOOP, "--run-id", "live", "--db", str(db), "--param", "n=1000000")
    locked, release = threading.Event(), threading.Event()

    def hold_old2() -> None:
        with psycopg.connect(str(db)) as conn:  # not autocommit: the SELECT opens a transaction
            conn.execute("SELECT id FROM run WHERE id = 'old2' FOR UPDATE")
            locked.set()
            release.wait(60)
            conn.rollback()

    holder = threading.Thread(target=hold_old2)
    holder.start()
    pruning = None
    try:
        deadline = time.monotonic() + 60
        while engine.committed("live") < 10:
            assert time.monotonic() < deadline and live.poll() is None
            time.sleep(0.05)
        assert locked.wait(30)
        pruning = engine.start("prune", "old1", "old2", "--db", str(db), "--json")
        while not engine.query(
            "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.query LIKE '%FOR UPDATE%' AND a.datname = current_database()"
        ):  # the prune waits for old2's row, its transaction open
            assert time.monotonic() < deadline and pruning.poll() is None
            time.sleep(0.05)
        steps = engine.committed("live")

        fresh = engine.run("run", NOOP, "--run-id", "fresh", "--db", str(db), "--param", "n=5")
        time.sleep(1.0)

        assert fresh.returncode == 0, fresh.stderr
        assert engine.committed("live") > steps + 10, "the live run stepped on"
        assert pruning.poll() is None, "and all of it while the prune's transaction was open"
        release.set()
        out, err = pruning.communicate(timeout=60)
        assert pruning.returncode == 0, err
        assert json.loads(out)["runs"] == ["old1", "old2"]
    finally:
        release.set()
        holder.join(60)
        kill_group(live)
        if pruning is not None and pruning.poll() is None:
            kill_group(pruning)
    assert [r[0] for r in engine.query("SELECT id FROM run ORDER BY id")] == ["fresh", "live"]


@pytest.mark.backends("postgres")
def test_reclaim_on_postgresql_is_vacuum_and_vacuum_full(engine: Engine) -> None:
    noop_runs(engine, "r0", "r1", "r2", "r3", n=300)

    auto = prune(engine, "r0")
    assert auto["reclaimed_by"] == "incremental"  # VACUUM: engines never wait for it
    assert auto["auto_vacuum"] in ("autovacuum", "none")
    left = engine.run("prune", "r1", "--reclaim", "none", "--db", str(engine.db))
    assert left.returncode == 0, left.stderr
    assert "stays in the tables until a VACUUM" in left.stdout
    full = prune(engine, "r2", "--reclaim", "vacuum")

    assert full["reclaimed_by"] == "vacuum"  # VACUUM FULL: the tables rewritten, smaller
    assert full["file_bytes_after"] < full["file_bytes_before"] * 0.8
    assert rows_of(engine, "r3")["step"] == 300


def test_prune_of_a_log_that_is_not_there_creates_nothing(engine: Engine) -> None:
    done = engine.run("prune", "--older-than", "1", "--db", str(engine.db))

    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"steplog: no log at {engine.db}; pass --db with the log to prune (nothing was created)"
    )
    assert engine.events("run_created") == 0
    if isinstance(engine.db, str):  # the database stays empty
        assert engine.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]
    else:
        assert not engine.db.exists()
