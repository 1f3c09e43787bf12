"""``naive``: the demo's task written the way agents usually are, to show what a kill does to it.

Same tickets, same offline model answers, same outputs as ``demo`` when nothing goes wrong. But
nothing is checkpointed: the ``run`` handle is used only for its workdir, outbox and params, so a
killed and relaunched run starts again from the first ticket. And nothing is idempotent: each POST
carries a fresh random ``Idempotency-Key`` (the outbox cannot tell a re-send from a new message),
rows are INSERTed into a table without a primary key, and a log file is appended to. After a kill
``steplog killtest naive`` therefore finds messages delivered twice, rows that appear twice and
lines appended twice: the failing half of the product's argument (``killtest demo`` passes).

It honours ``--pace`` as ``demo`` does (simulated thinking before each model call), and with
``--param trace=true`` it appends what it does to ``WORKDIR/trace.jsonl``
(``steplog.agents.trace``), numbered and named like the demo's steps: the monitor's compare mode
draws the naive lane from it. The trace is a debug log, never read back: after a kill the agent
still starts over.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import steplog
from steplog.agents.demo import load_tickets, parse_triage, prompt, render_reply, render_summary
from steplog.agents.trace import TRACE_FILE, Trace
from steplog.llm import OfflineModel
from steplog.policies import Budget


def _post(url: str, body: dict[str, Any], run_id: str) -> None:
    import httpx

    # The naive part: a new key per request, so a re-send after a crash is a new message. The
    # run id in front only says whose message it is (an outbox shared by several runs).
    response = httpx.post(
        f"{url}/messages",
        json=body,
        timeout=30.0,
        headers={"Idempotency-Key": f"{run_id}:naive-{uuid.uuid4()}"},
    )
    response.raise_for_status()


@steplog.agent(
    budget=Budget(max_steps=200, max_tokens=60_000, max_seconds=900, max_cost_usd=0.50),
    needs_outbox=True,
)
def naive(
    run: steplog.Run, tickets: int = 0, trace: bool = False, approve: bool = False
) -> dict[str, Any]:
    """Triage the shipped tickets with no checkpoints and no idempotency (do not copy this)."""
    model = OfflineModel()  # asked directly: no recorded decision to reuse after a crash
    workdir, outbox = run.workdir, str(run.outbox).rstrip("/")
    (workdir / "replies").mkdir(parents=True, exist_ok=True)
    steps = Trace(workdir / TRACE_FILE if trace else None, incarnation=run.incarnation)
    db = sqlite3.connect(workdir / "helpdesk.db")
    try:
        with steps.step("load tickets", "call"):
            todo = load_tickets(tickets)
        db.execute(
            "CREATE TABLE IF NOT EXISTS tickets (id, customer, subject, category, priority, status,"
            " reply_file)"
        )  # no primary key: a second INSERT is a second row
        rows: list[dict[str, str]] = []
        for t in todo:
            messages = prompt(t)
            most = model.estimate(messages, max_tokens=600)  # charged if a kill cuts the call short
            with steps.step(
                f"triage {t['id']}",
                "chat",
                reserve_tokens=most.tokens,
                reserve_cost_usd=most.cost_usd,
            ) as step:
                if run.pace:
                    time.sleep(run.pace)
                answer = model.complete(messages, max_tokens=600, idempotency_key=str(uuid.uuid4()))
                step.tokens, step.estimated = answer.usage.total, answer.usage.estimated
                step.cost_usd = answer.cost_usd
            triage = parse_triage(answer.text)
            with steps.step(f"write reply {t['id']}", "write_file"):
                (workdir / "replies" / f"{t['id']}.md").write_text(
                    render_reply(t, triage), encoding="utf-8"
                )
                with open(workdir / "replies.log", "a", encoding="utf-8") as log:
                    log.write(f"{t['id']} {triage['priority']} {triage['category']}\n")
            with steps.step(f"send reply {t['id']}", "http_post"):
                _post(
                    outbox,
                    {
                        "ticket_id": t["id"],
                        "to": t["customer"],
                        "subject": f"Re: {t['subject']}",
                        "category": triage["category"],
                        "priority": triage["priority"],
                        "text": triage["reply"],
                    },
                    run.id,
                )
            with steps.step(f"record {t['id']}", "merge"):
                db.execute(
                    "INSERT INTO tickets VALUES (?, ?, ?, ?, ?, 'answered', ?)",
                    (
                        t["id"],
                        t["customer"],
                        t["subject"],
                        triage["category"],
                        triage["priority"],
                        f"replies/{t['id']}.md",
                    ),
                )
                db.commit()
            rows.append(
                {
                    "id": t["id"],
                    "subject": t["subject"],
                    **{k: triage[k] for k in ("category", "priority")},
                }
            )
        summary = render_summary(rows)
        with steps.step("write summary", "write_file"):
            (workdir / "summary.md").write_text(summary, encoding="utf-8")
        result = {
            "answered": len(rows),
            "by_category": dict(sorted(Counter(r["category"] for r in rows).items())),
        }
        if approve:
            with steps.step("wait approve", "wait"):
                approved = ask_for_approval(workdir)
            if not approved:
                return {**result, "digest": "rejected"}
            result["digest"] = "approved"
        with steps.step("send digest", "http_post"):
            _post(
                outbox,
                {"digest": True, "tickets": [r["id"] for r in rows], "text": summary},
                run.id,
            )
    finally:
        db.close()
        steps.close()
    return result


APPROVAL_REQUEST = "approval-request.json"
APPROVAL = "approval.json"


def ask_for_approval(workdir: Path) -> bool:
    """The naive way to wait for a person: ask (``approval-request.json``, one line per time it
    asked), then poll for ``approval.json`` and consume it. Nothing remembers the answer: killed
    and restarted, the agent asks again, and the person must answer again."""
    import json

    with open(workdir / APPROVAL_REQUEST, "a", encoding="utf-8") as asked:
        asked.write(json.dumps({"asked_at": time.time()}) + "\n")
    answer = workdir / APPROVAL
    while not answer.exists():
        time.sleep(0.05)
    decision = json.loads(answer.read_text(encoding="utf-8") or "null")
    answer.unlink()
    return isinstance(decision, dict) and decision.get("approved") is True
