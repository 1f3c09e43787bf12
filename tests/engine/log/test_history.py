"""Reading a log back as typed SQLModel rows, without ever writing it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import steplog
from steplog.errors import ForeignDatabase, LogError, UnknownRun
from steplog.log.history import History


@steplog.agent
def small(run: steplog.Run) -> str:
    run.step("one", int, 1)
    run.write_file("a.txt", "A")
    return "ok"


def test_runs_steps_effects_and_events_come_back_typed(db: Path) -> None:
    small.run("h1", db=db)
    small.run("h2", db=db)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with History(db) as h:
        assert [r.id for r in h.runs()] == ["h2", "h1"]
        run = h.run("h1")
        assert (run.status, run.used_steps, run.incarnation) == ("succeeded", 2, 1)
        assert [(s.seq, s.name, s.kind, s.status) for s in h.steps("h1")] == [
            (1, "one", "call", "committed"),
            (2, "write a.txt", "write_file", "committed"),
        ]
        (effect,) = h.effects("h1")
        assert (effect.key, effect.status, effect.kind) == ("h1:2", "completed", "write_file")
        all_events = h.events("h1")
        assert all_events[0].kind == "run_created" and all_events[-1].kind == "run_finished"
        tail = h.events("h1", since=all_events[3].id or 0)
        assert [e.id for e in tail] == [e.id for e in all_events[4:]]
        with pytest.raises(UnknownRun):
            h.run("nope")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_missing_and_foreign_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="does not exist"):
        History(tmp_path / "none.db")
    (tmp_path / "empty.db").touch()
    with pytest.raises(ForeignDatabase):
        History(tmp_path / "empty.db")
