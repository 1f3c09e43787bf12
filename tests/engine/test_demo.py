"""The demo agent end to end with the outbox, uninterrupted and under a storm of kills."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Engine, kill_group
from steplog.agents.demo import load_tickets
from steplog.outbox import OutboxProcess, start_outbox

TICKETS = load_tickets()


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[OutboxProcess]:
    with start_outbox(tmp_path / "outbox.db") as ob:
        yield ob


def outputs(workdir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(workdir)): p.read_bytes()
            for p in sorted(workdir.rglob("*")) if p.is_file() and p.suffix == ".md"}


def helpdesk(workdir: Path) -> list[tuple[str, ...]]:
    conn = sqlite3.connect(workdir / "helpdesk.db")
    try:
        return conn.execute("SELECT id, category, priority, status FROM tickets ORDER BY rowid").fetchall()
    finally:
        conn.close()


def demo_args(engine: Engine, run_id: str, outbox: OutboxProcess, *extra: str) -> list[str]:
    return ["run", "demo", "--run-id", run_id, "--db", str(engine.db), "--outbox", outbox.url, *extra]


def test_the_demo_answers_every_ticket_once(engine: Engine, outbox: OutboxProcess) -> None:
    done = engine.run(*demo_args(engine, "d", outbox))
    assert done.returncode == 0, done.stderr
    status = engine.status("d")
    assert status["steps_committed"] == 1 + 4 * len(TICKETS) + 2
    workdir = Path(status["workdir"])
    files = outputs(workdir)
    assert sorted(files) == sorted([f"replies/{t['id']}.md" for t in TICKETS] + ["summary.md"])
    assert f"{len(TICKETS)} tickets answered." in files["summary.md"].decode()
    assert [r[0] for r in helpdesk(workdir)] == [t["id"] for t in TICKETS]
    assert {r[3] for r in helpdesk(workdir)} == {"answered"}
    ledger = outbox.ledger()
    assert [d.body.get("ticket_id") for d in ledger.deliveries] == [t["id"] for t in TICKETS] + [None]
    assert ledger.deliveries[-1].body["digest"] is True
    assert len(ledger.attempts) == len(ledger.deliveries) and not ledger.duplicates()
    assert status["budget"]["tokens"]["estimated"] == status["budget"]["tokens"]["used"] > 0


def test_the_demo_killed_again_and_again_is_byte_identical_to_an_uninterrupted_run(
        engine: Engine, outbox: OutboxProcess, tmp_path: Path) -> None:
    with start_outbox(tmp_path / "ref-outbox.db") as ref_outbox:
        ref = engine.run(*demo_args(engine, "ref", ref_outbox))
        assert ref.returncode == 0, ref.stderr
        ref_bodies = sorted(json.dumps(d.body, sort_keys=True) for d in ref_outbox.ledger().deliveries)
    ref_dir = Path(engine.status("ref")["workdir"])

    rng = random.Random(1130)
    args = demo_args(engine, "storm", outbox, "--pace", "0.25")
    kills = 0
    while kills < 22:
        proc = engine.start(*args)
        try:
            proc.wait(timeout=rng.uniform(0.05, 0.6))
            pytest.fail(f"the demo finished after only {kills} kills; give it more pace")
        except subprocess.TimeoutExpired:
            kill_group(proc)
            kills += 1
    final = engine.run(*args)
    assert final.returncode == 0, final.stderr

    status = engine.status("storm")
    workdir = Path(status["workdir"])
    assert outputs(workdir) == outputs(ref_dir)  # same files, byte for byte
    assert helpdesk(workdir) == helpdesk(ref_dir)  # each row once
    ledger = outbox.ledger()
    assert sorted(json.dumps(d.body, sort_keys=True) for d in ledger.deliveries) == ref_bodies
    assert not ledger.duplicates()
    assert len(ledger.attempts) - len(ledger.deliveries) <= kills
    assert status["step_executions"] - status["steps_committed"] <= kills
