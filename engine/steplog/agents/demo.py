"""``demo``: support-ticket triage, the three kinds of idempotent effect in one visible task.

For each shipped ticket, in order: the model classifies it and drafts a reply (the recorded
decision); the reply is written to ``replies/<id>.md`` (atomic, stable name); it is POSTed to the
outbox with the step's idempotency key; the ticket's row is merged into ``helpdesk.db``. Then
``summary.md`` and one digest message; with ``--param approve=true`` the digest first waits for a
person's approval (the signal ``approve`` with ``{"approved": true|false}``). With the offline model
every output is a deterministic function of the data, so an interrupted run and an uninterrupted one
are byte-identical.
"""

from __future__ import annotations

import json
from collections import Counter
from importlib.resources import files
from typing import Any

import steplog
from steplog.llm.tickets import CATEGORIES, PRIORITIES
from steplog.policies import Budget

SYSTEM = (
    "You triage support tickets for Ledgerly, an invoicing app. Read the ticket and answer with "
    "one JSON object with the keys category (billing, bug, account, feature_request, privacy, "
    "outage, praise or other), priority (urgent, high, normal or low) and reply (a courteous reply "
    "draft of 3-6 sentences that addresses the customer by name)."
)


def load_tickets(limit: int = 0) -> list[dict[str, str]]:
    """The shipped tickets in their fixed order; ``limit`` > 0 keeps the first ``limit``."""
    tickets: list[dict[str, str]] = json.loads(
        files("steplog").joinpath("data/tickets.json").read_text("utf-8")
    )
    return tickets[:limit] if limit > 0 else tickets


def prompt(ticket: dict[str, str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": f"Ticket {ticket['id']} from {ticket['customer']}\n"
            f"Subject: {ticket['subject']}\n\n{ticket['body']}\n\n"
            "Answer with the JSON object only.",
        },
    ]


def parse_triage(text: str) -> dict[str, str]:
    """The model's JSON answer, tolerating prose around it; a reply without JSON is kept as text."""
    start, end = text.find("{"), text.rfind("}")
    data: dict[str, Any] = {}
    if start != -1 and end > start:
        try:
            loaded = json.loads(text[start : end + 1])
            data = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            data = {}
    category = str(data.get("category", "other")).strip().lower().replace(" ", "_")
    priority = str(data.get("priority", "normal")).strip().lower()
    return {
        "category": category if category in CATEGORIES else "other",
        "priority": priority if priority in PRIORITIES else "normal",
        "reply": str(data.get("reply") or text).strip(),
    }


def render_reply(ticket: dict[str, str], triage: dict[str, str]) -> str:
    return (
        f"# Re: {ticket['subject']}\n\n"
        f"- Ticket: {ticket['id']}\n- Customer: {ticket['customer']}\n"
        f"- Category: {triage['category']}\n- Priority: {triage['priority']}\n\n"
        f"{triage['reply']}\n"
    )


def render_summary(rows: list[dict[str, str]]) -> str:
    by_cat = Counter(r["category"] for r in rows)
    by_pri = Counter(r["priority"] for r in rows)
    lines = ["# Triage summary", "", f"{len(rows)} tickets answered.", "", "## By category", ""]
    lines += [f"- {c}: {by_cat[c]}" for c in CATEGORIES if by_cat[c]]
    lines += ["", "## By priority", ""]
    lines += [f"- {p}: {by_pri[p]}" for p in PRIORITIES if by_pri[p]]
    lines += ["", "## Replies", ""]
    lines += [
        f"- [{r['id']}](replies/{r['id']}.md) {r['priority']:<6} {r['category']:<15} {r['subject']}"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


@steplog.agent(
    budget=Budget(max_steps=200, max_tokens=60_000, max_seconds=900, max_cost_usd=0.50),
    needs_outbox=True,
)
def demo(run: steplog.Run, tickets: int = 0, approve: bool = False) -> dict[str, Any]:
    """Triage the shipped support tickets: classify, reply, send, record; then summarise."""
    todo = run.step("load tickets", load_tickets, tickets)
    rows: list[dict[str, str]] = []
    for t in todo:
        answer = run.chat(prompt(t), name=f"triage {t['id']}", max_tokens=600)
        triage = parse_triage(answer.text)
        run.write_file(
            f"replies/{t['id']}.md", render_reply(t, triage), name=f"write reply {t['id']}"
        )
        run.http_post(
            f"{run.outbox}/messages",
            {
                "ticket_id": t["id"],
                "to": t["customer"],
                "subject": f"Re: {t['subject']}",
                "category": triage["category"],
                "priority": triage["priority"],
                "text": triage["reply"],
            },
            name=f"send reply {t['id']}",
        )
        run.merge(
            "helpdesk.db",
            "tickets",
            key={"id": t["id"]},
            values={
                "customer": t["customer"],
                "subject": t["subject"],
                "category": triage["category"],
                "priority": triage["priority"],
                "status": "answered",
                "reply_file": f"replies/{t['id']}.md",
            },
            name=f"record {t['id']}",
        )
        rows.append(
            {
                "id": t["id"],
                "subject": t["subject"],
                **{k: triage[k] for k in ("category", "priority")},
            }
        )
    summary = render_summary(rows)
    run.write_file("summary.md", summary, name="write summary")
    result: dict[str, Any] = {
        "answered": len(rows),
        "by_category": dict(sorted(Counter(r["category"] for r in rows).items())),
    }
    if approve:
        decision = run.wait_for(
            "approve"
        )  # a person reads summary.md, then: steplog signal RUN approve
        if not (isinstance(decision, dict) and decision.get("approved") is True):
            return {**result, "digest": "rejected"}
        result["digest"] = "approved"
    run.http_post(
        f"{run.outbox}/messages",
        {
            "digest": True,
            "tickets": [r["id"] for r in rows],
            "text": summary,
        },
        name="send digest",
    )
    return result
