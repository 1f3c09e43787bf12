"""Run blocking calls (a DB read, an HTTP poll, starting the outbox) off the GUI thread.

``submit(fn, on_done, on_error)`` runs ``fn()`` on the global ``QThreadPool`` and calls
``on_done(result)`` or ``on_error(exc)`` back on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

_pending: set[_Carrier] = set()


class _Carrier(QObject):
    job_done = Signal(object)
    """The job's result (delivered on the thread that created the carrier: the GUI)."""
    job_failed = Signal(object)
    """The exception the job raised."""


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], Any], carrier: _Carrier) -> None:
        super().__init__()
        self._fn, self._carrier = fn, carrier

    def run(self) -> None:
        try:
            result = self._fn()
        except Exception as exc:  # delivered to on_error; nothing escapes a pool thread
            self._deliver(self._carrier.job_failed, exc)
        else:
            self._deliver(self._carrier.job_done, result)

    def _deliver(self, signal: Any, value: object) -> None:
        """Emit, unless the carrier is gone: a job that ends while the application shuts down has
        no one left to tell ("Signal source has been deleted" otherwise, from a pool thread)."""
        if not shiboken6.isValid(self._carrier):
            return
        try:
            signal.emit(value)
        except RuntimeError:
            pass  # deleted between the check and the emit


def submit(
    fn: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[BaseException], None] | None = None,
    *,
    owner: QObject | None = None,
) -> None:
    """``owner``: the QObject the callbacks belong to; if it is gone by then, they are dropped."""
    carrier = _Carrier()
    _pending.add(carrier)

    def alive() -> bool:
        return owner is None or shiboken6.isValid(owner)

    def done(result: Any) -> None:
        _pending.discard(carrier)
        if alive():
            on_done(result)

    def failed(exc: BaseException) -> None:
        _pending.discard(carrier)
        if on_error is not None and alive():
            on_error(exc)

    carrier.job_done.connect(done)
    carrier.job_failed.connect(failed)
    QThreadPool.globalInstance().start(_Job(fn, carrier))


def wait_idle(msecs: int = 5000) -> bool:
    """Wait for running jobs (used at shutdown and in tests)."""
    return QThreadPool.globalInstance().waitForDone(msecs)
