"""The README's agent example runs as written (and so does resuming it)."""

from __future__ import annotations

import re
import shlex
import sqlite3
import subprocess
from pathlib import Path

from helpers.engine import Engine
from helpers.readme import README, run_in_bash, run_shell_block
from steplog.outbox import start_outbox


def test_the_readme_agent_example_runs_as_written(engine: Engine, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "@steplog.agent" in b)
    agent_file = tmp_path / "triage.py"
    agent_file.write_text(example)
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
    assert conn.execute("SELECT id, status FROM tickets ORDER BY id").fetchall() == [
        ("T-1", "answered"),
        ("T-2", "answered"),
    ]
    conn.close()


def test_the_readme_commands_after_the_example_run_as_printed(
    engine: Engine, tmp_path: Path
) -> None:
    """Save the example as triage.py and run the shell block under it as printed: the run is
    killed mid-run (SIGKILL), the same command resumes it, and the verdict reads PASS."""
    text = README.read_text()
    example = next(
        b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "@steplog.agent" in b
    )
    (tmp_path / "triage.py").write_text(example)
    shell = re.search(r"Save it as `triage.py`, then, in that folder:\n\n```\n(.*?)```", text, re.S)
    assert shell is not None, "the README no longer says how to run the example"
    assert "kill -9" in shell.group(1), "the README no longer shows how to kill it"
    code, out, err = run_in_bash(engine, tmp_path, shell.group(1))
    assert code == 0, out + err
    assert "steplog: starting run first-try" in err, err
    assert "steplog: resuming run first-try" in err, err
    assert 'run first-try succeeded: {"answered": 2}' in out, out + err
    passed = (
        "PASS  first-try (outcome succeeded): 1 kill(s), nothing duplicated, at most one step "
        "redone per kill"
    )
    assert passed in out, out + err
    status = engine.status("first-try")
    assert status["incarnations"] == 2 and status["status"] == "succeeded"


def test_the_readme_control_runs_commands_do_what_it_says(engine: Engine, tmp_path: Path) -> None:
    text = README.read_text()
    shell = re.search(r"The demo has such a step:\n\n```\n(.*?)```", text, re.S)
    assert shell is not None, "the README no longer shows run control"
    first, sent, carried_on, forked, cancelled = run_shell_block(engine, tmp_path, shell.group(1))
    assert first.returncode == 6 and "waiting for signal 'approve'" in first.stdout, first.stderr
    assert sent.returncode == 0 and "signal 'approve' sent to run ask" in sent.stdout, sent.stderr
    assert carried_on.returncode == 0 and '"digest": "approved"' in carried_on.stdout, (
        carried_on.stderr
    )
    assert forked.returncode == 6 and forked.stdout.startswith("ask-2\n"), forked.stderr
    assert "5 step(s) copied" in forked.stderr
    assert (
        cancelled.returncode == 0
        and "run ask-2 cancelled (one digest is enough)" in cancelled.stdout
    )
    fork = engine.status("ask-2")
    assert fork["forked_from"] == {"run_id": "ask", "at_step": 6} and fork["status"] == "cancelled"
    # The fork sent T-1002's reply as its own (a new key), and no digest: it was cancelled waiting.
    assert engine.query("SELECT key FROM effect WHERE run_id = 'ask-2' AND kind = 'http_post'") == [
        ("ask-2:8",)
    ]


def test_the_readme_async_example_runs_as_written(engine: Engine, tmp_path: Path) -> None:
    text = README.read_text()
    example = next(
        b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "async def weather" in b
    )
    (tmp_path / "weather.py").write_text(example)
    line = re.search(r"Save it as `weather.py` and run `(steplog run [^`]+)`", text)
    assert line is not None
    argv = shlex.split(line.group(1))
    done = subprocess.run(
        engine.argv(*argv[1:], "--db", str(engine.db)),
        cwd=tmp_path,
        env=engine.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert 'succeeded: {"hottest": "Pune"}' in done.stdout
    workdir = Path(engine.status("w1")["workdir"])
    assert sorted(p.name for p in (workdir / "notes").iterdir()) == [
        "Lima.md",
        "Oslo.md",
        "Pune.md",
    ]
