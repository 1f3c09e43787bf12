"""Poll the outbox service's ledger (``steplog.outbox.fetch_ledger``) off the GUI thread.

An old run's outbox is usually gone (a demo reopened next week: its port answers nothing), but
the outbox kept every delivery in its own file, and the verdict strip reads them there
(``steplog.verdict.evidence.read_ledger``). Given the log, the watcher does the same, through the
same function, so the panel shows the deliveries the strip counts instead of "not answering".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from steplog.log.location import LogLocation
from steplog_gui import jobs

POLL_MS = 500
IDLE_POLL_MS = 3000
QUIET_POLLS = 10
"""After this many polls without a change the watcher drops to ``IDLE_POLL_MS``."""


@dataclass(frozen=True)
class _FromFile:
    """The outbox did not answer; this run's part of its ledger, read from the outbox's file."""

    ledger: Any
    source: str
    """``outbox file PATH`` (``steplog.verdict.evidence.RunLedger.source``)."""
    why: str
    """Why the URL was not read: the outbox at URL is not answering (…)."""


class _Unreachable(Exception):
    """Neither the URL nor the outbox's file gave this run's ledger; ``str`` says both."""


def _read_file(run_id: str, log: LogLocation, url: str, exc: BaseException) -> _FromFile:
    """The run's ledger from the outbox file the verdict would read
    (``steplog.verdict.evidence``)."""
    from steplog.log.db import open_readonly
    from steplog.verdict.evidence import completed_post_keys, plain_error, read_ledger

    why = f"the outbox at {url} is not answering ({plain_error(exc)})"
    conn = open_readonly(log)
    try:
        completed = completed_post_keys(conn, run_id)
    finally:
        conn.close()
    found = read_ledger(run_id, outbox=None, recorded_url=None, log=log, completed=completed)
    if found.ledger is None:
        raise _Unreachable(f"{why}; {found.problem}")
    return _FromFile(found.ledger, found.source, why)


class OutboxWatcher(QObject):
    """The latest ``Ledger`` of one outbox URL, refreshed every ``POLL_MS``; with ``run_id`` set,
    only that run's part of it (``Ledger.for_run``: runs sharing an outbox send equal bodies, and
    another run's message is not this run's duplicate).

    With ``log`` (the log's location, asked at each poll) and a run set, an outbox that does
    not answer is read from its file instead: ``shown`` is then that ledger, ``ledger`` stays
    ``None`` (it is what the URL answered), and ``source`` says where ``shown`` came from."""

    ledger_changed = Signal(object)
    """The ledger now shown (``shown``: the URL's, or the outbox file's; ``None`` for none),
    emitted when it differs from the last one."""
    problem_changed = Signal(str)
    """Why the outbox cannot be read, or why what is shown comes from its file ('' when the
    URL answers)."""

    def __init__(
        self, parent: QObject | None = None, *, log: Callable[[], LogLocation] | None = None
    ) -> None:
        super().__init__(parent)
        self.url: str | None = None
        self.run_id: str | None = None
        self.ledger: Any = None
        """This run's part of the ledger the URL answered (``None`` while it does not answer)."""
        self.shown: Any = None
        """What the panel shows: ``ledger``, else this run's part of the outbox file's ledger."""
        self.source = ""
        """Where ``shown`` came from: the URL, or ``outbox file PATH``."""
        self.problem = ""
        self.settled = True
        """Whether ``shown`` and ``problem`` are the answer for the current URL and run: False
        from ``set_url``/``set_run`` until the first poll for them came back."""
        self._log = log
        self._busy = False
        self._transport: Any = None
        self._transport_tls = False
        self._quiet = 0
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.refresh)

    @property
    def transport(self) -> Any:
        """The ``httpx`` transport the polls share (``None`` before the first poll), for other
        readers of the same outbox: a fresh client per read costs an SSL context each time."""
        return self._transport

    def set_url(self, url: str | None) -> None:
        if url == self.url:
            return
        self.url = url
        self._forget()
        if url:
            self._timer.start(POLL_MS)
            self.refresh()
        else:
            self._timer.stop()

    def set_run(self, run_id: str | None) -> None:
        """Show only ``run_id``'s deliveries and attempts (``None``: the whole ledger)."""
        if run_id == self.run_id:
            return
        self.run_id = run_id
        self._forget()
        self.refresh()

    def _forget(self) -> None:
        self.ledger = self.shown = None
        self.source = ""
        self.settled = self.url is None
        self.ledger_changed.emit(None)

    def poke(self) -> None:
        """Something is happening (an engine started or was killed): poll at full rate again."""
        self._quiet = 0
        if self._timer.isActive():
            self._timer.setInterval(POLL_MS)

    def stop(self) -> None:
        self._timer.stop()
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def refresh(self) -> None:
        if self._busy or not self.url:
            return
        self._busy = True
        url, run_id = self.url, self.run_id
        log = self._log() if self._log is not None and run_id is not None else None

        def fetch() -> Any:
            from steplog.outbox import fetch_ledger

            transport = self._transport_for(url)  # (one fetch at a time: ``_busy``)
            try:
                return fetch_ledger(url, timeout=2.0, transport=transport)
            except Exception as exc:  # not answering, refused, not an outbox: its file, if any
                if log is None or run_id is None:
                    raise
                return _read_file(run_id, log, url, exc)

        jobs.submit(
            fetch,
            lambda got: self._done(url, run_id, got),
            lambda exc: self._failed(url, exc),
            owner=self,
        )

    def _transport_for(self, url: str) -> Any:
        """The transport the polls share, made on the first poll (and again if ``url`` needs TLS
        and it has none): a fresh httpx client per poll built an SSL context each time (most of
        the idle CPU measured here) and reconnected. Made in the poll's job, off the GUI thread,
        and for plain ``http://`` (the demo's outbox on 127.0.0.1) without loading the CA bundle
        it would never use: httpx's import and that context held the demo's GUI thread ~0.3 s
        (1.2 s at load 12) just as its engine was to start, and then 0.35 s of CPU against the
        window's own imports (issue 29)."""
        tls = url.startswith("https:")
        if self._transport is None or (tls and not self._transport_tls):
            import httpx

            old, self._transport = self._transport, httpx.HTTPTransport(verify=tls)
            self._transport_tls = tls
            if old is not None:
                old.close()
        return self._transport

    def _done(self, url: str, run_id: str | None, got: Any) -> None:
        self._busy = False
        if url != self.url or run_id != self.run_id:
            self.refresh()  # pointed elsewhere meanwhile: fetch what is wanted now
            return
        if isinstance(got, _FromFile):
            self.ledger, shown, source = None, got.ledger, got.source
            self._set_problem(f"{got.why}; shown from its file")
            self._timer.setInterval(IDLE_POLL_MS)  # the outbox is gone: look again now and then
        else:
            self.ledger = shown = got.for_run(run_id) if run_id is not None else got
            source = url
            self._set_problem("")
        first, self.settled = not self.settled, True
        if first or shown != self.shown or source != self.source:
            self.shown, self.source = shown, source
            self._quiet = 0
            if self.ledger is not None:
                self._timer.setInterval(POLL_MS)
            self.ledger_changed.emit(shown)
        elif self.ledger is not None:  # nothing new for a while: poll slowly until it changes
            self._quiet += 1
            if self._quiet >= QUIET_POLLS:
                self._timer.setInterval(IDLE_POLL_MS)

    def _failed(self, url: str, exc: BaseException) -> None:
        self._busy = False
        if url != self.url:
            return  # (what was shown stays, with the reason beside it)
        first, self.settled = not self.settled, True
        if isinstance(exc, _Unreachable):
            self._set_problem(str(exc))
        else:
            from steplog.verdict.evidence import plain_error

            self._set_problem(
                f"the outbox at {url} is not answering ({plain_error(exc)}); "
                "the verdict reads its file beside the log instead, if there is one"
            )
        if first:
            self.ledger_changed.emit(self.shown)  # the first answer: the verdict waits for it

    def _set_problem(self, text: str) -> None:
        if text != self.problem:
            self.problem = text
            self.problem_changed.emit(text)
