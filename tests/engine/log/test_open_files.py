"""A process that reads a log (the monitor) opens it many times over; none may blind the others.

POSIX locks belong to the process: a plain ``open()``/``close()`` of the log file drops the shared
lock of every SQLite reader in the process, an engine then deletes the WAL under them, and they
stop seeing new commits. The monitor's runs list stopped following the log that way.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from helpers.engine import Engine
from helpers.paths import AGENTS
from steplog.log import openfiles
from steplog.log.db import inspect, open_readonly


def events(conn: sqlite3.Connection) -> set[str]:
    return {r for (r,) in conn.execute("SELECT DISTINCT run_id FROM event")}


def test_a_long_lived_reader_sees_every_new_run_while_the_process_reopens_the_log(
    engine: Engine,
) -> None:
    def run(run_id: str) -> None:
        done = engine.run(
            "run", f"{AGENTS}:noop", "--run-id", run_id, "--db", str(engine.db), "--param", "n=3"
        )
        assert done.returncode == 0, done.stderr

    run("first")
    tailer = open_readonly(engine.db)  # the monitor's tailer: open for the whole session
    try:
        assert events(tailer) == {"first"}
        for i in range(4):
            # What the verdict, step-detail and run-row jobs do between two engines.
            inspect(engine.db)
            open_readonly(engine.db).close()
            run(f"next{i}")
            assert events(tailer) == {"first", *(f"next{j}" for j in range(i + 1))}, i
            fresh = open_readonly(engine.db)
            try:
                assert fresh.execute("PRAGMA quick_check").fetchone() == ("ok",)
            finally:
                fresh.close()
    finally:
        tailer.close()
    assert not openfiles.held(engine.db)  # every connection made through steplog.db was counted out


def test_a_file_held_open_is_inspected_through_sqlite_not_read_as_bytes(
    engine: Engine, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    done = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", "r", "--db", str(engine.db), "--param", "n=1"
    )
    assert done.returncode == 0, done.stderr
    reader = open_readonly(engine.db)
    opened: list[str] = []
    real_open = open

    def spy(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    try:
        assert inspect(engine.db) > 0
        assert str(engine.db) not in opened
    finally:
        reader.close()
    inspect(Path(engine.db))
    assert str(engine.db) in opened  # held by no one: the cheap header check is fine again
