"""The engine's one hook for watchers of a run (tracing): what happened, after it is committed.

The ``Journal`` calls a ``RunObserver`` (``steplog.log.observer``) after each transaction it
commits, so an observer only ever reports what the log holds; the engine knows nothing of what the
observer does with it. The one observer steplog ships is ``steplog.tracing.otel.OtelObserver``
(OpenTelemetry traces), chosen by ``from_environment``. When tracing is off, nothing of
OpenTelemetry is imported and the journal's only cost is one ``is None`` test per transaction.

When tracing is on (README "Tracing"):
- ``OTEL_SDK_DISABLED=true`` turns it off, whatever else is set;
- ``OTEL_TRACES_EXPORTER`` = ``otlp`` or ``console`` turns it on (``none`` off);
- else ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` turns it on (OTLP);
- else a ``TracerProvider`` the program already installed (``opentelemetry.trace.
  set_tracer_provider``) turns it on, through that provider. Checked without importing anything:
  a program that installed one has imported ``opentelemetry.trace`` already.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from steplog.tracing.env import tracing_wanted

if TYPE_CHECKING:
    from steplog.log.observer import RunObserver


def from_environment() -> RunObserver | None:
    """The tracing observer if tracing is wanted and the ``otel`` extra is installed, else ``None``.

    Wanted but not installed: one line on stderr, and the run goes on untraced (tracing is never
    a reason for a run not to run)."""
    if not tracing_wanted():
        return None
    try:
        from steplog.tracing.otel import OtelObserver
    except ImportError as exc:
        print(
            f"steplog: OTEL_* asks for traces but OpenTelemetry is not installed ({exc}); "
            "pip install 'steplog[otel]' — running without traces",
            file=sys.stderr,
        )
        return None
    return OtelObserver()
