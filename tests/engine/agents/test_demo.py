"""The demo agent end to end with the outbox, uninterrupted and under a storm of kills."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.engine import Engine, storm
from steplog.agents.demo import load_tickets
from steplog.outbox import OutboxProcess, start_outbox

TICKETS = load_tickets()
KILLS = 22


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[OutboxProcess]:
    with start_outbox(tmp_path / "outbox.db") as ob:
        yield ob


def outputs(workdir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workdir)): p.read_bytes()
        for p in sorted(workdir.rglob("*"))
        if p.is_file() and p.suffix == ".md"
    }


def helpdesk(workdir: Path) -> list[tuple[str, ...]]:
    conn = sqlite3.connect(workdir / "helpdesk.db")
    try:
        return conn.execute(
            "SELECT id, category, priority, status FROM tickets ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()


def demo_args(engine: Engine, run_id: str, outbox: OutboxProcess, *extra: str) -> list[str]:
    return [
        "run",
        "demo",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--outbox",
        outbox.url,
        *extra,
    ]


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
    assert [d.body.get("ticket_id") for d in ledger.deliveries] == [t["id"] for t in TICKETS] + [
        None
    ]
    assert ledger.deliveries[-1].body["digest"] is True
    assert len(ledger.attempts) == len(ledger.deliveries) and not ledger.duplicates()
    assert status["budget"]["tokens"]["estimated"] == status["budget"]["tokens"]["used"] > 0


def test_the_demo_killed_again_and_again_is_byte_identical_to_an_uninterrupted_run(
    engine: Engine, tmp_path: Path
) -> None:
    with start_outbox(tmp_path / "ref-outbox.db") as ref_outbox:
        ref = engine.run(*demo_args(engine, "ref", ref_outbox))
        assert ref.returncode == 0, ref.stderr
        ref_bodies = sorted(
            json.dumps(d.body, sort_keys=True) for d in ref_outbox.ledger().deliveries
        )
    ref_dir = Path(engine.status("ref")["workdir"])

    rng = random.Random(1130)
    total = 0
    for attempt in range(10):  # should a run finish before enough kills, storm a fresh one
        with start_outbox(tmp_path / f"outbox{attempt}.db") as outbox:
            run_id = f"storm{attempt}"
            result = storm(
                engine,
                demo_args(engine, run_id, outbox, "--pace", "0.1"),
                rng,
                KILLS - total,
                0.05,
                0.6,
            )
            assert result.exit_code == 0
            total += result.kills
            ledger = outbox.ledger()
        status = engine.status(run_id)
        workdir = Path(status["workdir"])
        assert outputs(workdir) == outputs(ref_dir)  # same files, byte for byte
        assert helpdesk(workdir) == helpdesk(ref_dir)  # each row once
        assert sorted(json.dumps(d.body, sort_keys=True) for d in ledger.deliveries) == ref_bodies
        assert not ledger.duplicates()
        assert len(ledger.attempts) - len(ledger.deliveries) <= result.kills
        assert status["step_executions"] - status["steps_committed"] <= result.kills
        if total >= KILLS:
            break
    assert total >= KILLS


@pytest.mark.parametrize(
    ("decision", "digests"), [('{"approved": true}', 1), ('{"approved": false}', 0)]
)
def test_the_demo_with_approve_waits_for_a_person_before_the_digest(
    engine: Engine, outbox: OutboxProcess, decision: str, digests: int
) -> None:
    args = demo_args(engine, "ask", outbox, "--param", "tickets=2", "--param", "approve=true")
    waiting = engine.run(*args, "--exit-when-waiting")
    assert waiting.returncode == 6, waiting.stderr
    assert engine.status("ask")["waiting_for"] == "approve"
    assert [d.body.get("digest") for d in outbox.ledger().deliveries] == [None, None], (
        "no digest before approval"
    )

    assert (
        engine.run(
            "signal", "ask", "approve", "--db", str(engine.db), "--data", decision
        ).returncode
        == 0
    )
    done = engine.run(*args)
    assert done.returncode == 0, done.stderr
    assert sum(1 for d in outbox.ledger().deliveries if d.body.get("digest")) == digests
    assert engine.status("ask")["result"]["digest"] == ("approved" if digests else "rejected")
