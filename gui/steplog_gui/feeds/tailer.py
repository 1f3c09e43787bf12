"""Tail the log's event table off the GUI thread and hand new events to the GUI.

How it hears of commits is the log's choice (``steplog.log.follow.notifier``), fastest first:
1. a log that announces its commits: a ``commit_watch`` thread listens and each announcement
   wakes a read; nothing is polled. The listening connection's problems (server gone,
   reconnecting) and the reader's are shown as one message, the listener's first;
2. otherwise watchdog on the files the log names (the log and its ``-wal``): a hint only, because
   the file event can arrive *before* the commit is visible to a reader (measured: almost always
   with synchronous=FULL), so a hint queries at once and again ``RECHECK_MS`` later;
3. and the log's ``data_version`` polled every ``POLL_MS``: the safety net, a few microseconds
   per poll.
Either way only events with ``id > bookmark`` are read, in batches, and the connection is in
autocommit mode, so no read transaction is held between refreshes.

A log opened (or replaced) is not tailed from its first event: its history up to the newest id is
loaded run by run in columns (``bulk_load``; a 100k-step run in ~0.25 s instead of ~6 s folded
event by event), first what the runs list and timeline need, then step names and chart series,
each handed over in slices of about ``SLICE_S`` so the window paints between them. Tailing goes
on from that id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from steplog.log.events import EventKind
from steplog.log.follow import Notifier, notifier
from steplog.log.location import LogLocation, parse
from steplog.log.logread import Event
from steplog.log.reader import LogAbsent, LogNotReady, LogRepository, LogUnavailable
from steplog_gui.feeds.commit_watch import CommitWatch
from steplog_gui.model.bulk_load import RunDetails, load_details, load_run
from steplog_gui.model.run_state import RunState

POLL_MS = 50
RECHECK_MS = 30
SETTLE_MS = 20
"""A log that announces commits: how soon to read again when an announced event is held back
behind an open transaction with a lower id (writers of different runs commit side by side)."""
BATCH = 5000
SLICE_S = 0.15
"""A bulk load hands over what it has about this often (the window paints in between)."""
HISTORY_RUNS = 200
"""A log opened is loaded for its newest this-many runs and every unfinished one, whatever its
size (the runs list reads its own pages: ``model.runs_list``). An older run is loaded when it is
asked for (``Tailer.want``: selected) or when the log changes it (a retry, an import)."""


class _TailWorker(QObject):
    """Lives in the tailer's thread; owns the read-only connection."""

    events_read = Signal(object, bool)
    """A list of ``repository.Event``, ids ascending, all above the previous batch; and whether
    more follow at once (a backlog is being read: views may hold their redraws)."""
    problem_found = Signal(str)
    """Why the log cannot be read ('' once it can)."""
    log_replaced = Signal()
    """The file was replaced: everything read so far is void; events restart from id 1."""
    history_started = Signal()
    """A bulk load begins: what was handed over before is void (a load cut short is redone)."""
    runs_loaded = Signal(object, int)
    """A list of ``RunState`` (in the order of their first events) loaded up to event id N."""
    details_loaded = Signal(object, bool)
    """A list of ``bulk_load.RunDetails``; and whether more follow (False: the history is in)."""
    run_loaded = Signal(object, object)
    """One run loaded late (a ``RunState`` and its ``RunDetails``), up to the bookmark: the
    events after it follow."""

    def __init__(self, path: LogLocation, *, announced: bool) -> None:
        super().__init__()
        self.path = path
        self.repo = LogRepository(path)
        self._announced = announced
        """The log announces its commits: nothing is polled, and a failed read is tried again
        at once (no poll would retry it)."""
        self.bookmark = 0
        self._version: int | None = None
        self._problem = ""
        self._hinted = False
        self._notified_upto = 0
        """The highest event id an announcement named."""
        self.known: set[str] = set()
        """The runs handed over (loaded, or seen from their first event)."""
        self.cancelled = False
        """Set from the GUI thread when the tail stops: a bulk load in progress gives up between
        runs."""
        # Every timer is made and connected here, on the GUI thread, before ``moveToThread`` takes
        # them along: a connect made later on the tail's thread holds the GIL while it waits for
        # Qt's signal-slot lock, and the GUI thread, holding that lock in a disconnect, waited for
        # the GIL: the monitor froze for good (seen once in the full test run, in the compare
        # window).
        self._poll = self._timer_to(self.check, single_shot=False)
        self._poll.setInterval(POLL_MS)
        self._soon = self._timer_to(self._hinted_check)
        self._recheck = self._timer_to(self.check)

    def _timer_to(self, slot: Callable[[], object], *, single_shot: bool = True) -> QTimer:
        timer = QTimer(self)
        timer.setSingleShot(single_shot)
        timer.timeout.connect(slot)
        return timer

    @Slot()
    def start(self) -> None:
        if not self._announced:
            self._poll.start()
        self.check(force=True)

    @Slot()
    def stop(self) -> None:
        for timer in (self._poll, self._soon, self._recheck):
            timer.stop()
        self.repo.close()

    @Slot()
    def hint(self) -> None:
        """A file event: query now and once more shortly after (the commit may not be visible
        yet)."""
        if self._hinted:
            return
        self._hinted = True
        self._soon.start(0)
        self._recheck.start(RECHECK_MS)

    @Slot(int)
    def notified(self, newest: int) -> None:
        """An announcement of events up to id ``newest``: read now; it is sent after the commit,
        and a burst of them queued behind one read is read by that one read. A read stops where
        a lower id is yet to commit (``logread.settled_upto``): ``check`` then reads again
        shortly, until it has passed ``newest``."""
        self._notified_upto = max(self._notified_upto, newest)
        if self._hinted:
            return
        self._hinted = True
        self._soon.start(0)

    def _hinted_check(self) -> None:
        self._hinted = False
        self.check()

    def _set_problem(self, text: str) -> None:
        if text != self._problem:
            self._problem = text
            self.problem_found.emit(text)

    @Slot()
    def check(self, force: bool = False) -> None:
        """Read what was committed since the bookmark, if anything was (``data_version`` moved,
        or the log cannot tell and announced a commit). A log that announces its commits is read
        again once at once when the read fails: after a server restart the reader's connection
        is as dead as the listener's, and no announcement will come to retry it."""
        for again in (False, True) if self._announced else (True,):
            try:
                self._check(force)
                return
            except LogAbsent:
                self.repo.close()
                self._set_problem(
                    "" if self.bookmark == 0 else f"{self.path} was deleted while open"
                )
                return
            except LogNotReady:
                self.repo.close()
                self._set_problem("")
                return
            except LogUnavailable as exc:
                self.repo.close()
                if again:
                    self._set_problem(str(exc))

    def _check(self, force: bool) -> None:
        if not self.repo.is_open:
            self.repo.open()
            self._version = None
        problem = self.repo.check_file()
        if problem == "replaced":
            self.repo.open()
            self.bookmark, self._version = 0, None
            self.log_replaced.emit()
            self._set_problem("")
        elif problem == "deleted":
            self.repo.close()
            self._set_problem(f"{self.path} was deleted while open; showing what was read before")
            return
        version = self.repo.data_version()
        if version is not None and not force and version == self._version:
            return
        self._version = version
        self._read()
        self._set_problem("")
        if self.bookmark < self._notified_upto and not self._hinted:
            # Held back behind a transaction still open (or one that rolled back and will
            # announce nothing): look again soon rather than wait for the next commit.
            self._hinted = True
            self._soon.start(SETTLE_MS)

    def _read(self) -> None:
        if self.bookmark == 0:
            self._load_history()
        while True:
            events = self.repo.events_since(self.bookmark, limit=BATCH)
            if not events:
                return
            self._load_unknown(events)
            self.bookmark = events[-1].id
            more = len(events) == BATCH
            self.events_read.emit(events, more)
            if not more:
                return

    def _load_history(self) -> None:
        """Everything up to the newest event, in columns: runs and timelines first (oldest run
        first, the order of the runs list), then details, newest run first (the one shown)."""
        upto = self.repo.max_event_id()
        if upto == 0:
            return
        self.history_started.emit()
        every = self.repo.run_ids(upto)
        unfinished = self.repo.unfinished_run_ids()
        newest = set(every[-HISTORY_RUNS:])
        run_ids = [r for r in every if r in newest or r in unfinished]
        self.known = set(run_ids)
        runs: list[RunState] = []
        since = time.monotonic()
        for i, run_id in enumerate(run_ids):
            if self.cancelled:
                return
            runs.append(load_run(self.repo, run_id, upto))
            if i == len(run_ids) - 1 or time.monotonic() - since >= SLICE_S:
                self.runs_loaded.emit(runs, upto)
                runs, since = [], time.monotonic()
        details: list[RunDetails] = []
        for i, run_id in enumerate(reversed(run_ids)):
            if self.cancelled:
                return
            details.append(load_details(self.repo, run_id, upto))
            last = i == len(run_ids) - 1
            if last or time.monotonic() - since >= SLICE_S:
                self.details_loaded.emit(details, not last)
                details, since = [], time.monotonic()
        self.bookmark = upto

    def _load_unknown(self, events: list[Event]) -> None:
        """Hand over, before ``events``, each run they touch that was not loaded (older than the
        history kept) as it stood at the bookmark."""
        first_kind: dict[str, str] = {}
        for e in events:
            if e.run_id and e.run_id not in self.known:
                first_kind.setdefault(e.run_id, e.kind)
        for run_id, kind in first_kind.items():
            self.known.add(run_id)
            if kind != EventKind.RUN_CREATED:
                self._hand_over(run_id)

    def _hand_over(self, run_id: str) -> None:
        state = load_run(self.repo, run_id, self.bookmark)
        self.run_loaded.emit(state, load_details(self.repo, run_id, self.bookmark))

    @Slot(str)
    def want(self, run_id: str) -> None:
        """Load run ``run_id`` now if it was not (a person selected it)."""
        if self.bookmark == 0 or run_id in self.known or self.cancelled:
            return
        try:
            if not self.repo.has_run(run_id):
                return
            self.known.add(run_id)
            self._hand_over(run_id)
        except (LogAbsent, LogNotReady, LogUnavailable):
            return


class Tailer(QObject):
    """The GUI-side face of the tail: start/stop, and signals delivered on the GUI thread."""

    events_arrived = Signal(object, bool)
    """A list of ``repository.Event`` (ids ascending), and whether more follow at once."""
    problem_changed = Signal(str)
    """A one-line reason the log cannot be read, or '' when it can again."""
    log_reset = Signal()
    """The file was replaced by another: drop what was folded so far."""
    history_started = Signal()
    """A bulk load of the log's history begins: drop what was handed over so far."""
    runs_loaded = Signal(object, int)
    """A list of ``RunState`` loaded from the history up to event id N (oldest run first)."""
    details_loaded = Signal(object, bool)
    """Step names and chart series (``RunDetails``) for loaded runs; False: the history is in."""
    run_loaded = Signal(object, object)
    """A run older than the history kept, loaded late (``RunState``, ``RunDetails``)."""
    _hint_received = Signal()
    _run_wanted = Signal(str)
    _stop_requested = Signal()

    _announced = Signal(int)
    _listen_problem = Signal(str)

    def __init__(
        self, path: LogLocation, parent: QObject | None = None, *, use_watchdog: bool = True
    ) -> None:
        super().__init__(parent)
        self.path: LogLocation = parse(path)
        self._notifier: Notifier = notifier(self.path)
        self._thread = QThread()
        self._thread.setObjectName("steplog-tailer")
        self._worker = _TailWorker(self.path, announced=self._notifier.announces)
        self._worker.moveToThread(self._thread)
        self._worker.events_read.connect(self.events_arrived)
        self._worker.problem_found.connect(self._reader_problem)
        self._worker.log_replaced.connect(self.log_reset)
        self._worker.history_started.connect(self.history_started)
        self._worker.runs_loaded.connect(self.runs_loaded)
        self._worker.details_loaded.connect(self.details_loaded)
        self._worker.run_loaded.connect(self.run_loaded)
        self._run_wanted.connect(self._worker.want)
        self._hint_received.connect(self._worker.hint)
        self._stop_requested.connect(self._worker.stop)
        self._thread.started.connect(self._worker.start)
        # Emitted in the worker's thread as it ends: its timer is stopped there, by its own thread
        # (a stop request queued behind a long read may never be delivered once the loop quits).
        self._thread.finished.connect(self._worker.stop, Qt.ConnectionType.DirectConnection)
        self._use_watchdog = use_watchdog
        self._problems = {"listen": "", "read": ""}
        self._commit_watch: CommitWatch | None = None
        self.notifications = 0
        """Commit announcements received (tests and the latency probe read it)."""
        self._announced.connect(self._worker.notified)
        self._listen_problem.connect(self._listener_problem)
        self._observer: object | None = None
        self._watch_timer = QTimer(self)
        self._watch_timer.setInterval(1000)
        self._watch_timer.timeout.connect(self._ensure_watch)

    def want(self, run_id: str) -> None:
        """Load run ``run_id`` if the history kept left it out (``run_loaded`` brings it)."""
        self._run_wanted.emit(run_id)

    def start(self) -> None:
        self._thread.start()
        announcements = self._notifier.announcements
        if announcements is not None:
            self._commit_watch = CommitWatch(
                announcements, self._on_commit, self._listen_problem.emit
            )
            self._commit_watch.start()
        if self._notifier.hint_files and self._use_watchdog:
            self._ensure_watch()
            self._watch_timer.start()

    def _on_commit(self, newest: int) -> None:  # commit_watch's thread
        self.notifications += 1
        self._announced.emit(newest)

    def _listener_problem(self, text: str) -> None:
        self._problems["listen"] = text
        self._show_problem()

    def _reader_problem(self, text: str) -> None:
        self._problems["read"] = text
        self._show_problem()

    def _show_problem(self) -> None:
        self.problem_changed.emit(self._problems["listen"] or self._problems["read"])

    def stop(self) -> None:
        if self._commit_watch is not None:
            self._commit_watch.stop()
            self._commit_watch = None
        self._watch_timer.stop()
        if self._observer is not None:
            self._observer.stop()  # type: ignore[attr-defined]
            self._observer.join(timeout=2)  # type: ignore[attr-defined]
            self._observer = None
        if self._thread.isRunning():
            self._worker.cancelled = True
            self._stop_requested.emit()
            self._thread.quit()
            self._thread.wait(5000)

    def _ensure_watch(self) -> None:
        """Watch the folder of the log's hint files once it exists (a fresh demo creates it
        after the window opens)."""
        files = self._notifier.hint_files
        folder = files[0].parent if files else None
        if self._observer is not None or folder is None or not folder.is_dir():
            return
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        names = {f.name for f in files}
        hint = self._hint_received

        class _Hint(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:  # watchdog's thread
                if os.path.basename(str(event.src_path)) in names:
                    hint.emit()

        observer = Observer()
        observer.schedule(_Hint(), str(folder), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer
        self._watch_timer.stop()
