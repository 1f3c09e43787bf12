"""How steplog's own tracer provider sends spans: a collector that is down never holds a run up.

``BoundedSpanProcessor`` takes the place of the SDK's ``BatchSpanProcessor`` for the exporters
steplog builds (``steplog.tracing.otel``). The SDK's processor exports on the *caller's* thread when
it is flushed, ignores the flush timeout, and its shutdown waits out the OTLP exporter's retry
schedule (10 s by default): a finished 7-step run aimed at a closed port took 7-12 s to exit. Here:

- a step only appends its span to a queue (``OTEL_BSP_MAX_QUEUE_SIZE``; when full the oldest
  span is dropped) and one thread of the processor's own sends batches
  (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``) every ``OTEL_BSP_SCHEDULE_DELAY`` ms, or at once when a
  run ends (``send_now``);
- at the process's end (the provider's ``atexit`` shutdown: a normal end, a stop by a signal,
  a cancel) it waits at most ``STEPLOG_OTEL_FLUSH_SECONDS`` (1 s by default) for the queue to
  drain, then drops what is left, abandoning an export still in flight;
- whatever was dropped, then or during the run (a refused batch, a full queue), is said in ONE
  line on stderr at that end: how many spans, where they were going (scheme, host, port and
  path of the endpoint: no credentials, no query, never a header).

``guard_logs`` keeps the OpenTelemetry loggers from printing header values: records from an
export thread are summed up in that one line (their cause kept), and every other record has
the header values of ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`` masked before it goes on to the
program's handlers.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from steplog.tracing.env import FLUSH_SECONDS_ENV, HEADERS_ENVS, flush_seconds


def destination(url: str) -> str:
    """``url`` as it may be printed: scheme, host, port and path (a user, password or query
    string in an endpoint is a credential)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "a malformed OTLP endpoint"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default  # checked by ``otelenv.check_environment`` first


class BoundedSpanProcessor(SpanProcessor):
    """Spans leave from a thread of this processor, never from the step's; the process's end
    waits for them at most ``flush_seconds`` (see the module docstring)."""

    def __init__(self, exporter: SpanExporter, *, destination: str) -> None:
        self._exporter = exporter
        self.destination = destination
        self._flush_seconds = flush_seconds()
        self._delay = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._max_queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._max_batch = min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self._max_queue)
        self._queue: deque[ReadableSpan] = deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        """Spans of the batch being exported right now."""
        self._generation = 0
        """Bumped when the end gives up on the batch in flight: its late result is not counted."""
        self._urgent = False
        self._closed = False
        self.ended = 0
        """Spans handed to this processor."""
        self.dropped = 0
        """Spans that will never reach the destination (refused, queue full, or left at the end)."""
        self.last_error: str | None = None
        """The last export failure's cause, as the exporter said it ("ConnectionError")."""
        self._thread = threading.Thread(target=self._work, name="steplog-otel-export", daemon=True)
        self._thread.start()

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident

    # -- SpanProcessor -----------------------------------------------------------------------

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        with self._cond:
            if self._closed:
                return
            self.ended += 1
            if len(self._queue) >= self._max_queue:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(span)
            if len(self._queue) in (1, self._max_batch):  # the export thread waits for either
                self._cond.notify_all()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait (at most ``timeout_millis``) for the export thread to send what is queued. The
        caller's thread never exports: a collector that does not answer holds it no longer."""
        return self._drain(timeout_millis / 1000)

    def shutdown(self) -> None:
        """The process's end (the provider's ``atexit``): a bounded flush, then drop the rest,
        saying so in one line."""
        with self._cond:
            if self._closed:
                return
        drained = self._drain(self._flush_seconds)
        with self._cond:
            self._closed = True
            left = len(self._queue) + self._in_flight
            self._queue.clear()
            self._in_flight = 0
            self._generation += 1
            self.dropped += left
            self._cond.notify_all()
        try:
            self._exporter.shutdown()  # ends its retry back-off; an export in flight is abandoned
        except Exception:  # noqa: BLE001 (a failing exporter must not fail the process's end)
            pass
        if self.dropped:
            print(self._drop_line(0 if drained else left), file=sys.stderr, flush=True)

    # -- the export thread -------------------------------------------------------------------

    def send_now(self) -> None:
        """Send what is queued without waiting for the schedule (a run ended: the process may
        end too). Returns at once."""
        with self._cond:
            if self._queue:
                self._urgent = True
                self._cond.notify_all()

    def _work(self) -> None:
        """Send a batch once it is full, once its first span waited the schedule delay, or at
        once when asked (``send_now``, a flush)."""
        while True:
            with self._cond:
                while not (self._closed or self._queue):
                    self._cond.wait()
                deadline = time.monotonic() + self._delay
                while not (self._closed or self._urgent or len(self._queue) >= self._max_batch):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed:
                    return
                size = min(self._max_batch, len(self._queue))
                batch = [self._queue.popleft() for _ in range(size)]
                if not self._queue:
                    self._urgent = False
                self._in_flight, generation = len(batch), self._generation
            sent = self._export(batch)
            with self._cond:
                if generation == self._generation:
                    self._in_flight = 0
                    if not sent:
                        self.dropped += len(batch)
                self._cond.notify_all()

    def _export(self, batch: list[ReadableSpan]) -> bool:
        # The exporter's own HTTP calls must not be traced (an instrumented HTTP library would
        # make spans of them, which would be exported, which...): the SDK's processors do the same.
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            return self._exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception as exc:  # noqa: BLE001 (an exporter bug loses this batch, not the thread)
            self.last_error = type(exc).__name__
            return False
        finally:
            detach(token)

    def _drain(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            if self._queue:
                self._urgent = True
                self._cond.notify_all()
            while self._queue or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._cond.wait(left)
        return True

    def _drop_line(self, unsent: int) -> str:
        spans = "span" if self.dropped == 1 else "spans"
        line = (
            f"steplog: tracing: dropped {self.dropped} of {self.ended} {spans} "
            f"bound for {self.destination}"
        )
        if self.last_error:
            line += f" (last error: {self.last_error})"
        if unsent:
            line += (
                f"; {unsent} were still unsent after the {self._flush_seconds:g} s "
                f"the end waits ({FLUSH_SECONDS_ENV})"
            )
        return line + "; the runs themselves are unaffected"


class _LogGuard(logging.Handler):
    """The ``opentelemetry`` loggers' one handler while steplog owns the export (see module doc)."""

    def __init__(self, processors: Iterable[BoundedSpanProcessor], secrets: Iterable[str]) -> None:
        super().__init__(logging.NOTSET)
        self._processors = list(processors)
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def emit(self, record: logging.LogRecord) -> None:
        for processor in self._processors:
            if record.thread == processor.thread_id:
                if record.levelno >= logging.WARNING:
                    processor.last_error = _cause(record.args) or processor.last_error
                return  # said once, in the processor's drop line
        try:
            message = self._mask(record.getMessage())
            if record.exc_info:
                message += "\n" + self._mask(logging.Formatter().formatException(record.exc_info))
        except Exception:  # noqa: BLE001 (a record that cannot be formatted is not passed on)
            return
        masked = logging.makeLogRecord(
            {**record.__dict__, "msg": message, "args": None, "exc_info": None, "exc_text": None}
        )
        logging.getLogger().handle(masked)  # on to the program's handlers (or Python's last resort)

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _cause(args: Any) -> str | None:
    """A short cause from an OTLP exporter's log record: the error's type, or the HTTP status."""
    values = args if isinstance(args, tuple) else (args,)
    for value in values:
        if isinstance(value, BaseException):
            return type(value).__name__
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return f"HTTP {value}"
    return None


def guard_logs(processors: Iterable[BoundedSpanProcessor]) -> None:
    """Route the ``opentelemetry`` loggers through ``_LogGuard`` (once per process)."""
    logger = logging.getLogger("opentelemetry")
    if any(isinstance(h, _LogGuard) for h in logger.handlers):
        return
    secrets: list[str] = []
    for name in HEADERS_ENVS:
        for entry in os.environ.get(name, "").split(","):  # a malformed entry may be all secret
            _, _, value = entry.partition("=")
            decoded = unquote(value).strip()
            secrets += [entry.strip(), value.strip(), decoded]
            secrets += [w for w in decoded.split() if len(w) >= 8]  # the TOKEN of "Bearer TOKEN"
    logger.addHandler(_LogGuard(processors, secrets))
    logger.propagate = False
