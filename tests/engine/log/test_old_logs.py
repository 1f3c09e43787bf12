"""Logs written by every earlier release are read, migrated and resumed as those releases said.

The fixtures in ``tests/fixtures/oldlogs`` are real logs, each written by the code of the last
commit at its schema (SQLite files ``vN.db``, PostgreSQL dumps ``pg-*.sql``), with what that code
answered about each run (``steplog status --json``, ``steplog verdict --json``, ``export`` row
counts) recorded beside them; ``make_fixtures.py`` there says which commit made which, and how.
Nothing here names the current schema version: a new migration must leave these answers as
they are.

Each test takes a copy (a file, or the dump restored into a fresh database) and checks, with the
current code, that:

- before any migration, the read-only readers (status, verdict, the monitor's bulk load) say what
  the old code said: a person who upgrades and opens the monitor first sees the same runs;
- opened for writing, the log is migrated to the current schema, and then status, verdict,
  ``export``, ``check`` and the monitor still read the same;
- the run killed and never resumed resumes to success, without running its committed steps again;
- the run waiting for a signal takes one and finishes.

The verdict is compared as the old code judged, less one deliberate change of policy
(``_expected_label``): before commit 061ded2 ("verdict: PASS/FAIL from kills only") a cancelled
run failed an "outcome" check and ``redone`` counted every execution beyond the committed steps.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, checkout_env
from helpers.logs import query_log
from helpers.paths import TESTS

OLDLOGS = TESTS / "fixtures" / "oldlogs"
SQLITE_FIXTURES = sorted(p.stem for p in OLDLOGS.glob("v*.db"))
PG_FIXTURES = sorted(p.stem for p in OLDLOGS.glob("pg-*.sql"))
AGENT = "oldlogs_agent:work"
PLAIN_STEPS = ("load", "hold", "tally")
"""The agent's plain steps in order (``oldlogs_agent.PLAIN_STEPS``): the ones it traces."""
TERMINAL = ("succeeded", "gave_up", "failed", "cancelled")


@dataclass
class OldLog:
    """A private copy of one fixture, and what the code that wrote it said about it."""

    name: str
    db: Any
    """A ``Path`` or a ``PgUrl``."""
    expected: dict[str, Any]
    engine: Engine
    tmp: Path

    @property
    def runs(self) -> dict[str, dict[str, Any]]:
        return self.expected["runs"]  # type: ignore[no-any-return]

    @property
    def live_runs(self) -> list[str]:
        """The runs still in the log (a pruned one is only its record)."""
        return [r for r, e in self.runs.items() if e["status_exit"] == 0]

    def steplog(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.engine.run(*args, "--db", str(self.db), env=env)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return query_log(self.db, sql, *args)

    def committed(self, run_id: str) -> list[str]:
        rows = self.query(
            "SELECT name FROM step WHERE run_id = ? AND status = 'committed' ORDER BY seq", run_id
        )
        return [r[0] for r in rows]

    def write(self, sql: str, *args: Any) -> None:
        """A write outside steplog (moving the log's workdirs), on either backend."""
        if isinstance(self.db, str):
            import psycopg

            with psycopg.connect(self.db, autocommit=True) as conn:
                conn.execute(sql.replace("?", "%s"), args)
            return
        lite = sqlite3.connect(self.db, isolation_level=None)
        try:
            lite.execute(sql, args)
        finally:
            lite.close()

    def relocate_workdirs(self) -> None:
        """Point the runs' workdirs (under the folder the fixture was made in) into this test's
        tmp folder, as a person who moved a log with its workdirs would find them."""
        made = self.expected["made_under"]
        self.write("UPDATE run SET workdir = replace(workdir, ?, ?)", made, str(self.tmp / "made"))

    def migrate(self) -> None:
        """Open the log for writing with the current code, which migrates it."""
        from steplog.log.db import open_log

        open_log(self.db).close()


def _engine(tmp_path: Path) -> Engine:
    env = checkout_env(OLDLOGS_TRACE=str(tmp_path / "trace"))
    env["PYTHONPATH"] = os.pathsep.join([str(OLDLOGS), env["PYTHONPATH"]])
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    return Engine(db=tmp_path / "unused", env=env)


def _expected(name: str) -> dict[str, Any]:
    return json.loads((OLDLOGS / f"{name}.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(params=SQLITE_FIXTURES + [f"postgres:{n}" for n in PG_FIXTURES])
def old_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OldLog]:
    name = str(request.param)
    if name.startswith("postgres:"):
        name = name.removeprefix("postgres:")
        db = request.getfixturevalue("postgres_db")
        _restore(OLDLOGS / f"{name}.sql", db)
    else:
        db = tmp_path / "data" / "steplog.db"
        db.parent.mkdir()
        shutil.copyfile(OLDLOGS / f"{name}.db", db)
    yield OldLog(name, db, _expected(name), _engine(tmp_path), tmp_path)


def _psql() -> str:
    found = shutil.which("psql")
    if found is None:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"), reverse=True)
        found = str(candidates[0]) if candidates else None
    if found is None:
        pytest.fail(
            "psql is needed to restore the PostgreSQL fixtures (apt-get install postgresql)"
        )
    return found


def _restore(dump: Path, url: str) -> None:
    done = subprocess.run(
        [_psql(), str(url), "-v", "ON_ERROR_STOP=1", "-q", "-f", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


# -- what the readers say ------------------------------------------------------------------------


def _same_fields(old: Any, new: Any, path: str = "") -> list[str]:
    """Where ``new`` differs from ``old`` in the fields both have (a field only one has is a
    field a release added or dropped, not a different reading)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d for k in old.keys() & new.keys() for d in _same_fields(old[k], new[k], f"{path}.{k}")
        ]
    return [] if old == new else [f"{path}: was {old!r}, now {new!r}"]


def _expected_label(old: dict[str, Any]) -> tuple[str, int]:
    """(label, redone) the current policy gives the run the old verdict judged.

    Commit 061ded2 made the verdict come from kills only: the run's outcome stopped being a check
    (a cancelled run that no one killed is UNTESTED, no longer FAIL) and ``redone`` counts only
    steps a kill made run again (a waiting or killed-but-not-yet-resumed run's in-flight step is
    no longer redone work). An old verdict with an "outcome" check was judged before that."""
    if not any(c["name"] == "outcome" for c in old["checks"]):
        return old["verdict"], old["redone"]
    failing = {c["name"] for c in old["checks"] if c["passed"] is False}
    label = old["verdict"]
    if label == "FAIL" and failing == {"outcome"}:
        label = "PASS" if old["kills"] else "UNTESTED"
    return label, old["redone"] if old["kills"] else 0


def _check_verdict(log: OldLog, run_id: str) -> None:
    expected = log.runs[run_id]
    done = log.steplog("verdict", run_id, "--json")
    if expected["verdict"] is None:  # a pruned run: refused, as it was
        assert done.returncode == expected["verdict_exit"], done.stderr
        return
    old = expected["verdict"]
    label, redone = _expected_label(old)
    assert done.returncode == (1 if label == "FAIL" else 0), done.stderr
    new = json.loads(done.stdout)
    assert (new["verdict"], new["redone"]) == (label, redone), (run_id, new["explanation"])
    for key in ("run_id", "status", "kills", "duplicates", "missing", "deliveries"):
        assert new[key] == old[key], (run_id, key)
    assert new["resume_latency"] == old["resume_latency"], run_id
    # every check both releases made and both decided reads the same
    now = {c["name"]: c["passed"] for c in new["checks"]}
    for check in old["checks"]:
        if check["passed"] is not None and now.get(check["name"]) is not None:
            assert now[check["name"]] == check["passed"], (run_id, check)


def _check_status(log: OldLog, run_id: str) -> None:
    expected = log.runs[run_id]
    done = log.steplog("status", run_id, "--json")
    assert done.returncode == expected["status_exit"], done.stderr
    if expected["status"] is None:  # a pruned run: "no run ...: it was pruned at ..."
        assert "was pruned" in done.stderr and "was pruned" in expected["status_stderr"][0]
        return
    assert _same_fields(expected["status"], json.loads(done.stdout)) == [], run_id


def _check_monitor(log: OldLog) -> None:
    """The monitor's reader loads every run, each with the steps its log holds."""
    from steplog.log.reader import LogRepository
    from steplog_gui.model.bulk_load import add_details, load_details, load_run

    repo = LogRepository(log.db)
    try:
        repo.open()
        upto = repo.max_event_id()
        assert sorted(repo.run_ids(upto)) == sorted(log.live_runs)
        for run_id in log.live_runs:
            old = log.runs[run_id]["status"]
            state = load_run(repo, run_id, upto)
            add_details(state, load_details(repo, run_id, upto))
            assert state.status == old["status"], run_id
            assert state.steps_committed == old["steps_committed"], run_id
            assert state.steps_committed == len(log.committed(run_id)), run_id
            assert state.step_executions == old["step_executions"], run_id
            if old.get("forked_from"):
                assert state.forked_from is not None, run_id
                assert state.forked_from[0] == old["forked_from"]["run_id"], run_id
            assert sorted(state.step_names) == sorted(
                r[0] for r in log.query("SELECT seq FROM step WHERE run_id = ?", run_id)
            ), run_id
    finally:
        repo.close()


def _schema_version(log: OldLog) -> int:
    from steplog.log.db import inspect

    return inspect(log.db)


# -- the tests -----------------------------------------------------------------------------------


def test_the_readers_say_what_the_old_code_said_before_any_migration(old_log: OldLog) -> None:
    assert _schema_version(old_log) == old_log.expected["schema_version"]
    for run_id in old_log.runs:
        _check_status(old_log, run_id)
        _check_verdict(old_log, run_id)
    _check_monitor(old_log)
    assert _schema_version(old_log) == old_log.expected["schema_version"], "a reader migrated it"


def test_a_migrated_log_reads_as_the_old_code_said(old_log: OldLog) -> None:
    from steplog.log.schema import SCHEMA_VERSION

    old_log.migrate()
    assert _schema_version(old_log) == SCHEMA_VERSION
    check = old_log.steplog("check")
    assert check.returncode == 0, check.stdout + check.stderr
    for run_id in old_log.runs:
        _check_status(old_log, run_id)
        _check_verdict(old_log, run_id)
    _check_monitor(old_log)


def test_export_of_every_finished_run_has_all_its_rows(old_log: OldLog) -> None:
    old_log.migrate()
    finished = [r for r in old_log.live_runs if old_log.runs[r]["status"]["status"] in TERMINAL]
    assert finished
    for run_id in finished:
        done = old_log.steplog("export", run_id)
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        rows = lines[-1]["rows"]
        for table, count in rows.items():
            assert count == sum(1 for x in lines if x.get("table") == table), table
        if table_counts := old_log.runs[run_id].get("export_rows"):
            assert _same_fields(table_counts, rows) == [], run_id
        assert rows["step"] == len(old_log.query("SELECT 1 FROM step WHERE run_id = ?", run_id))
        assert rows["event"] == len(old_log.query("SELECT 1 FROM event WHERE run_id = ?", run_id))


def test_the_unfinished_run_resumes_to_success_without_rerunning_committed_steps(
    old_log: OldLog,
) -> None:
    old_log.relocate_workdirs()
    before = old_log.committed("unfinished")
    assert 0 < len(before) < old_log.runs["done"]["status"]["steps_committed"]
    done = old_log.steplog("run", AGENT, "--run-id", "unfinished")
    assert done.returncode == 0, done.stderr
    executed = (old_log.tmp / "trace").read_text().split()
    assert executed == [s for s in PLAIN_STEPS if s not in before]
    status = json.loads(old_log.steplog("status", "unfinished", "--json").stdout)
    assert status["status"] == "succeeded"
    assert status["steps_committed"] == old_log.runs["done"]["status"]["steps_committed"]
    assert status["result"] == old_log.runs["done"]["status"]["result"]
    assert old_log.committed("unfinished")[: len(before)] == before
    from steplog.log.schema import SCHEMA_VERSION

    assert _schema_version(old_log) == SCHEMA_VERSION  # the engine that resumed it migrated it


def test_the_waiting_run_takes_its_signal_and_finishes(old_log: OldLog) -> None:
    if "waiting" not in old_log.runs:
        pytest.skip(f"{old_log.name}: its release had no signals")
    old_log.relocate_workdirs()
    sent = old_log.steplog("signal", "waiting", "go")
    assert sent.returncode == 0, sent.stderr
    done = old_log.steplog("run", AGENT, "--run-id", "waiting", "--param", "wait=1")
    assert done.returncode == 0, done.stderr
    assert (old_log.tmp / "trace").read_text().split() == ["tally"]
    status = json.loads(old_log.steplog("status", "waiting", "--json").stdout)
    assert (status["status"], status["steps_committed"]) == ("succeeded", 6)
