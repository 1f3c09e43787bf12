"""Poll the outbox service's ledger (``steplog.outbox.fetch_ledger``) off the GUI thread."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from . import jobs

POLL_MS = 500
IDLE_POLL_MS = 3000
QUIET_POLLS = 10
"""After this many polls without a change the watcher drops to ``IDLE_POLL_MS``."""


class OutboxWatcher(QObject):
    """The latest ``Ledger`` of one outbox URL, refreshed every ``POLL_MS``; with ``run_id`` set,
    only that run's part of it (``Ledger.for_run``: runs sharing an outbox send equal bodies, and
    another run's message is not this run's duplicate)."""

    ledger_changed = Signal(object)
    """The new ``steplog.outbox.Ledger`` (only emitted when it differs from the last one)."""
    problem_changed = Signal(str)
    """Why the outbox cannot be read ('' when it can)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.url: str | None = None
        self.run_id: str | None = None
        self.ledger: Any = None
        self.problem = ""
        self._busy = False
        self._transport: Any = None
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
        self.ledger = None
        self.ledger_changed.emit(None)
        if url:
            self._timer.start()
            self.refresh()
        else:
            self._timer.stop()

    def set_run(self, run_id: str | None) -> None:
        """Show only ``run_id``'s deliveries and attempts (``None``: the whole ledger)."""
        if run_id == self.run_id:
            return
        self.run_id = run_id
        self.ledger = None
        self.ledger_changed.emit(None)
        self.refresh()

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

        if self._transport is None:
            import httpx

            # One transport for every poll: a fresh httpx client per poll builds an SSL context
            # each time (most of the idle CPU measured here) and reconnects.
            self._transport = httpx.HTTPTransport()
        transport = self._transport

        def fetch() -> Any:
            from steplog.outbox import fetch_ledger

            return fetch_ledger(url, timeout=2.0, transport=transport)

        jobs.submit(fetch, lambda ledger: self._done(url, run_id, ledger), lambda exc: self._failed(url, exc),
                    owner=self)

    def _done(self, url: str, run_id: str | None, ledger: Any) -> None:
        self._busy = False
        if url != self.url or run_id != self.run_id:
            self.refresh()  # pointed elsewhere meanwhile: fetch what is wanted now
            return
        if run_id is not None:
            ledger = ledger.for_run(run_id)
        self._set_problem("")
        if ledger != self.ledger:
            self.ledger = ledger
            self._quiet = 0
            self._timer.setInterval(POLL_MS)
            self.ledger_changed.emit(ledger)
        else:  # nothing new for a while: poll slowly until something changes again
            self._quiet += 1
            if self._quiet >= QUIET_POLLS:
                self._timer.setInterval(IDLE_POLL_MS)

    def _failed(self, url: str, exc: BaseException) -> None:
        self._busy = False
        if url == self.url:
            from steplog.evidence import plain_error

            self._set_problem(f"the outbox at {url} is not answering ({plain_error(exc)}); "
                              "the verdict reads its file beside the log instead, if there is one")

    def _set_problem(self, text: str) -> None:
        if text != self.problem:
            self.problem = text
            self.problem_changed.emit(text)
