"""The README's agent example runs as written, and the commands under it do what it says
(resuming after a SIGKILL); the pages of docs/ are run by test_docs.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from helpers.docs_pages import README, Reader, block_containing
from helpers.engine import Engine
from steplog.outbox import start_outbox


def test_the_readme_agent_example_runs_as_written(engine: Engine, tmp_path: Path) -> None:
    example = block_containing(README, "@steplog.agent")
    assert example.saved_as() == "triage.py"
    agent_file = tmp_path / "triage.py"
    agent_file.write_text(example.text)
    with start_outbox(tmp_path / "outbox.db") as outbox:
        args = [
            "run",
            f"{agent_file}:triage",
            "--run-id",
            "readme",
            "--db",
            str(engine.db),
            "--param",
            "source=demo",
            "--outbox",
            outbox.url,
        ]
        done = engine.run(*args)
        assert done.returncode == 0, done.stderr
        assert 'succeeded: {"answered": 2}' in done.stdout
        assert [d.body["ticket_id"] for d in outbox.ledger().deliveries] == ["T-1", "T-2"]
        again = engine.run(*args)  # a finished run is reported, nothing is sent again
        assert again.returncode == 0 and len(outbox.ledger().attempts) == 2
    workdir = Path(engine.status("readme")["workdir"])
    assert sorted(p.name for p in (workdir / "replies").iterdir()) == ["T-1.md", "T-2.md"]
    conn = sqlite3.connect(workdir / "helpdesk.db")
    rows = conn.execute("SELECT id, status FROM tickets ORDER BY id").fetchall()
    assert rows == [("T-1", "answered"), ("T-2", "answered")]
    conn.close()


def test_the_readme_commands_after_the_example_run_as_printed(
    engine: Engine, tmp_path: Path
) -> None:
    """Save the example as triage.py and run the shell block under it as printed: the run is
    killed mid-run (SIGKILL), the same command resumes it, and the verdict reads PASS."""
    reader = Reader(tmp_path, engine.env, engine.db)
    reader.save(block_containing(README, "@steplog.agent"))
    shell = block_containing(README, "kill -9 $!")
    assert "Save it as `triage.py`, then, in that folder:" in README.read_text()
    outbox, first, kill, again, verdict = reader.shell(shell)
    said = "\n".join(ln.stdout + ln.stderr for ln in (outbox, first, kill, again, verdict))
    assert [ln.returncode for ln in (kill, again, verdict)] == [0, 0, 0], said
    assert "steplog: starting run first-try" in first.stderr, said
    assert "steplog: resuming run first-try" in again.stderr, said
    assert 'run first-try succeeded: {"answered": 2}' in again.stdout, said
    passed = (
        "PASS  first-try (outcome succeeded): 1 kill(s), nothing duplicated, "
        "at most one step redone per kill"
    )
    assert passed in verdict.stdout, said
    status = engine.status("first-try")
    assert status["incarnations"] == 2 and status["status"] == "succeeded"
