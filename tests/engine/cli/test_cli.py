"""Bad input gets one clear line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS, ROOT


def one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("steplog: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nosuch"], "unknown agent 'nosuch': use a built-in name"),
        (["run", "nosuch.module:fn"], "cannot import 'nosuch.module'"),
        (["run", "steplog.agents.flaky:nothing"], "has no 'nothing'"),
        (["run", "/nowhere/agent.py:main"], "agent file /nowhere/agent.py does not exist"),
        (
            ["run", "flaky", "--param", "novalue"],
            "--param 'novalue' is malformed; write --param KEY=VALUE",
        ),
        (
            ["run", "flaky", "--param", "colour=red"],
            "agent flaky has no parameter 'colour' (it takes: batches)",
        ),
        (
            ["run", "flaky", "--param", "batches=many"],
            "--param batches=many: agent flaky expects int",
        ),
        (["run", "flaky", "--param", "api_key=sk-123"], "secrets must not be"),
        (["run", "flaky", "--pace", "-1"], "--pace must be 0 or more"),
        (
            ["run", f"{AGENTS}:witness", "--param", "pause=nan"],
            "--param pause=nan: agent witness expects a finite float",
        ),
        (
            ["run", f"{AGENTS}:witness", "--param", "pause=inf"],
            "--param pause=inf: agent witness expects a finite float",
        ),
        (
            ["run", "flaky", "--run-id", "no spaces please"],
            "run id 'no spaces please' may use letters",
        ),
        (["run", "flaky", "--bogus"], "No such option '--bogus'; see `steplog run --help`"),
    ],
)
def test_bad_run_input_is_refused_before_anything_is_written(
    engine: Engine, args: list[str], message: str
) -> None:
    done = engine.run(*args, "--db", str(engine.db))
    assert done.returncode == 2, done.stderr
    assert message in one_line_error(done.stderr)
    assert not engine.db.exists() and not engine.db.parent.exists()


def test_status_of_an_unknown_run(engine: Engine) -> None:
    assert (
        engine.run("run", f"{AGENTS}:noop", "--param", "n=1", "--db", str(engine.db)).returncode
        == 0
    )
    done = engine.run("status", "nope", "--db", str(engine.db))
    assert done.returncode == 2
    assert "no run 'nope'" in one_line_error(done.stderr)


def test_status_and_runs_of_a_missing_log(engine: Engine) -> None:
    for args in (["status", "x"], ["runs"]):
        done = engine.run(*args, "--db", str(engine.db))
        assert done.returncode == 2
        assert "does not exist" in one_line_error(done.stderr)
    assert not engine.db.exists()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["garbage", "foreign", "truncated"])
@pytest.mark.parametrize("command", ["run", "status", "runs"])
def test_corrupt_truncated_or_foreign_logs_are_refused_byte_for_byte(
    engine: Engine, tmp_path: Path, kind: str, command: str
) -> None:
    path = tmp_path / "log.db"
    if kind == "garbage":
        path.write_bytes(b"\x00\x01not sqlite at all" * 100)
    elif kind == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.commit()
        conn.close()
    else:
        good = tmp_path / "good.db"
        assert engine.run("run", f"{AGENTS}:noop", "--db", str(good)).returncode == 0
        conn = sqlite3.connect(good)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        path.write_bytes(good.read_bytes()[:1500])
    before = sha(path)
    args = {"run": ["run", f"{AGENTS}:noop"], "status": ["status", "x"], "runs": ["runs"]}[command]
    done = engine.run(*args, "--db", str(path))
    assert done.returncode == 2, done.stderr
    line = one_line_error(done.stderr)
    assert (
        ("not a steplog log" in line) or ("not a SQLite database" in line) or ("damaged" in line)
    ), line
    assert sha(path) == before
    assert not Path(f"{path}-wal").exists()


@pytest.mark.parametrize("command", ["run", "status", "runs"])
def test_a_foreign_file_that_carries_steplogs_application_id_is_refused_byte_for_byte(
    engine: Engine, tmp_path: Path, command: str
) -> None:
    """A file stamped with our application_id but at schema 0 with a ``run`` table of its own is
    not ours: its tables are looked at before any write (it used to be switched to WAL and then
    refused with a message about disk space)."""
    from steplog.log.schema import APPLICATION_ID

    path = tmp_path / "imposter.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("CREATE TABLE run (id INTEGER PRIMARY KEY, distance_km REAL)")
    conn.execute("INSERT INTO run (distance_km) VALUES (5.2)")
    conn.commit()
    conn.close()
    before = sha(path)
    args = {"run": ["run", f"{AGENTS}:noop"], "status": ["status", "x"], "runs": ["runs"]}[command]
    done = engine.run(*args, "--db", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line_error(done.stderr)
    assert "not a steplog log" in line and "schema 0" in line and "run" in line, line
    assert "disk" not in line
    assert sha(path) == before
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def test_a_directory_as_the_log(engine: Engine, tmp_path: Path) -> None:
    done = engine.run("run", f"{AGENTS}:noop", "--db", str(tmp_path))
    assert done.returncode == 2
    one_line_error(done.stderr)


def test_runs_lists_newest_first_as_json(engine: Engine) -> None:
    import json

    for rid in ("a1", "b2"):
        assert (
            engine.run(
                "run", f"{AGENTS}:noop", "--param", "n=3", "--run-id", rid, "--db", str(engine.db)
            ).returncode
            == 0
        )
    done = engine.run("runs", "--db", str(engine.db), "--json")
    listed = json.loads(done.stdout)
    assert [r["run_id"] for r in listed] == ["b2", "a1"]
    for r in listed:
        assert set(r) >= {
            "run_id",
            "agent",
            "status",
            "reason",
            "steps_committed",
            "step_executions",
            "incarnations",
            "budget",
        }
        assert set(r["budget"]) >= {"steps", "tokens", "seconds", "cost_usd"}


def test_the_outbox_command_serves_on_a_free_port_and_reports_it(
    engine: Engine, tmp_path: Path
) -> None:
    import signal
    import time

    import httpx

    port_file = tmp_path / "port"
    proc = engine.start(
        "outbox", "--port", "0", "--port-file", str(port_file), "--db", str(tmp_path / "o.db")
    )
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        url = f"http://127.0.0.1:{int(port_file.read_text())}"
        first = httpx.post(
            f"{url}/messages", json={"ticket_id": "T-1"}, headers={"Idempotency-Key": "k1"}
        )
        again = httpx.post(
            f"{url}/messages", json={"ticket_id": "T-1"}, headers={"Idempotency-Key": "k1"}
        )
        assert (first.status_code, again.status_code) == (201, 200)
        assert first.json() == again.json()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def test_version_and_help_work(engine: Engine) -> None:
    assert engine.run("--version").returncode == 0
    done = engine.run("run", "--help")
    assert done.returncode == 0 and "--max-tokens" in done.stdout


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity, as every JSON parser but Python's does."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("where", ["step", "result"])
def test_nan_in_a_result_fails_the_run_and_every_json_output_stays_strict(
    engine: Engine, where: str
) -> None:
    """A NaN from a step or as the agent's result fails the run (exit 4, a clear reason); the
    success line, ``status --json`` and ``runs --json`` stay valid JSON."""
    done = engine.run(
        "run",
        f"{AGENTS}:not_a_number",
        "--run-id",
        "n",
        "--param",
        f"where={where}",
        "--db",
        str(engine.db),
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "which cannot be recorded as JSON" in done.stdout
    status = engine.run("status", "n", "--db", str(engine.db), "--json")
    assert strict_json(status.stdout)["status"] == "failed"
    listed = engine.run("runs", "--db", str(engine.db), "--json")
    assert [r["run_id"] for r in strict_json(listed.stdout)] == ["n"]
    for (data,) in engine.query("SELECT data FROM event"):
        strict_json(data)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import sys\nsys.exit(3)\n", "importing {path} failed: it called sys.exit(3)"),
        ("raise SystemExit('bye')\n", "importing {path} failed: it called sys.exit('bye')"),
        ("1 / 0\n", "importing {path} failed: ZeroDivisionError: division by zero"),
    ],
)
def test_an_agent_module_that_exits_or_raises_at_import_is_bad_input(
    engine: Engine, tmp_path: Path, source: str, message: str
) -> None:
    """``sys.exit(3)`` while importing an agent used to end the command with 3 ("gave up") and no
    word; any failure at import is an AGENT that cannot be resolved: exit 2, one line naming it."""
    agent = tmp_path / "exits.py"
    agent.write_text(source + "def main(run):\n    return 1\n")
    done = engine.run("run", f"{agent}:main", "--db", str(engine.db))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message.format(path=agent) in one_line_error(done.stderr)
    assert not engine.db.exists()


def test_an_agent_package_that_exits_at_import_is_bad_input(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "exiting_pkg").mkdir()
    (tmp_path / "exiting_pkg" / "__init__.py").write_text("import sys\nsys.exit(3)\n")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{engine.env['PYTHONPATH']}"}
    done = engine.run("run", "exiting_pkg:main", "--db", str(engine.db), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "importing exiting_pkg failed: it called sys.exit(3)" in one_line_error(done.stderr)
    assert not engine.db.exists()


def test_every_exit_code_the_docs_document_has_words_in_the_one_table() -> None:
    """``steplog.errors.EXIT_MEANINGS`` says what each documented exit code of ``steplog run``
    means (the monitor shows it when an engine ends); a code documented there and not here, or
    the reverse, fails."""
    import re

    from steplog.errors import EXIT_MEANINGS, exit_meaning

    page = (ROOT / "docs" / "run-control.md").read_text()
    table = page[page.index("| exit | meaning |") :]
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", table[: table.index("\n\n")], re.M)}
    assert documented >= {0, 2, 3, 4, 5, 6, 75}
    assert documented == set(EXIT_MEANINGS), documented ^ set(EXIT_MEANINGS)
    assert exit_meaning(5) == "cancelled"
    assert exit_meaning(-9) == "killed by SIGKILL"
    assert "exit code 86" in exit_meaning(86)


def test_no_help_text_points_at_a_page_the_project_does_not_have(engine: Engine) -> None:
    """Every command's ``--help`` is read as a person reads it: none sends them to a CONTRACT.md
    (there is none in the project); the ``--json`` options say what the object holds."""
    top = engine.run("--help")
    assert top.returncode == 0, top.stderr
    commands = top.stdout[top.stdout.index("Commands:") :].split("\n")[1:]
    names = [line.split()[0] for line in commands if line.startswith("  ") and line.split()]
    assert {"run", "status", "verdict", "prune", "worker"} <= set(names)
    texts = {name: engine.run(name, "--help") for name in names}
    for name, done in texts.items():
        assert done.returncode == 0, f"{name}: {done.stderr}"
        assert "CONTRACT" not in done.stdout, f"steplog {name} --help points at CONTRACT.md"
    flat = {name: " ".join(done.stdout.split()) for name, done in texts.items()}
    assert (
        "One JSON object: run_id, agent, status, reason, result, steps_committed" in flat["status"]
    )
    assert "One JSON object: verdict (PASS, FAIL, UNTESTED or RUNNING)" in flat["verdict"]
