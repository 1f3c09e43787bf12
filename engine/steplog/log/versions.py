"""What the log knows of code versions (``docs/versions.md``): a run's version and refusal, the
version a step was recorded under, refusals written before any claim, and patch markers.

The replay check itself runs agent code, so it lives in the runtime
(``steplog.runtime.replaycheck``); everything it reads and writes is asked for here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from steplog.log.db import LogConnection, run_locked
from steplog.log.events import EventKind
from steplog.log.journal import append_event, dumps
from steplog.log.runstatus import TERMINAL

PATCH_KIND = "patch"
"""The kind of the marker step ``run.patched(name)`` records the first time it returns True."""


def patch_step_name(name: str) -> str:
    """The name of ``run.patched(name)``'s marker step."""
    return f"patch {name}"


@dataclass(frozen=True)
class ResumeState:
    """What the replay check needs of a run before any engine claims it."""

    run_id: str
    agent: str
    status: str
    version: str | None
    params: dict[str, Any]
    workdir: str
    outbox: str | None
    incarnation: int
    parent: tuple[str, int] | None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


def resume_state(conn: LogConnection, run_id: str) -> ResumeState | None:
    """The run as the replay check sees it, or ``None`` when it does not exist."""
    row = conn.execute(
        "SELECT id, agent, status, version, params, workdir, outbox, incarnation, parent_run_id, "
        "parent_step FROM run WHERE id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    return ResumeState(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        row[3],
        json.loads(row[4]),
        str(row[5]),
        row[6],
        int(row[7]),
        (str(row[8]), int(row[9])) if row[8] is not None else None,
    )


def has_steps(conn: LogConnection, run_id: str) -> bool:
    found = conn.execute("SELECT 1 FROM step WHERE run_id = ? LIMIT 1", (run_id,)).fetchone()
    return found is not None


def record_refusal(
    conn: LogConnection,
    run_id: str,
    *,
    reason: str,
    at_step: int,
    version: str,
    worker: dict[str, Any] | None = None,
) -> None:
    """A refusal found before any claim (``replaycheck``): ``run.blocked`` and one
    ``resume_refused`` event, in one transaction; nothing else of the run changes."""
    blocked = dumps({"reason": reason, "at_step": at_step})
    now = time.time()
    with run_locked(conn, run_id):
        row = conn.execute("SELECT incarnation FROM run WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return
        conn.execute("UPDATE run SET blocked = ? WHERE id = ?", (blocked, run_id))
        data: dict[str, Any] = {"reason": reason, "at_step": at_step, "version": version}
        if worker is not None:
            data["worker"] = worker
        append_event(conn, run_id, int(row[0]), EventKind.RESUME_REFUSED, data, ts=now)


def version_at(conn: LogConnection, run_id: str, seq: int) -> str | None:
    """The version of the code that recorded step ``seq`` (as far as the log says: the version
    the run was on when the engine that last worked on the step took it)."""
    step = conn.execute(
        "SELECT incarnation FROM step WHERE run_id = ? AND seq = ?", (run_id, seq)
    ).fetchone()
    rows = conn.execute(
        "SELECT incarnation, kind, data FROM event WHERE run_id = ? AND kind IN (?, ?) ORDER BY id",
        (run_id, EventKind.RUN_CREATED, EventKind.VERSION_CHANGED),
    ).fetchall()
    found: str | None = None
    for incarnation, kind, data in rows:
        if step is not None and int(incarnation) > int(step[0]):
            break
        payload = json.loads(data)
        found = payload.get("version") if kind == EventKind.RUN_CREATED else payload.get("new")
    if found is None:
        row = conn.execute("SELECT version FROM run WHERE id = ?", (run_id,)).fetchone()
        found = row[0] if row is not None else None
    return found


def runs_before_patch(conn: LogConnection, name: str) -> list[str]:
    """The live runs (not finished) that have no ``run.patched(name)`` marker step: they were
    recorded without the patch or have not reached its point yet, so the old branch may still
    be needed to replay them (``steplog runs --patch NAME``). Oldest first."""
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT r.id FROM run r WHERE r.status NOT IN (?, ?, ?, ?) AND NOT EXISTS (SELECT 1"
            " FROM step s WHERE s.run_id = r.id AND s.kind = ? AND s.name = ? AND s.status ="
            " 'committed') ORDER BY r.created_at, r.id",
            (*sorted(TERMINAL), PATCH_KIND, patch_step_name(name)),
        )
    ]
