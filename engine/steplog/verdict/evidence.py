"""Where a run's outside evidence is: the outbox's own ledger, read by URL or from its file.

A run records the URL of the outbox it posted to, but an outbox is a process and may be gone when
the run is judged (a demo reopened next week). The outbox keeps everything in its own SQLite file,
so the same ledger can be read from there: the demo's outbox lives beside the log
(``outbox_file_for``). Either way only *this run's* deliveries and attempts count
(``Ledger.for_run``): several runs share one outbox, and another run's messages are not this run's
duplicates.

A ledger read from a file is accepted only if it has the run's deliveries (every ``http_post``
the log says completed must be there); otherwise it is the wrong file, and the verdict says so
instead of calling an empty ledger a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.log.ledger import completed_post_keys as completed_post_keys
from steplog.outbox.ledger import Ledger

if TYPE_CHECKING:
    from steplog.log.location import LogLocation

OUTBOX_FILE = "outbox.db"


def outbox_file_for(log: LogLocation) -> Path:
    """The demo outbox's file for the log at ``log``: beside it, shared by every demo run there."""
    return log.parent / OUTBOX_FILE


@dataclass(frozen=True)
class RunLedger:
    """This run's part of an outbox ledger, where it came from, or why there is none."""

    ledger: Ledger | None
    source: str
    """``outbox ledger at URL`` or ``outbox file PATH`` (or what was tried)."""
    problem: str | None = None


def read_ledger(
    run_id: str,
    *,
    outbox: str | None,
    recorded_url: str | None,
    log: LogLocation,
    completed: set[str],
    timeout: float = 2.0,
    transport: Any = None,
) -> RunLedger:
    """The run's ledger from ``outbox`` (a URL or an outbox file) if given, else from the URL the
    run recorded, else from the outbox file beside the log.

    A ledger that holds none of the posts the log records as completed is another outbox's
    (a new demo outbox on the same port, a file of another data directory): it is not this
    run's evidence, and reading it as such would call every post lost."""
    tried: list[str] = []
    if outbox:
        if outbox.startswith(("http://", "https://")):
            return _from_url(run_id, outbox, timeout, completed, transport)
        return _from_file(run_id, Path(outbox).expanduser(), completed)
    if recorded_url:
        found = _from_url(run_id, recorded_url, timeout, completed, transport)
        if found.ledger is not None:
            return found
        tried.append(found.problem or recorded_url)
    file = outbox_file_for(log)
    if file.exists():
        found = _from_file(run_id, file, completed)
        if found.ledger is not None:
            return found
        tried.append(found.problem or str(file))
    else:
        tried.append(f"no outbox file at {file}")
    return RunLedger(
        None,
        recorded_url or str(file),
        "its outbox could not be read (" + "; ".join(tried) + "); pass --outbox URL or FILE",
    )


def _from_url(
    run_id: str, url: str, timeout: float, completed: set[str], transport: Any
) -> RunLedger:
    from steplog.outbox.client import fetch_ledger

    source = f"outbox ledger at {url}"
    try:
        ledger = fetch_ledger(url, timeout=timeout, transport=transport).for_run(run_id)
    except Exception as exc:  # unreachable, refused, not an outbox: all mean "no evidence here"
        return RunLedger(
            None, source, f"the outbox at {url} is not answering as an outbox ({plain_error(exc)})"
        )
    return _plausible(ledger, source, completed, f"the outbox at {url}")


def _plausible(ledger: Ledger, source: str, completed: set[str], where: str) -> RunLedger:
    """``ledger`` as this run's evidence, unless it holds none of the run's completed posts."""
    if completed and not completed & {d.key for d in ledger.deliveries}:
        return RunLedger(
            None,
            source,
            f"{where} holds none of this run's messages (not the outbox it posted to?)",
        )
    return RunLedger(ledger, source)


def _from_file(run_id: str, path: Path, completed: set[str]) -> RunLedger:
    from steplog.errors import LogError
    from steplog.outbox.store import OutboxStore, StoreError

    source = f"outbox file {path}"
    try:
        store = OutboxStore(path, readonly=True)
        try:
            ledger = store.ledger().for_run(run_id)
        finally:
            store.close()
    except (LogError, StoreError, OSError) as exc:
        return RunLedger(None, source, f"{path} cannot be read as an outbox ({exc})")
    return _plausible(ledger, source, completed, str(path))


def plain_error(exc: BaseException) -> str:
    """Human words for a connection failure instead of ``ConnectError: [Errno 111] …``."""
    text = str(exc)
    if "Errno 111" in text or "Connection refused" in text:
        return "connection refused: it is not running"
    if "timed out" in text.lower():
        return "no answer in time"
    if isinstance(exc, (KeyError, TypeError, ValueError)):
        return f"it answered, but not with an outbox's ledger: {type(exc).__name__}: {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
