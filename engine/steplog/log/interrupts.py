"""Stop requests (SIGTERM, SIGINT, SIGHUP) honoured at safe points, never inside a log write.

Python runs a signal handler between any two bytecodes of the main thread. A handler that raises
there can land between ``COMMIT`` and the code after it (the ``except`` then rolls back a
transaction that no longer exists, and that error replaces the stop), or inside a generator-based
context manager's ``__enter__`` (the generator is left suspended and writes a closed connection
when it is collected). So the engine's handler only *records* the request, and:

- outside every ``critical()`` section it raises ``StopRequested`` at once: step work may be cut
  short anywhere, because an unfinished step is redone on resume and its effects are keyed;
- inside one (a log transaction, a merge into the agent's database, releasing the lease) it
  defers: the outermost section raises it as it ends, once its transaction committed or rolled
  back;
- ``check()`` raises it at every step boundary too, so agent code that swallows
  ``KeyboardInterrupt`` cannot swallow the stop.

A cancel (``request_from_thread("cancel")``, from the engine's heartbeat) waits for more: inside
an ``acting()`` section (an effect being done and its completion recorded) it is not raised at all
until the section ends. Cut there, a request the far side has already received would be left
``started`` in the ledger (its delivery unknown; a non-idempotent one then needs reconciliation by
hand), where a moment later it is known. A stop from outside (a signal) still cuts it: an
unfinished effect is sent again with its key on resume, and a fork carries it on with that key.

The handler raises asynchronously at most once per request; ``shielded()`` marks code after which
the process ends anyway (the terminal record, closing the log) and never raises there.
``StopRequested`` is a ``KeyboardInterrupt``: no ``except Exception`` (a retry policy, agent code)
mistakes it for a failure to retry.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

# SIGBREAK: Windows' CTRL_BREAK_EVENT, what ``procs.request_stop`` sends an engine there.
STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGBREAK")
    if hasattr(signal, name)
)


class StopRequested(KeyboardInterrupt):
    """A stop was asked for (a signal); the engine stops at the next safe point.

    ``reason`` is ``None`` for a signal from outside, or what asked for it from inside the
    process (``"seconds"``: the seconds budget ran out while a step was running)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signal.Signals(signum).name}")
        self.signum = signum
        self.reason = _state.reason


class _State:
    requested: int | None = None
    """The first stop signal received, if any."""
    raised = False
    """Whether ``StopRequested`` was already raised for it (the handler raises once)."""
    depth = 0
    """How many ``critical()``/``shielded()`` sections the main thread is inside."""
    shield = 0
    """How many of them are ``shielded()``: nothing is raised while one is open."""
    reason: str | None = None
    """Set by ``request_from_thread``: why the process itself asked to stop."""
    acting = 0
    """How many ``acting()`` sections are open: a cancel waits for all of them to end."""
    handled: frozenset[int] = frozenset()
    """The signals ``installed()`` took over."""


_state = _State()


def requested() -> int | None:
    """The stop signal received so far, or ``None``."""
    return _state.requested


def _held_back() -> bool:
    """Is the pending stop a cancel that waits for an effect in flight (``acting()``)?"""
    return _state.acting > 0 and _state.reason == "cancel"


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _state.requested is None:
        _state.requested = signum
    if _state.depth == 0 and not _state.raised and not _held_back():
        _state.raised = True
        raise StopRequested(signum)


def check() -> None:
    """Raise the pending stop, if any (called at step boundaries)."""
    if _state.requested is not None and _state.shield == 0:
        _state.raised = True
        raise StopRequested(_state.requested)


class critical:
    """A section a stop must not cut in half; a stop requested inside it is raised as it ends
    (unless it ends with an exception of its own, which then goes first)."""

    def __enter__(self) -> None:
        _state.depth += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _state.depth -= 1
        if (
            exc_type is None
            and _state.depth == 0
            and _state.requested is not None
            and not _state.raised
            and _state.shield == 0
            and not _held_back()
        ):
            _state.raised = True
            raise StopRequested(_state.requested)


class acting:
    """An effect being done and its outcome recorded: a cancel asked for meanwhile is raised as
    the section ends (once no other is open), not inside it; a stop signal still cuts it.

    Sections may overlap (an async agent's effects run side by side): it is a count, not a stack.
    """

    def __enter__(self) -> None:
        _state.acting += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _state.acting -= 1
        if (
            exc_type is None
            and _state.acting == 0
            and _state.depth == 0
            and _state.requested is not None
            and not _state.raised
            and _state.shield == 0
        ):
            _state.raised = True
            raise StopRequested(_state.requested)


class shielded:
    """A section after which the process stops anyway: a stop requested inside is only recorded."""

    def __enter__(self) -> None:
        _state.depth += 1
        _state.shield += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _state.shield -= 1
        _state.depth -= 1


def request_from_thread(reason: str) -> bool:
    """From another thread (a budget watchdog): stop the main thread as a SIGTERM would, at its
    next safe point, with ``reason`` on the ``StopRequested``. False where the engine does not
    handle the stop signals (an application that installed its own handlers)."""
    if signal.SIGTERM not in _state.handled:
        return False
    if _state.requested is None:
        _state.reason = reason
    # A real signal to the main thread, not ``_thread.interrupt_main``: only a signal wakes a main
    # thread blocked in a system call (a sleeping or waiting step) to run the handler.
    if sys.platform == "win32":
        signal.raise_signal(signal.SIGTERM)  # handled on the main thread; no pthread_kill there
    else:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
    return True


@contextmanager
def installed() -> Iterator[None]:
    """Handle the stop signals this way while the engine runs, then restore what was there.

    Only on the main thread (where Python delivers signals), and only over the default handlers:
    an application that installed its own keeps it.
    """
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            if current in (signal.SIG_DFL, signal.default_int_handler):
                previous[sig] = signal.signal(sig, _on_signal)
    _state.requested, _state.raised, _state.reason, _state.acting = None, False, None, 0
    _state.handled = frozenset(previous)
    try:
        yield
    finally:
        _state.handled = frozenset()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
