"""Agent code that changes under a run in progress (``docs/versions.md``): a run killed with
SIGKILL inside step 5, its agent's file edited, then resumed by a real ``steplog run``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import steplog
from helpers.engine import Engine, kill_group

AGENT = """\
import os, time
import steplog


def send(i, to):
    if i == 5 and os.environ.get("HOLD"):
        open(os.environ["HOLD"], "w").close()
        time.sleep(60)
    with open(os.environ["WITNESS"], "a") as f:
        f.write(f"{{i}}\\n")
    return i


@steplog.agent
def chain(run):
    for i in range(1, 8):
{body}
    return "sent"
"""

V1 = '        run.step(f"send {i}", send, i, to="a@x")'
CHANGED = '        run.step(f"send {i}", send, i, to="b@x" if i == 3 else "a@x")'
PATCHED = """\
        if i == 3 and run.patched("cc-boss"):
            run.step("cc boss", send, 33, to="boss@x")
        run.step(f"send {i}", send, i, to="a@x")"""


def write_agent(path: Path, body: str) -> str:
    path.write_text(AGENT.format(body=body))
    return f"{path}:chain"


def killed_in_step_5(engine: Engine, spec: str, tmp_path: Path) -> dict[str, str]:
    """Start run ``r`` and SIGKILL its process group while step 5's body runs."""
    env = {"WITNESS": str(tmp_path / "witness"), "HOLD": str(tmp_path / "hold")}
    proc = engine.start("run", spec, "--run-id", "r", "--db", str(engine.db), env=env)
    deadline = time.monotonic() + 30
    while not (tmp_path / "hold").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "never reached step 5"
        time.sleep(0.02)
    kill_group(proc)
    return {"WITNESS": env["WITNESS"]}


def witnessed(tmp_path: Path) -> list[int]:
    path = tmp_path / "witness"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


RUN_COLUMNS = (
    "status, reason, version, incarnation, used_steps, step_executions, used_tokens, lease_pid, "
    "lease_expires, updated_at, finished_at, worker_pid"
)


def snapshot(engine: Engine) -> dict[str, Any]:
    """The run's row (every column but ``blocked`` that a resume would touch), its steps,
    effects and events."""
    return {
        "run": engine.query(f"SELECT {RUN_COLUMNS} FROM run WHERE id = 'r'"),
        "steps": engine.query("SELECT * FROM step WHERE run_id = 'r' ORDER BY seq"),
        "effects": engine.query("SELECT * FROM effect WHERE run_id = 'r' ORDER BY key"),
        "events": engine.query("SELECT id, kind, data FROM event WHERE run_id = 'r' ORDER BY id"),
    }


@pytest.mark.backends("sqlite", "postgres")
def test_code_whose_step_3_changed_is_refused_and_the_log_keeps_all_but_the_refusal(
    engine: Engine, tmp_path: Path
) -> None:
    agent = tmp_path / "chain.py"
    spec = write_agent(agent, V1)
    env = killed_in_step_5(engine, spec, tmp_path)
    assert witnessed(tmp_path) == [1, 2, 3, 4]
    before = snapshot(engine)
    write_agent(agent, CHANGED)

    refused = engine.run("run", spec, "--run-id", "r", "--db", str(engine.db), env=env)

    assert refused.returncode == 6
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("steplog: step 3: recorded `send 3(…)` under version ")
    assert "the code asks `send 3(3, to='b@x')`" in lines[0]
    assert "fork it from step 2 (`steplog fork r --at-step 3`)" in lines[0]
    assert witnessed(tmp_path) == [1, 2, 3, 4], "no step body ran"
    after = snapshot(engine)
    new_events = after["events"][len(before["events"]) :]
    assert [kind for _, kind, _ in new_events] == ["resume_refused"]
    assert {**after, "events": after["events"][: len(before["events"])]} == before
    status = engine.status("r")
    assert status["status"] == "running"
    assert status["blocked"]["at_step"] == 3
    assert status["blocked"]["reason"] == lines[0].removeprefix("steplog: ")

    write_agent(agent, V1)  # compatible code again: the run carries on, the refusal cleared
    resumed = engine.run("run", spec, "--run-id", "r", "--db", str(engine.db), env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert witnessed(tmp_path) == [1, 2, 3, 4, 5, 6, 7]
    assert "blocked" not in engine.status("r")


def test_a_patch_lets_new_code_resume_an_old_run_on_its_old_branch(
    engine: Engine, tmp_path: Path
) -> None:
    agent = tmp_path / "chain.py"
    spec = write_agent(agent, V1)
    env = killed_in_step_5(engine, spec, tmp_path)
    old_version = engine.status("r")["version"]
    write_agent(agent, PATCHED)

    resumed = engine.run("run", spec, "--run-id", "r", "--db", str(engine.db), env=env)

    assert resumed.returncode == 0, resumed.stderr
    assert witnessed(tmp_path) == [1, 2, 3, 4, 5, 6, 7], "each step once, no cc on the old run"
    status = engine.status("r")
    assert status["step_executions"] == status["steps_committed"] + 1  # step 5, cut by the kill
    assert status["version"] != old_version
    changed = engine.query("SELECT data FROM event WHERE run_id = 'r' AND kind = 'version_changed'")
    assert [json.loads(d) for (d,) in changed] == [{"old": old_version, "new": status["version"]}]
    # A new run on the patched code takes the new branch, and replays it as it was recorded.
    fresh = engine.run("run", spec, "--run-id", "n", "--db", str(engine.db), env=env)
    assert fresh.returncode == 0, fresh.stderr
    steps = engine.query("SELECT seq, name, kind FROM step WHERE run_id = 'n' ORDER BY seq")
    assert steps[2:5] == [
        (3, "patch cc-boss", "patch"),
        (4, "cc boss", "call"),
        (5, "send 3", "call"),
    ]
    listed = engine.run("runs", "--db", str(engine.db), "--patch", "cc-boss", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []  # both finished: the old branch can go


def test_from_python_a_refused_resume_raises_blocked(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    calls: list[str] = []

    def first(run: steplog.Run) -> None:
        run.step("greet", calls.append, "hello")
        raise KeyboardInterrupt

    def second(run: steplog.Run) -> None:
        run.step("greet", calls.append, "bonjour")

    with pytest.raises(KeyboardInterrupt):
        steplog.agent(version="1")(first).run("p", db=db)
    with pytest.raises(steplog.Blocked) as info:
        steplog.agent(version="2")(second).run("p", db=db)
    assert info.value.at_step == 1
    assert "recorded `greet(…)` under version 1" in str(info.value)
    assert calls == ["hello"]


def test_arguments_json_cannot_carry_are_hashed_by_a_stable_stand_in() -> None:
    from steplog.runtime.versions import call_hash

    class Opaque:
        pass

    assert call_hash("s", "call", [Opaque()]) == call_hash("s", "call", [Opaque()])
    assert call_hash("s", "call", [{1, 2}]) == call_hash("s", "call", [{2, 1}])
    assert call_hash("s", "call", [1]) != call_hash("s", "call", [2])
    assert call_hash("s", "call", {"b": 1, "a": 2}) == call_hash("s", "call", {"a": 2, "b": 1})
