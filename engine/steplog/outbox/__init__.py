"""The outbox: a local HTTP service playing the outside world that must not receive things twice.

``POST /messages`` with an ``Idempotency-Key`` delivers a JSON message once; every request is an
attempt in the outbox's own SQLite file (never the engine's log). ``start_outbox`` runs it as a
child process, ``serve`` in this one; ``fetch_ledger`` and ``OutboxStore.ledger`` read it back.
"""

from __future__ import annotations

from steplog.outbox.client import fetch_ledger
from steplog.outbox.ledger import Attempt, Delivery, Ledger, Outcome, body_hash, canonical_json
from steplog.outbox.process import OutboxProcess, start_outbox
from steplog.outbox.server import serve
from steplog.outbox.store import OutboxStore

__all__ = [
    "Attempt",
    "Delivery",
    "Ledger",
    "OutboxProcess",
    "OutboxStore",
    "Outcome",
    "body_hash",
    "canonical_json",
    "fetch_ledger",
    "serve",
    "start_outbox",
]
