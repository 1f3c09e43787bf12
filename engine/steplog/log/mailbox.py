"""The rows of messages between runs and of the events runs publish (issue 33).

- **message** (``steplog.send`` / ``run.recv``): stored by a sender inside the run's lock
  (``db.run_locked``), so the ids of one run's messages are given in commit order; consumed by one
  recv step in the transaction that records the step (``Journal.commit_wait``), oldest first per
  topic. The same ``key`` for the same run is one message (a retried send is harmless).
- **run_event** (``run.set_event`` / ``steplog.get_event``): the latest value of each key of a
  run, upserted by the step that set it, in that step's transaction (an engine's write:
  ``Journal.commit_step``); read here.

``steplog.control.mail`` decides (is the run there, is it finished); these functions only read and
write, inside the caller's transaction where they write.
"""

from __future__ import annotations

from steplog.log.db import LogConnection, announce_claimable
from steplog.log.events import EventKind
from steplog.log.journal import append_event


def message_with_key(conn: LogConnection, run_id: str, key: str) -> int | None:
    """The id of the message sent to the run with idempotency ``key`` before, if any."""
    row = conn.execute(
        "SELECT id FROM message WHERE run_id = ? AND key = ?", (run_id, key)
    ).fetchone()
    return int(row[0]) if row is not None else None


def store_message(
    conn: LogConnection,
    run_id: str,
    incarnation: int,
    topic: str,
    data_json: str,
    key: str | None,
    now: float,
    *,
    wakes: bool,
) -> int:
    """Store a message on ``topic`` for the run's next ``recv(topic)``, with its event; its id.
    ``wakes``: the run waits on that topic with no engine: announce it claimable (workers)."""
    message_id = int(
        conn.execute(
            "INSERT INTO message (run_id, topic, data, key, sent_at) VALUES (?, ?, ?, ?, ?) "
            "RETURNING id",
            (run_id, topic, data_json, key, now),
        ).fetchone()[0]
    )
    append_event(
        conn,
        run_id,
        incarnation,
        EventKind.MESSAGE_SENT,
        {
            "topic": topic,
            "message_id": message_id,
            "bytes": len(data_json.encode()),
            **({"key": key} if key is not None else {}),
        },
        ts=now,
    )
    if wakes:
        announce_claimable(conn, run_id)
    return message_id


def pending_message(conn: LogConnection, run_id: str, topic: str) -> tuple[int, str] | None:
    """The oldest unconsumed message on ``topic`` for the run: ``(id, data JSON)``."""
    row = conn.execute(
        "SELECT id, data FROM message WHERE run_id = ? AND topic = ? AND consumed_seq IS NULL "
        "ORDER BY id LIMIT 1",
        (run_id, topic),
    ).fetchone()
    return (int(row[0]), str(row[1])) if row else None


def read_event(conn: LogConnection, run_id: str, key: str) -> str | None:
    """The run's event ``key`` as JSON text, or ``None`` while it is unset."""
    row = conn.execute(
        "SELECT value FROM run_event WHERE run_id = ? AND key = ?", (run_id, key)
    ).fetchone()
    return str(row[0]) if row else None
