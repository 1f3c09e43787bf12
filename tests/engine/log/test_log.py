"""The log file: created private, validated before any write, refused when foreign or corrupt."""

from __future__ import annotations

import hashlib
import sqlite3
import stat
from pathlib import Path

import pytest

from steplog.errors import CorruptDatabase, ForeignDatabase, NewerSchema
from steplog.log.db import inspect, open_log
from steplog.log.schema import APPLICATION_ID, SCHEMA_VERSION


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_log_is_private_wal_and_stamped(db: Path) -> None:
    conn = open_log(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


def test_normal_sync_is_an_option(db: Path) -> None:
    conn = open_log(db, synchronous="NORMAL")
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    conn.close()


def test_reopening_a_log_migrates_nothing_twice(db: Path) -> None:
    open_log(db).close()
    conn = open_log(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_the_event_table_is_append_only(db: Path) -> None:
    conn = open_log(db)
    conn.execute("INSERT INTO event (run_id, ts, incarnation, kind) VALUES ('r', 0, 0, 'x')")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE event SET kind = 'y'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM event")
    conn.close()


@pytest.mark.parametrize(
    "content", [b"hello, this is not a database" * 10, b"SQLite format 3\x00" + b"\x00" * 20]
)
def test_non_sqlite_or_truncated_files_are_refused_untouched(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(content)
    before = digest(path)
    with pytest.raises(CorruptDatabase, match="untouched"):
        open_log(path)
    assert digest(path) == before
    assert not Path(f"{path}-wal").exists()


def test_a_truncated_log_is_refused_untouched(db: Path) -> None:
    conn = open_log(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2 + 7])
    before = digest(db)
    with pytest.raises((CorruptDatabase, ForeignDatabase)):
        open_log(db)
        # a half file can still look like SQLite at the header: then the schema read fails
    assert digest(db) == before


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(ForeignDatabase, match="not a steplog log.*orders"):
        open_log(path)
    assert digest(path) == before


def test_a_log_missing_a_table_of_its_schema_is_refused_untouched(db: Path) -> None:
    """The application_id and user_version say "steplog log, schema N"; the tables must agree."""
    open_log(db).close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE step")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = digest(db)
    with pytest.raises(CorruptDatabase, match=f"schema {SCHEMA_VERSION}.*without its table.* step"):
        open_log(db)
    assert digest(db) == before


@pytest.mark.parametrize("version", range(SCHEMA_VERSION + 1))
def test_the_tables_a_schema_must_have_are_the_ones_its_migrations_make(version: int) -> None:
    """``expected_tables`` reads them off the migrations' text (start-up cost); SQLite running
    the migrations must agree, table for table."""
    from steplog.log.db import expected_tables
    from steplog.log.schema import MIGRATIONS, split_statements

    conn = sqlite3.connect(":memory:")
    try:
        for step in MIGRATIONS[:version]:
            for statement in split_statements(step):
                conn.execute(statement)
        made = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert expected_tables(version) == made


def test_a_log_from_a_newer_steplog_is_refused(db: Path) -> None:
    conn = open_log(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(NewerSchema, match="upgrade steplog"):
        open_log(db)


def test_an_empty_file_becomes_a_log(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    assert inspect(path) == 0
    open_log(path).close()
    assert inspect(path) == SCHEMA_VERSION


def test_sqlmodel_tables_mirror_the_migrated_schema(db: Path) -> None:
    from steplog.log.tables import (
        EffectRow,
        EventRow,
        MessageRow,
        PrunedRow,
        RunEventRow,
        RunRow,
        StepRow,
    )

    conn = open_log(db)
    try:
        for model in (RunRow, StepRow, EffectRow, EventRow, PrunedRow, MessageRow, RunEventRow):
            table = model.__table__  # type: ignore[attr-defined]
            actual = [r[1] for r in conn.execute(f"PRAGMA table_info({table.name})")]
            assert [c.name for c in table.columns] == actual, table.name
    finally:
        conn.close()


def test_a_new_log_has_1k_pages_and_an_older_4k_log_keeps_working_with_its_own(
    tmp_path: Path,
) -> None:
    """Small pages make each commit's WAL frames small (a step changes about six pages per
    commit); logs made before that have SQLite's 4 KiB pages, which cannot change under WAL."""
    import steplog
    from steplog.log.db import PAGE_SIZE
    from steplog.log.schema import MIGRATIONS, split_statements

    @steplog.agent
    def three(run: steplog.Run) -> int:
        return sum(run.step(f"s{i}", int, i) for i in range(3))

    new = open_log(tmp_path / "new.db")
    try:
        assert new.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 1024
        assert (
            new.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 4000
        )  # 4 MB of WAL, as 1,000 4 KiB pages
    finally:
        new.close()

    old_path = tmp_path / "old.db"
    old = sqlite3.connect(
        old_path, isolation_level=None
    )  # as steplog made logs before: 4 KiB pages
    old.execute("PRAGMA page_size = 4096")
    old.execute("PRAGMA journal_mode = WAL")
    for migration in MIGRATIONS:
        for statement in split_statements(migration):
            old.execute(statement)
    old.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    old.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    old.close()
    assert three.run("r", db=old_path) == 3
    conn = sqlite3.connect(old_path)
    try:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
