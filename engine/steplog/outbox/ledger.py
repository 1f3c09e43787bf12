"""What the outbox holds, as typed values: deliveries, attempts, and the duplicate check.

The same ``Ledger`` comes from the HTTP listing (``client.fetch_ledger``) and straight from the
file (``OutboxStore.ledger``); ``to_json``/``from_json`` are the one definition of the listing's
shape, so the server and its readers cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

JSONObject = dict[str, Any]

Outcome = Literal["delivered", "replayed", "conflict", "in_flight", "rejected", "error"]
"""How the outbox answered one ``POST /messages``.

``delivered`` 201 (first delivery), ``replayed`` 200 (same key and body again), ``conflict`` 422
(same key, different body), ``in_flight`` 409 (the first request with that key is still being
processed), ``rejected`` 4xx (no key, body not a JSON object, too large), ``error`` 500 (the outbox
itself failed; nothing was delivered and the key is free again).
"""


def canonical_json(body: Any) -> str:
    """One spelling per JSON value: sorted keys, no spaces, NaN refused.

    Two bodies are "the same message" exactly when their canonical forms are equal, whatever the
    key order or whitespace the sender used.
    """
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def body_hash(body: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``body``."""
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Delivery:
    """A message the outside world received: exactly one per idempotency key."""

    id: int
    key: str
    body: JSONObject
    ts: float
    """Unix time of the delivery."""


@dataclass(frozen=True)
class Attempt:
    """One ``POST /messages`` request, whatever its answer."""

    id: int
    key: str | None
    """``None`` when the request carried no ``Idempotency-Key``."""
    status: int
    outcome: Outcome
    ts: float
    body_hash: str | None = None
    """Canonical hash of the body; ``None`` when the body was not a JSON object."""


@dataclass(frozen=True)
class Ledger:
    """Every delivery and every attempt, oldest first."""

    deliveries: tuple[Delivery, ...] = ()
    attempts: tuple[Attempt, ...] = ()

    def duplicates(self) -> list[tuple[Delivery, ...]]:
        """Groups of deliveries of one logical message: equal bodies under different keys.

        The outbox never delivers one key twice, so a group here means the sender made up a new
        key for a message it had already sent (a naive agent with random keys, after a crash).
        Groups are ordered by their first delivery; each group by id.
        """
        groups: dict[str, list[Delivery]] = {}
        for delivery in self.deliveries:
            groups.setdefault(canonical_json(delivery.body), []).append(delivery)
        found = [
            tuple(sorted(group, key=lambda d: d.id)) for group in groups.values() if len(group) > 1
        ]
        return sorted(found, key=lambda group: group[0].id)

    def for_run(self, run_id: str) -> Ledger:
        """Only what run ``run_id`` sent: its keys are ``RUN_ID:SEQ[.IDX]``
        (``steplog.runtime.effect_key``).

        Several runs may share one outbox (every demo in a data directory does); a run's verdict
        must count its own deliveries only.
        """
        prefix = f"{run_id}:"
        return Ledger(
            deliveries=tuple(d for d in self.deliveries if d.key.startswith(prefix)),
            attempts=tuple(
                a for a in self.attempts if a.key is not None and a.key.startswith(prefix)
            ),
        )

    def to_json(self) -> JSONObject:
        """The body of ``GET /messages``."""
        return {
            "deliveries": [
                {"id": d.id, "key": d.key, "body": d.body, "ts": d.ts} for d in self.deliveries
            ],
            "attempts": [
                {
                    "id": a.id,
                    "key": a.key,
                    "status": a.status,
                    "outcome": a.outcome,
                    "ts": a.ts,
                    "body_hash": a.body_hash,
                }
                for a in self.attempts
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger:
        """Parse the body of ``GET /messages``."""
        deliveries = tuple(
            Delivery(id=int(d["id"]), key=str(d["key"]), body=dict(d["body"]), ts=float(d["ts"]))
            for d in data["deliveries"]
        )
        attempts = tuple(
            Attempt(
                id=int(a["id"]),
                key=None if a["key"] is None else str(a["key"]),
                status=int(a["status"]),
                outcome=cast(Outcome, str(a["outcome"])),
                ts=float(a["ts"]),
                body_hash=a.get("body_hash"),
            )
            for a in data["attempts"]
        )
        return cls(deliveries=deliveries, attempts=attempts)
