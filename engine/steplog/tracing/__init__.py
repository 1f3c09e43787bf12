"""Traces of runs for OpenTelemetry: ``observe`` (the journal's observer hook), ``otel`` (spans),
``export`` (background OTLP export with a bounded flush) and ``env`` (what ``OTEL_*`` asks for).
Nothing here is imported unless tracing is wanted."""
