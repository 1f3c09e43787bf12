"""Messages to runs and the events runs publish, from outside the engine (issue 33).

- **send** (``steplog send``, ``steplog.send``): one transaction under the run's lock
  (``db.run_locked``), like a signal: refused for an unknown or finished run; with ``key``, a
  send repeated is the message sent first (its id), nothing new stored. A run that waits on the
  topic with no engine (a worker let it go) is announced claimable, so a worker takes it up.
- **get_event** (``steplog event``, ``steplog.get_event``): reads the run's event ``key``; waits
  up to ``timeout`` seconds for it to be set, hearing of commits as a waiting engine does
  (``log.doorbell``), and raises ``EventNotSet`` if it is still unset then, or at once if the run
  ended without setting it.

The rows are the log's (``steplog.log.mailbox``); this module holds the rules.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from steplog.control.commands import _held_live, _log, _run_row
from steplog.errors import ControlRefused, EventNotSet, UnknownRun, UsageError
from steplog.log import mailbox, runs
from steplog.log.db import has_column, location, open_readonly, run_locked
from steplog.log.doorbell import Doorbell
from steplog.log.journal import dumps
from steplog.log.location import LogLocation
from steplog.log.runstatus import RunStatus
from steplog.log.status import TERMINAL
from steplog.runtime.waits import check_name

MAX_MESSAGE_BYTES = 1_000_000
"""A message is data one program hands to a run, not a file transfer."""


@dataclass(frozen=True)
class Sent:
    run_id: str
    topic: str
    message_id: int
    duplicate: bool
    """The same ``key`` was sent before: this is that message, nothing new was stored."""
    status: str
    waiting_for_topic: str | None
    """The topic the run waits on now (``None``: it is not in a ``recv``)."""


def send(
    run_id: str,
    topic: str,
    value: Any = None,
    *,
    key: str | None = None,
    db: LogLocation | None = None,
) -> Sent:
    """Send ``value`` (JSON) to ``run_id`` on ``topic``: received once by the run's next (or
    current) ``run.recv(topic)``, in send order per topic. ``UnknownRun`` or ``ControlRefused``
    (exit 2, nothing written) for a run that does not exist or has finished."""
    check_name("a message's topic", topic)
    if key is not None:
        check_name("a message's key", key)
    try:
        data_json = dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"a message's value must be JSON ({exc})") from None
    if len(data_json.encode()) > MAX_MESSAGE_BYTES:
        raise UsageError(
            f"the message is {len(data_json.encode())} bytes; at most {MAX_MESSAGE_BYTES} are "
            "accepted"
        )
    now = time.time()
    with _log(db) as (path, conn), run_locked(conn, run_id):
        row = _run_row(conn, path, run_id)
        if row["status"] in TERMINAL:
            raise ControlRefused(
                f"run {run_id} already ended {row['status']}; messages reach only runs that have "
                "not finished"
            )
        waits_on = row["waiting_topic"] if row["status"] == RunStatus.WAITING else None
        prior = mailbox.message_with_key(conn, run_id, key) if key is not None else None
        message_id = (
            prior
            if prior is not None
            else mailbox.store_message(
                conn,
                run_id,
                row["incarnation"],
                topic,
                data_json,
                key,
                now,
                wakes=waits_on == topic and not _held_live(row, now),
            )
        )
        return Sent(run_id, topic, message_id, prior is not None, row["status"], waits_on)


def get_event(
    run_id: str,
    key: str,
    *,
    timeout: float | None = None,
    db: LogLocation | None = None,
    poll: float = 0.05,
) -> Any:
    """The latest value the run set as its event ``key`` (``run.set_event``). Unset: wait up to
    ``timeout`` seconds (``None``: do not wait) for it, then raise ``EventNotSet``; a run that
    ended without setting it raises at once. ``UnknownRun`` for a run the log does not have."""
    check_name("an event's key", key)
    if timeout is not None and not (0 <= timeout < float("inf")):
        raise UsageError(f"--timeout must be a finite number of seconds >= 0 (got {timeout})")
    path = location(db)
    if not path.exists():
        raise UsageError(f"no log at {path}; pass --db with the log the run is in")
    deadline = time.monotonic() + (timeout or 0.0)
    conn = open_readonly(path)
    bell = Doorbell(conn, path)
    try:
        if not runs.run_exists(conn, run_id):
            raise UnknownRun(f"no run {run_id!r} in {path}; `steplog runs` lists the runs there")
        readable = has_column(conn, "run_event", "value")
        while True:
            found = mailbox.read_event(conn, run_id, key) if readable else None
            if found is not None:
                return json.loads(found)
            status = runs.status_of(conn, run_id)
            if status in TERMINAL:
                raise EventNotSet(
                    f"run {run_id} ended {status} without setting event {key!r}; it never will"
                )
            if time.monotonic() >= deadline:
                waited = f" within {timeout} s" if timeout else ""
                raise EventNotSet(
                    f"run {run_id} has not set event {key!r}{waited}; wait longer with "
                    "--timeout SECONDS (get_event(..., timeout=...))"
                )
            while not bell.rang() and time.monotonic() < deadline:
                time.sleep(poll)
    finally:
        bell.close()
        conn.close()
