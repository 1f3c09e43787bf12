"""The idempotency ledger (the ``effect`` table), read: what an effect's key already did.

The engine writes the ledger inside its fenced transactions (``Journal.effect_started`` and
``effect_completed``); everything that *reads* it asks here: a resumed step (did this key
complete?), a fork (does the parent's unfinished step carry an effect on?), ``steplog retry``
(which effects may or may not have happened) and the verdict (which posts the log says were
delivered). ``forget_unconfirmed`` is the one write from outside an engine: ``retry --force``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from steplog.log.db import LogConnection
from steplog.log.events import EventKind


@dataclass
class EffectRecord:
    """One ledger row: the effect ``key``, whether it completed, and what it answered."""

    key: str
    status: str
    request_hash: str
    response: str | None
    idempotent: bool
    kind: str = ""
    target: str = ""


def load_effect(conn: LogConnection, key: str) -> EffectRecord | None:
    row = conn.execute(
        "SELECT key, status, request_hash, response, idempotent FROM effect WHERE key = ?", (key,)
    ).fetchone()
    return EffectRecord(row[0], row[1], row[2], row[3], bool(row[4])) if row else None


def carried_effect(
    conn: LogConnection, forked_from: tuple[str, int], seq: int, idx: int
) -> EffectRecord | None:
    """The ledger row a fork carries on for effect ``idx`` of its step ``seq``, if any.

    ``forked_from`` is the fork's ``(parent run, step it was forked at)``. A fork runs from that
    step on with keys of its own, since the steps its parent *finished* there are redone as new
    work; but a step the parent started and never committed (cancelled, stopped or killed in it,
    or failed there) is unfinished work whose effect may already have reached its target (a POST
    the far side answered after the engine stopped listening). That effect is carried on under
    the parent's key, so the target deduplicates it instead of receiving it twice.

    Walks up the forks: when the parent reached the step but holds no effect for it there (or
    did not get that far), it may itself have carried its own parent's row. Stops at a committed
    step: from there on the work was finished, and forking at or before it asks for it anew.
    The caller checks that the effect is the same (kind, target, request); else it is a new one.
    """
    parent: str | None
    parent, at = forked_from
    seen: set[str] = set()
    while parent is not None and seq >= at and parent not in seen:
        seen.add(parent)
        step = conn.execute(
            "SELECT status FROM step WHERE run_id = ? AND seq = ?", (parent, seq)
        ).fetchone()
        if step is not None and step[0] == "committed":
            return None
        row = conn.execute(
            "SELECT key, status, request_hash, response, idempotent, kind, target FROM effect "
            "WHERE run_id = ? AND seq = ? AND idx = ?",
            (parent, seq, idx),
        ).fetchone()
        if row is not None:
            return EffectRecord(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6])
        up = conn.execute(
            "SELECT parent_run_id, parent_step FROM run WHERE id = ?", (parent,)
        ).fetchone()
        if up is None or up[0] is None:
            return None
        parent, at = str(up[0]), int(up[1])
    return None


def released_effects(conn: LogConnection, run_id: str) -> set[str]:
    """Keys of unconfirmed non-idempotent effects that ``steplog retry --force`` told the run to
    send again (recorded with its ``retried`` events)."""
    keys: set[str] = set()
    for (data,) in conn.execute(
        "SELECT data FROM event WHERE run_id = ? AND kind = ?", (run_id, EventKind.RETRIED)
    ):
        keys.update(json.loads(data).get("resent") or ())
    return keys


def completed_post_keys(conn: LogConnection, run_id: str) -> set[str]:
    """Keys of the run's ``http_post`` effects that the log records as completed."""
    rows = conn.execute(
        "SELECT key FROM effect WHERE run_id = ? AND kind = 'http_post' AND status = 'completed'",
        (run_id,),
    )
    return {k for (k,) in rows}


def post_count(conn: LogConnection, run_id: str) -> int:
    """How many ``http_post`` effects the run started (completed or not)."""
    return int(
        conn.execute(
            "SELECT count(*) FROM effect WHERE run_id = ? AND kind = 'http_post'", (run_id,)
        ).fetchone()[0]
    )


def unconfirmed(conn: LogConnection, run_id: str) -> list[str]:
    """Keys of the run's non-idempotent effects that started and never completed: they may or
    may not have reached a target that cannot deduplicate."""
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT key FROM effect WHERE run_id = ? AND status = 'started' AND idempotent = 0",
            (run_id,),
        )
    ]


def forget_unconfirmed(conn: LogConnection, run_id: str) -> None:
    """Delete the run's ``unconfirmed`` ledger rows (``steplog retry --force``: they are sent
    again under the same keys), inside the caller's transaction."""
    conn.execute(
        "DELETE FROM effect WHERE run_id = ? AND status = 'started' AND idempotent = 0", (run_id,)
    )


EFFECT_DETAIL = (
    "key",
    "idx",
    "kind",
    "target",
    "idempotent",
    "status",
    "attempts",
    "response",
    "started_at",
    "completed_at",
)
"""What a reader is shown of a ledger row (``effects_of_step``), in this order."""


def effects_of_step(conn: LogConnection, run_id: str, seq: int) -> list[dict[str, Any]]:
    """The ledger rows of step ``seq`` of the run, in effect order, as ``EFFECT_DETAIL`` dicts
    (``idempotent`` a bool)."""
    rows = conn.execute(
        f"SELECT {', '.join(EFFECT_DETAIL)} FROM effect WHERE run_id = ? AND seq = ? ORDER BY idx",
        (run_id, seq),
    ).fetchall()
    out = [dict(zip(EFFECT_DETAIL, r, strict=True)) for r in rows]
    for effect in out:
        effect["idempotent"] = bool(effect["idempotent"])
    return out
