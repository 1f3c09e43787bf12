"""``demo_async``: the demo's task as an ``async def`` agent whose tickets are triaged in parallel.

The same tickets, model answers, files, rows and message bodies as ``demo``, byte for byte; only
the order of the work differs. It goes a phase at a time: every ticket's triage (model calls,
``parallel`` at once), then the replies written, sent and recorded (each phase in parallel),
then the summary and the digest. Each phase's steps are called by the agent itself before any
is awaited, so their sequence numbers are fixed however the calls finish, and a replay after a
kill numbers them the same way.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

import steplog
from steplog.agents.demo import load_tickets, parse_triage, prompt, render_reply, render_summary
from steplog.policies import Budget
from steplog.runtime.arun import AsyncRun

T = TypeVar("T")


async def bounded(calls: Iterable[Awaitable[T]], parallel: int) -> list[T]:
    """Await ``calls`` (steps already numbered) with at most ``parallel`` in flight."""
    limit = asyncio.Semaphore(max(1, parallel))

    async def one(call: Awaitable[T]) -> T:
        async with limit:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))


@steplog.agent(
    budget=Budget(max_steps=200, max_tokens=60_000, max_seconds=900, max_cost_usd=0.50),
    needs_outbox=True,
)
async def demo_async(
    run: AsyncRun, tickets: int = 0, parallel: int = 4, approve: bool = False
) -> dict[str, Any]:
    """Triage the shipped support tickets, ``parallel`` at a time: classify, reply, send, record."""
    todo = await run.step("load tickets", load_tickets, tickets)
    answers = await bounded(
        [run.chat(prompt(t), name=f"triage {t['id']}", max_tokens=600) for t in todo], parallel
    )
    triaged = [parse_triage(a.text) for a in answers]
    await bounded(
        [
            run.write_file(
                f"replies/{t['id']}.md", render_reply(t, tr), name=f"write reply {t['id']}"
            )
            for t, tr in zip(todo, triaged, strict=True)
        ],
        parallel,
    )
    await bounded(
        [
            run.http_post(
                f"{run.outbox}/messages",
                {
                    "ticket_id": t["id"],
                    "to": t["customer"],
                    "subject": f"Re: {t['subject']}",
                    "category": tr["category"],
                    "priority": tr["priority"],
                    "text": tr["reply"],
                },
                name=f"send reply {t['id']}",
            )
            for t, tr in zip(todo, triaged, strict=True)
        ],
        parallel,
    )
    await bounded(
        [
            run.merge(
                "helpdesk.db",
                "tickets",
                key={"id": t["id"]},
                values={
                    "customer": t["customer"],
                    "subject": t["subject"],
                    "category": tr["category"],
                    "priority": tr["priority"],
                    "status": "answered",
                    "reply_file": f"replies/{t['id']}.md",
                },
                name=f"record {t['id']}",
            )
            for t, tr in zip(todo, triaged, strict=True)
        ],
        1,
    )  # one writer for helpdesk.db: rows in ticket order
    rows = [
        {"id": t["id"], "subject": t["subject"], **{k: tr[k] for k in ("category", "priority")}}
        for t, tr in zip(todo, triaged, strict=True)
    ]
    summary = render_summary(rows)
    await run.write_file("summary.md", summary, name="write summary")
    result: dict[str, Any] = {
        "answered": len(rows),
        "by_category": dict(sorted(Counter(r["category"] for r in rows).items())),
    }
    if approve:
        decision = await run.wait_for("approve")
        if not (isinstance(decision, dict) and decision.get("approved") is True):
            return {**result, "digest": "rejected"}
        result["digest"] = "approved"
    await run.http_post(
        f"{run.outbox}/messages",
        {
            "digest": True,
            "tickets": [r["id"] for r in rows],
            "text": summary,
        },
        name="send digest",
    )
    return result
