"""A small shop back-office agent written the steplog way, and the same one written carelessly.

``shop`` prices each order in a checkpointed step, writes a receipt, posts a confirmation to the
outbox and merges the order into ``shop.db``: every effect is one ``run.*`` step. ``careless``
does the same work with its confirmations posted outside any step, under a fresh random key, and
a ledger file appended to: fine until it is killed.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

import steplog

PRICES = {"tea": 4, "mug": 9, "kettle": 35}


def price(order: int) -> dict[str, Any]:
    item = sorted(PRICES)[order % len(PRICES)]
    qty = 1 + order % 3
    return {"order_id": f"O-{order:03d}", "item": item, "qty": qty, "total": PRICES[item] * qty}


@steplog.agent(needs_outbox=True)
def shop(run: steplog.Run, orders: int = 6) -> dict[str, Any]:
    total = 0
    for n in range(1, orders + 1):
        o = run.step(f"price {n}", price, n)
        run.write_file(
            f"receipts/{o['order_id']}.txt", f"{o['qty']} x {o['item']} = {o['total']}\n"
        )
        run.http_post(
            f"{run.outbox}/messages",
            {"order_id": o["order_id"], "total": o["total"]},
            name=f"confirm {o['order_id']}",
        )
        run.merge(
            "shop.db",
            "orders",
            key={"id": o["order_id"]},
            values={"item": o["item"], "total": o["total"]},
        )
        total += o["total"]
    return {"orders": orders, "total": total}


@steplog.agent(needs_outbox=True)
def careless(run: steplog.Run, orders: int = 6) -> dict[str, Any]:
    total = 0
    for n in range(1, orders + 1):
        o = run.step(f"price {n}", price, n)
        with open(
            run.workdir / "ledger.txt", "a", encoding="utf-8"
        ) as ledger:  # appended again on resume
            ledger.write(f"{o['order_id']} {o['total']}\n")
        httpx.post(
            f"{run.outbox}/messages",
            json={"order_id": o["order_id"], "total": o["total"]},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        ).raise_for_status()
        total += o["total"]
    return {"orders": orders, "total": total}
