"""Run control, messages and streams for programs: what ``steplog signal``, ``send``, ``event``,
``cancel``, ``fork`` and ``stream`` do, from Python.

Thin on purpose: the work is in ``steplog.control``, imported on first use so that
``import steplog`` (and with it an engine's start after a kill) does not pay for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

_NOT_EDITED: Any = object()
"""``fork(set_result=...)`` not given (``None`` is an edit: JSON null)."""


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


def send(
    run_id: str,
    topic: str,
    value: Any = None,
    *,
    key: str | None = None,
    db: str | Path | None = None,
) -> int:
    """Send ``run_id`` a message on ``topic`` with JSON ``value``: one ``run.recv(topic)``
    receives it, exactly once, in send order per topic. With ``key``, sending again is the same
    message (the same id, delivered once). Returns the message's id. ``UnknownRun`` /
    ``ControlRefused`` for a run that does not exist or has finished."""
    from steplog.control.mail import send as send_message
    from steplog.log.location import parse

    return send_message(run_id, topic, value, key=key, db=parse(db) if db else None).message_id


def get_event(
    run_id: str, key: str, *, timeout: float | None = None, db: str | Path | None = None
) -> Any:
    """The latest value ``run_id`` set as its event ``key`` (``run.set_event``). While it is
    unset, wait up to ``timeout`` seconds (``None``: do not wait), then raise
    ``steplog.EventNotSet``; a run that ended without setting it raises at once."""
    from steplog.control.mail import get_event as read_event
    from steplog.log.location import parse

    return read_event(run_id, key, timeout=timeout, db=parse(db) if db else None)


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
    set_result: Any = _NOT_EDITED,
    **limits: Any,
) -> str:
    """Create a new run from ``run_id``'s committed steps ``1..at_step-1`` and return its id; run it
    with the agent's ``.run(new_id)`` or ``steplog run AGENT --run-id NEW_ID``. ``limits`` are
    ``Budget`` fields (``max_steps=...``) over the parent's budget. ``set_result``: step
    ``at_step`` is recorded with this result instead of being run (a chat step's: its answer's
    text, or a whole answer object), and the fork runs from the step after it."""
    from steplog.control.commands import fork as fork_run
    from steplog.control.edit import NOT_EDITED
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
        set_result=NOT_EDITED if set_result is _NOT_EDITED else set_result,
    )
    return prepared.run_id


def read_stream(
    run_id: str,
    *,
    db: str | Path | None = None,
    name: str | None = None,
    from_offset: int = 0,
    follow: bool = False,
) -> Generator[dict[str, Any], None, None]:
    """The entries of ``run_id``'s streams (``run.emit``, a model's tokens) from ``from_offset``
    on, in offset order, each ``{"offset", "stream", "step", "attempt", "cut", "value"}`` as
    ``steplog stream --json`` prints it; only stream ``name`` if given. An entry comes once the
    attempt that wrote it is over, so its ``cut`` is final. ``follow``: keep reading across
    kills and restarts until the run is over and every entry is out."""
    from steplog.log.db import location
    from steplog.log.streams import entries

    names = None if name is None else (name,)
    for entry in entries(location(db), run_id, names=names, from_offset=from_offset, follow=follow):
        yield entry.as_json()


async def aread_stream(
    run_id: str,
    *,
    db: str | Path | None = None,
    name: str | None = None,
    from_offset: int = 0,
    follow: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """``read_stream`` for ``async`` code: the reading happens on a thread of its own (one: a
    connection to a file stays with the thread that opened it)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()
    reader = ThreadPoolExecutor(1, thread_name_prefix="steplog-aread")
    it = read_stream(run_id, db=db, name=name, from_offset=from_offset, follow=follow)
    end: dict[str, Any] = {}
    try:
        while True:
            item = await loop.run_in_executor(reader, next, it, end)
            if item is end:
                return
            yield item
    finally:
        reader.submit(it.close)
        reader.shutdown(wait=False)
