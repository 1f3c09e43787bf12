"""The README's agent example runs as written (and so does resuming it)."""

from __future__ import annotations

import re
import shlex
import socket
import sqlite3
import subprocess
from pathlib import Path

from conftest import Engine
from steplog.outbox import start_outbox

README = Path(__file__).resolve().parents[2] / "README.md"


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


def run_shell_block(
    engine: Engine, tmp_path: Path, block: str
) -> list[subprocess.CompletedProcess[str]]:
    """Run a README shell block line by line in ``tmp_path``: its first line (``steplog outbox
    --port 8000 &``) in the background, on a free port if 8000 is taken; the outputs of the rest."""
    lines = [ln for ln in block.splitlines() if ln.strip()]
    port = "8000"
    with (
        socket.socket() as probe
    ):  # port 8000 may be taken on this machine: the same commands on a free one
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                port = str(free.getsockname()[1])
    env = {**engine.env, "STEPLOG_DB": str(engine.db)}
    assert lines[0].startswith("steplog outbox") and lines[0].endswith("&")
    background = subprocess.Popen(
        engine.argv(*shlex.split(lines[0].rstrip("&").replace("8000", port))[1:]),
        cwd=tmp_path,
        env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert background.stdout is not None
        said = background.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in said, said  # it prints its URL
        outputs = []
        for line in lines[1:]:
            argv = shlex.split(line.replace("8000", port))
            assert argv[0] == "steplog"
            outputs.append(
                subprocess.run(
                    engine.argv(*argv[1:]),
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            )
        return outputs
    finally:
        background.terminate()
        background.wait(timeout=10)
        for pipe in (background.stdout, background.stderr):
            if pipe:
                pipe.close()


def run_in_bash(engine: Engine, tmp_path: Path, block: str) -> tuple[int, str, str]:
    """Run a README shell block as printed, in ``bash``, in ``tmp_path``: ``steplog`` is this
    checkout's (a shim on ``PATH``), port 8000 a free one if 8000 is taken. Whatever it leaves
    running in the background (the outbox) is stopped afterwards: its process group is ended."""
    import os
    import signal
    import sys

    port = "8000"
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                port = str(free.getsockname()[1])
    shim = tmp_path / "bin" / "steplog"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m steplog "$@"\n')
    shim.chmod(0o755)
    env = {
        **engine.env,
        "STEPLOG_DB": str(engine.db),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "PATH": f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: the outbox keeps a pipe open
        shell = subprocess.Popen(
            ["bash", "-c", block.replace("8000", port)],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = shell.wait(timeout=120)
        finally:
            try:
                os.killpg(shell.pid, signal.SIGTERM)  # the outbox it started in the background
            except ProcessLookupError:
                pass
    return code, out.read_text(), err.read_text()


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
    passed = "PASS  first-try (outcome succeeded): 1 kill(s), nothing duplicated, at most one step redone per kill"
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
