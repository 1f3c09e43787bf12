"""Keeping the log small: ``steplog prune``, ``steplog export`` and ``steplog import``.

Real logs written by real engine processes; the commands run as the user runs them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sqlite3
import time
from pathlib import Path

import pytest

from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from steplog.log.schema import RUN_TABLES

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


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in (path, Path(f"{path}-wal")):
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()


def prune(engine: Engine, *args: str) -> dict[str, object]:
    done = engine.run("prune", "--db", str(engine.db), "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_prune_removes_a_whole_finished_run_and_leaves_an_audit_record(engine: Engine) -> None:
    noop_runs(engine, "old", "kept")
    kept_before = rows_of(engine, "kept")
    old_before = rows_of(engine, "old")

    report = prune(engine, "old")

    assert report["runs"] == ["old"]
    assert report["rows_by_table"] == old_before
    assert rows_of(engine, "old") == dict.fromkeys(old_before, 0)
    assert rows_of(engine, "kept") == kept_before
    [(state, counts, status)] = engine.query(
        "SELECT state, rows, status FROM pruned WHERE run_id = 'old'"
    )
    assert (state, json.loads(counts), status) == ("done", old_before, "succeeded")
    [(run_id, data)] = engine.query("SELECT run_id, data FROM event WHERE kind = 'runs_pruned'")
    assert run_id == "" and json.loads(data)["runs"] == ["old"]


def test_outside_prune_the_log_refuses_to_lose_events_or_runs(engine: Engine) -> None:
    noop_runs(engine, "r1")
    conn = sqlite3.connect(engine.db, isolation_level=None)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM event WHERE run_id = 'r1'")
        with pytest.raises(sqlite3.IntegrityError, match="only by steplog prune"):
            conn.execute("DELETE FROM run WHERE id = 'r1'")
        conn.execute("UPDATE run SET status = 'running' WHERE id = 'r1'")
        with pytest.raises(sqlite3.IntegrityError, match="only a finished run"):
            conn.execute(
                "INSERT INTO pruned (run_id, agent, status, created_at, pruned_at) VALUES ('r1', "
                "'a', 's', 0, 0)"
            )
        conn.execute("UPDATE run SET status = 'succeeded' WHERE id = 'r1'")
    finally:
        conn.close()
    prune(engine, "r1")
    conn = sqlite3.connect(engine.db, isolation_level=None)
    try:  # the audit record stays as written
        with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
            conn.execute("DELETE FROM pruned")
        with pytest.raises(sqlite3.IntegrityError, match="never changed"):
            conn.execute("UPDATE pruned SET state = 'pruning'")
    finally:
        conn.close()
    assert engine.query("SELECT run_id, state FROM pruned") == [("r1", "done")]


def test_a_running_run_is_never_pruned(engine: Engine, tmp_path: Path) -> None:
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
        deadline = time.monotonic() + 30
        while engine.events("step_committed") < 21:  # "done" made 20; "live" is under way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        refused = engine.run("prune", "live", "--db", str(engine.db))
        assert refused.returncode == 2
        assert "live is running; prune removes finished runs only" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        live_commits = (
            "SELECT count(*) FROM event WHERE run_id = 'live' AND kind = 'step_committed'"
        )
        committed = engine.query(live_commits)[0][0]
        assert prune(engine, "--older-than", "0")["runs"] == ["done"]
        while engine.query(live_commits)[0][0] <= committed + 2:  # the live run goes on undisturbed
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        kill_group(proc)
    # Killed, its engine is gone, but the run is not finished: it stays, resumable.
    assert prune(engine, "--older-than", "0")["runs"] == []
    assert rows_of(engine, "live")["step"] > 0
    assert engine.run("prune", "--status", "running", "--db", str(engine.db)).returncode == 2


def test_runs_are_chosen_by_status_age_and_keep_last(engine: Engine) -> None:
    noop_runs(engine, "a", "b", "c", "d")
    gave_up = engine.run(
        "run", NOOP, "--run-id", "g", "--db", str(engine.db), "--param", "n=5", "--max-steps", "2"
    )
    assert gave_up.returncode == 3
    conn = sqlite3.connect(engine.db, isolation_level=None)  # age a and b by ten days
    conn.execute("UPDATE run SET finished_at = finished_at - 10 * 86400 WHERE id IN ('a', 'b')")
    conn.close()

    assert prune(engine, "--older-than", "5", "--dry-run")["runs"] == ["a", "b"]
    assert prune(engine, "--status", "gave_up", "--dry-run")["runs"] == ["g"]
    assert prune(engine, "--status", "succeeded", "--keep-last", "3", "--dry-run")["runs"] == ["a"]
    assert prune(engine, "--older-than", "5", "--keep-last", "1")["runs"] == [
        "a"
    ]  # b is the newer of the two
    assert [r[0] for r in engine.query("SELECT id FROM run ORDER BY id")] == ["b", "c", "d", "g"]
    bare = engine.run("prune", "--db", str(engine.db))
    assert bare.returncode == 2 and "say which runs to prune" in bare.stderr


def test_a_dry_run_writes_nothing_and_estimates_what_it_frees(engine: Engine) -> None:
    noop_runs(engine, "a", "b", n=200)
    before = digest(engine.db)
    report = prune(engine, "a", "--dry-run")
    assert digest(engine.db) == before
    assert report["dry_run"] and report["runs"] == ["a"]
    assert 20_000 < report["estimated_bytes"] < 200_000  # type: ignore[operator]


def test_pruning_gives_the_space_back_to_the_file_system(engine: Engine) -> None:
    noop_runs(engine, *(f"r{i}" for i in range(6)), n=300)
    assert engine.query("PRAGMA auto_vacuum")[0][0] == 2  # incremental, set when the log was made
    report = prune(engine, "--keep-last", "1")
    assert len(report["runs"]) == 5  # type: ignore[arg-type]
    assert report["reclaimed_by"] == "vacuum"  # a small log: rewritten at once
    assert report["file_bytes_after"] < report["file_bytes_before"] * 0.4  # type: ignore[operator]
    assert engine.db.stat().st_size == report["file_bytes_after"]


def test_incremental_reclaim_gives_the_space_back_in_short_transactions(engine: Engine) -> None:
    noop_runs(engine, *(f"r{i}" for i in range(6)), n=300)
    report = prune(engine, "--keep-last", "1", "--reclaim", "incremental")
    assert report["reclaimed_by"] == "incremental" and report["freed_pages"] > 0  # type: ignore[operator]
    assert report["file_bytes_after"] < report["file_bytes_before"] * 0.4  # type: ignore[operator]
    assert engine.query("PRAGMA freelist_count")[0][0] == 0


def test_an_older_log_keeps_its_free_pages_until_a_rewrite(engine: Engine) -> None:
    engine.db.parent.mkdir(parents=True)
    conn = sqlite3.connect(engine.db)  # a log made before incremental vacuum: auto_vacuum NONE
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    noop_runs(engine, "a", "b", "c", n=300)
    assert engine.query("PRAGMA auto_vacuum")[0][0] == 0
    before = digest(engine.db)
    refused = engine.run("prune", "a", "--reclaim", "incremental", "--db", str(engine.db))
    assert refused.returncode == 2 and "made before incremental vacuum" in refused.stderr
    assert digest(engine.db) == before

    done = engine.run("prune", "a", "b", "--reclaim", "none", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    assert (
        "freed pages stay in the file for new rows; `steplog prune --reclaim vacuum` gives them "
        "back" in done.stdout
    )
    size = engine.db.stat().st_size
    report = prune(engine, "--reclaim", "vacuum")
    assert report["reclaimed_by"] == "vacuum" and report["runs"] == []
    assert engine.db.stat().st_size < size * 0.6
    assert engine.query("PRAGMA auto_vacuum")[0][0] == 2  # switched over on the way
    assert rows_of(engine, "c")["step"] == 300


def test_export_prune_import_gives_back_the_same_run(engine: Engine, tmp_path: Path) -> None:
    """The round trip: a run killed twice (a crash inside an effect, then a SIGKILL of its
    process group), exported, pruned with an archive, imported back from the archive: status and
    verdict read exactly as before, and the export reads the same."""
    args = [
        "run",
        WITNESS,
        "--run-id",
        "w",
        "--db",
        str(engine.db),
        "--param",
        "n=6",
        "--param",
        "pause=0.2",
        "--param",
        f"witness={tmp_path / 'witness.db'}",
    ]
    assert engine.run(*args, env={"STEPLOG_CRASH_AT": "after_effect_started@3"}).returncode == 86
    proc = engine.start(*args)
    try:
        deadline = time.monotonic() + 60
        while engine.events("step_committed") < 12:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
    finally:
        kill_group(proc)
    assert engine.run(*args).returncode == 0
    assert engine.status("w")["incarnations"] == 3
    noop_runs(engine, "other")
    status = engine.status("w")
    verdict = engine.run("verdict", "w", "--db", str(engine.db), "--json").stdout
    exported = engine.run("export", "w", "--db", str(engine.db)).stdout
    archive = tmp_path / "old-runs.jsonl.gz"

    report = prune(engine, "w", "other", "--archive", str(archive))

    assert report["runs"] == ["w", "other"] and archive.stat().st_mode & 0o777 == 0o600
    gone = engine.run("status", "w", "--db", str(engine.db))
    assert gone.returncode == 2
    assert f"no run 'w' in {engine.db}: it was pruned at " in gone.stderr
    assert f"(archived to {archive}: `steplog import {archive}` brings it back)" in gone.stderr
    done = engine.run("import", str(archive), "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    assert "imported 2 runs" in done.stdout
    assert engine.status("w") == status
    assert engine.run("verdict", "w", "--db", str(engine.db), "--json").stdout == verdict
    again = engine.run("export", "w", "--db", str(engine.db)).stdout
    assert _without_export_time_and_event_ids(again) == _without_export_time_and_event_ids(exported)


def _without_export_time_and_event_ids(text: str) -> list[dict[str, object]]:
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        obj.pop("exported_at", None)
        if obj.get("table") == "event":
            obj["row"].pop("id")
        out.append(obj)
    return out


def test_import_never_overwrites_a_run(engine: Engine, tmp_path: Path) -> None:
    noop_runs(engine, "r1")
    export = tmp_path / "r1.jsonl"
    assert engine.run("export", "r1", "--db", str(engine.db), "-o", str(export)).returncode == 0
    before = digest(engine.db)
    done = engine.run("import", str(export), "--db", str(engine.db))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"steplog: run 'r1' is already in {engine.db}; import never overwrites a run: "
        "prune it first, or import into another --db"
    )
    assert digest(engine.db) == before


@pytest.mark.parametrize("damage", ["cut", "foreign", "gzip-cut", "newer"])
def test_import_refuses_a_damaged_or_foreign_file_and_writes_nothing(
    engine: Engine, tmp_path: Path, damage: str
) -> None:
    noop_runs(engine, "r1")
    good = engine.run("export", "r1", "--db", str(engine.db)).stdout
    prune(engine, "r1")
    bad = tmp_path / "bad.jsonl"
    if damage == "cut":
        bad.write_text("".join(good.splitlines(keepends=True)[:-3]))
    elif damage == "foreign":
        bad.write_text("id,name\n1,x\n")
    elif damage == "gzip-cut":
        blob = gzip.compress(good.encode())
        bad.write_bytes(blob[: len(blob) // 2])
    else:
        lines = good.splitlines(keepends=True)
        head = json.loads(lines[0])
        head["schema"] = 999
        bad.write_text(json.dumps(head) + "\n" + "".join(lines[1:]))
    before = digest(engine.db)
    done = engine.run("import", str(bad), "--db", str(engine.db))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert {
        "cut": "cut off",
        "foreign": "not JSON",
        "gzip-cut": "cut off",
        "newer": "upgrade steplog",
    }[damage] in done.stderr
    assert digest(engine.db) == before


def test_an_existing_archive_file_is_never_overwritten(engine: Engine, tmp_path: Path) -> None:
    noop_runs(engine, "r1")
    archive = tmp_path / "a.jsonl.gz"
    archive.write_bytes(b"precious")
    done = engine.run("prune", "r1", "--db", str(engine.db), "--archive", str(archive))
    assert done.returncode == 2 and "never overwrites" in done.stderr
    assert archive.read_bytes() == b"precious"
    assert rows_of(engine, "r1")["run"] == 1


def test_export_of_an_unknown_run_is_refused(engine: Engine) -> None:
    noop_runs(engine, "r1")
    done = engine.run("export", "nope", "--db", str(engine.db))
    assert done.returncode == 2 and done.stdout == ""
    assert "no run 'nope'" in done.stderr


def test_a_cancelled_run_and_a_run_with_a_signal_leave_and_come_back_whole(
    engine: Engine, tmp_path: Path
) -> None:
    """Every per-run table goes and comes back: the signal a run consumed too; ``cancelled`` is
    finished."""
    approval, db = f"{AGENTS}:approval", str(engine.db)
    witness = tmp_path / "witness.db"
    signalled = engine.start(
        "run",
        approval,
        "--run-id",
        "s",
        "--db",
        db,
        "--param",
        f"witness={witness}",
        "--param",
        "pause=0.3",
    )
    cancelled = engine.start(
        "run", approval, "--run-id", "c", "--db", db, "--param", f"witness={witness}"
    )
    deadline = time.monotonic() + 60
    while engine.events("step_committed") < 1 or engine.events("waiting") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (
        engine.run("signal", "s", "approve", "--db", db, "--data", '{"approved": false}').returncode
        == 0
    )
    assert engine.run("cancel", "c", "--db", db, "--reason", "not needed").returncode in (0, 5)
    assert signalled.wait(timeout=60) == 0 and cancelled.wait(timeout=60) == 5
    for proc in (signalled, cancelled):
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
    before = {r: engine.status(r) for r in ("s", "c")}
    assert before["c"]["status"] == "cancelled" and rows_of(engine, "s")["signal"] == 1
    archive = tmp_path / "a.jsonl.gz"

    assert sorted(
        prune(engine, "--archive", str(archive), "--status", "succeeded,cancelled")["runs"]
    ) == ["c", "s"]  # type: ignore[arg-type]
    assert rows_of(engine, "s") == dict.fromkeys(rows_of(engine, "s"), 0)
    assert engine.run("import", str(archive), "--db", db).returncode == 0
    assert {r: engine.status(r) for r in ("s", "c")} == before
    assert rows_of(engine, "s")["signal"] == 1


# -- only finished runs leave the log (issue 27) -----------------------------------------------


def test_a_running_run_is_not_exported_and_its_export_once_it_ended_round_trips(
    engine: Engine, tmp_path: Path
) -> None:
    """An export of a live run, imported into another log, was a second run an engine there
    resumed in the same workdir: 22 of 40 step bodies ran again and 23 posts were re-sent. Now
    the export is refused (exit 2, one line naming ``steplog cancel``, no file, nothing on
    stdout) while the demo runs, and once it has ended the export imports as the same run."""
    from steplog.outbox import start_outbox

    db = str(engine.db)
    out = tmp_path / "out"
    out.mkdir()
    with start_outbox(tmp_path / "outbox.db") as outbox:
        proc = engine.start(
            "run",
            "demo",
            "--run-id",
            "d",
            "--db",
            db,
            "--outbox",
            outbox.url,
            "--pace",
            "0.5",
            "--param",
            "tickets=12",  # long enough to outlast two exports on a loaded machine
        )
        try:
            deadline = time.monotonic() + 60
            while engine.events("step_committed") < 2:
                assert time.monotonic() < deadline and proc.poll() is None, "the demo never started"
                time.sleep(0.02)

            to_stdout = engine.run("export", "d", "--db", db)
            to_file = engine.run("export", "d", "--db", db, "-o", str(out / "d.jsonl.gz"))

            assert engine.status("d")["status"] == "running", "the demo ran throughout"
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                kill_group(proc)
        assert proc.returncode == 0, stderr
    for done in (to_stdout, to_file):
        assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "run d is running" in lines[0] and "`steplog cancel d`" in lines[0], lines[0]
    assert list(out.iterdir()) == [], "no archive and no temporary file"

    exported = out / "d.jsonl.gz"
    assert engine.run("export", "d", "--db", db, "-o", str(exported)).returncode == 0
    other = tmp_path / "other" / "steplog.db"
    done = engine.run("import", str(exported), "--db", str(other))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert Engine(db=other, env=engine.env).status("d") == engine.status("d")
    back = engine.run("export", "d", "--db", str(other)).stdout
    assert _without_export_time_and_event_ids(back) == _without_export_time_and_event_ids(
        engine.run("export", "d", "--db", db).stdout
    )


def _key(conn: sqlite3.Connection, table: str) -> str:
    """The table's primary key, in key order (``step`` has no rowid since schema 6)."""
    pk = sorted((r[5], r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")') if r[5])
    return ", ".join(f'"{name}"' for _, name in pk)


def _as_an_older_steplog_exported(db: Path, run_id: str) -> str:
    """The export lines of ``run_id`` whatever its status, in the format of ``steplog.log.archive``:
    what a steplog from before issue 27 wrote for a run that had not finished."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        schema = int(conn.execute("PRAGMA user_version").fetchone()[0])
        lines = [
            {"steplog_export": 1, "schema": schema, "run_id": run_id, "exported_at": time.time()}
        ]
        counts = {}
        for table, column in RUN_TABLES:
            rows = conn.execute(
                f'SELECT * FROM "{table}" WHERE "{column}" = ? ORDER BY {_key(conn, table)}',
                (run_id,),
            ).fetchall()
            lines += [{"table": table, "row": dict(r)} for r in rows]
            counts[table] = len(rows)
        lines.append({"end": run_id, "rows": counts})
    finally:
        conn.close()
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_an_unfinished_run_in_an_older_archive_is_imported_cancelled_and_never_runs(
    engine: Engine, tmp_path: Path
) -> None:
    """An archive from before the refusal may hold a run that was running: it is imported as
    ``cancelled``, with a reason that says why, so no engine or worker ever resumes the copy."""
    db = str(engine.db)
    witness = tmp_path / "witness.db"
    args = [
        "run",
        WITNESS,
        "--run-id",
        "k",
        "--db",
        db,
        "--param",
        "n=40",
        "--param",
        f"witness={witness}",
    ]
    proc = engine.start(*args)
    try:
        deadline = time.monotonic() + 60
        while engine.events("step_committed") < 12:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
    finally:
        kill_group(proc)
    assert engine.status("k")["status"] == "running"
    archive = tmp_path / "old.jsonl"
    archive.write_text(_as_an_older_steplog_exported(engine.db, "k"))
    other = Engine(db=tmp_path / "other" / "steplog.db", env=engine.env)

    done = engine.run("import", str(archive), "--db", str(other.db))

    assert done.returncode == 0, done.stderr
    assert "run k was running when it was archived: imported as cancelled" in done.stderr
    copy = other.status("k")
    assert copy["status"] == "cancelled"
    assert copy["reason"] == "imported from an archive taken while it ran"
    assert copy["engine"] == "none"
    attempts = _attempts(witness)
    again = other.run(*[a if a != db else str(other.db) for a in args])
    assert again.returncode == 5, again.stdout + again.stderr
    assert other.status("k") == copy, "the copy ran nothing"
    assert _attempts(witness) == attempts, "and sent nothing"
    worker = other.run("worker", "--db", str(other.db), "--drain")
    assert worker.returncode == 0 and other.status("k") == copy, "no worker claims it either"


def _attempts(witness: Path) -> int:
    conn = sqlite3.connect(witness)
    try:
        return int(conn.execute("SELECT count(*) FROM attempt").fetchone()[0])
    finally:
        conn.close()


def test_prune_archives_and_removes_only_runs_that_are_finished_when_archived(
    engine: Engine,
) -> None:
    """``prune --archive`` chooses finished runs; one set going again before it is written (a
    ``steplog retry`` in between) is left out of the archive (``write_runs``), and so kept."""
    from steplog.log.archive import write_runs

    noop_runs(engine, "done")
    proc = engine.start(
        "run", NOOP, "--run-id", "live", "--db", str(engine.db), "--param", "n=100000"
    )
    try:
        deadline = time.monotonic() + 60
        while engine.events("step_committed") < 30:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
    finally:
        kill_group(proc)
    conn = sqlite3.connect(engine.db, isolation_level=None)
    try:
        out = io.StringIO()
        written = write_runs(conn, ["live", "done"], out)
    finally:
        conn.close()
    assert list(written) == ["done"] and written["done"] == rows_of(engine, "done")
    assert [json.loads(line).get("run_id") for line in out.getvalue().splitlines()][0] == "done"
    assert "live" not in out.getvalue()
