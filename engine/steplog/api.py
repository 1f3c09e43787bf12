"""Run control for programs: what ``steplog signal``, ``cancel`` and ``fork`` do, from Python.

Thin on purpose: the work is in ``steplog.control``, imported on first use so that
``import steplog`` (and with it an engine's start after a kill) does not pay for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def signal(
    run_id: str,
    name: str,
    data: Any = None,
    *,
    db: str | Path | None = None,
    key: str | None = None,
) -> int:
    """Send ``run_id`` the signal ``name`` with JSON ``data``; one ``run.wait_for(name)`` consumes
    it exactly once. With ``key``, sending again is the same signal. Returns the signal's id."""
    from steplog.control.commands import signal as send
    from steplog.log.location import parse

    return send(run_id, name, data, db=parse(db) if db else None, key=key).signal_id


def cancel(run_id: str, reason: str | None = None, *, db: str | Path | None = None) -> bool:
    """Cancel a run that has not finished. ``True`` when it is ``cancelled`` now; ``False`` when its
    live engine was asked and stops at its next step boundary (its exit code is then 5)."""
    from steplog.control.commands import cancel as cancel_run
    from steplog.log.location import parse

    return cancel_run(run_id, reason, db=parse(db) if db else None).done


def fork(
    run_id: str,
    at_step: int,
    *,
    new_run_id: str | None = None,
    db: str | Path | None = None,
    params: dict[str, Any] | None = None,
    workdir: str | Path | None = None,
    outbox: str | None = None,
    **limits: Any,
) -> str:
    """Create a new run from ``run_id``'s committed steps ``1..at_step-1`` and return its id; run it
    with the agent's ``.run(new_id)`` or ``steplog run AGENT --run-id NEW_ID``. ``limits`` are
    ``Budget`` fields (``max_steps=...``) over the parent's budget."""
    from steplog.control.commands import fork as fork_run
    from steplog.log.location import parse

    _agent, prepared = fork_run(
        run_id,
        at_step,
        new_run_id=new_run_id,
        db=parse(db) if db else None,
        params=params,
        limits=limits,
        workdir=Path(workdir) if workdir else None,
        outbox=outbox,
    )
    return prepared.run_id
