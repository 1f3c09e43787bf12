"""Commits to a log that announces them, as they happen: a thread that listens for them.

The counterpart of the tailer's file watching, for a log whose ``steplog.log.follow.notifier``
has ``announcements`` (the tailer starts one when it has). An announcement is sent when a
commit is done, so unlike a file event it is never early: one read follows each (several
queued are read as one).

The connection is watched, not trusted: when it is lost (server restarted, network gone) the
thread says so through ``on_problem`` and reconnects, waiting longer each time up to
``MAX_BACKOFF_S``; once it listens again it clears the message and asks for a read, since what
was committed while it was away was announced to nobody. Qt-free: callbacks run on this thread
(the tailer passes Qt signals' ``emit``, which queue to their receivers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from steplog.errors import LogError
from steplog.log.follow import Announcements

WAIT_S = 0.25
"""How long one wait for an announcement lasts: the bound on how late ``stop()`` is noticed."""
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0


class CommitWatch(threading.Thread):
    """Calls ``on_commit(newest_id_or_0)`` after commits announced on ``announcements`` (0: read
    anyway, after (re)connecting) and ``on_problem(text)`` when listening stops or resumes ('')."""

    def __init__(
        self,
        announcements: Announcements,
        on_commit: Callable[[int], None],
        on_problem: Callable[[str], None],
    ) -> None:
        super().__init__(name="steplog-commit-watch", daemon=True)
        self._on_commit = on_commit
        self._on_problem = on_problem
        self._stop_event = threading.Event()
        self._announcements = announcements
        self.reconnects = 0
        """How many times the connection was made again after being lost (tests read it)."""

    def stop(self, timeout: float = 2.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        backoff = FIRST_BACKOFF_S
        lost = False
        source = self._announcements
        try:
            while not self._stop_event.is_set():
                if not source.connected:
                    try:
                        source.connect()
                    except LogError as exc:
                        self._on_problem(
                            f"{exc}; retrying in {backoff:.0f} s, showing what was read before"
                        )
                        self._stop_event.wait(backoff)
                        backoff = min(backoff * 2, MAX_BACKOFF_S)
                        continue
                    backoff = FIRST_BACKOFF_S
                    if lost:
                        self.reconnects += 1
                    self._on_problem("")
                    self._on_commit(0)  # what was committed before listening began
                try:
                    newest = source.wait(WAIT_S)
                except LogError as exc:
                    lost = True
                    self._on_problem(f"{exc}; reconnecting, showing what was read before")
                    continue
                if newest is not None:
                    self._on_commit(newest)
        finally:
            source.close()
