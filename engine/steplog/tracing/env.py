"""Tracing settings from the environment, read and checked without importing OpenTelemetry.

``tracing_wanted`` says whether to trace at all (``steplog.tracing.observe`` chooses the observer by
it). ``check_environment`` refuses, before an engine writes anything, the settings steplog's own
exporter (``steplog.tracing.otel``, ``steplog.tracing.export``) would otherwise trip over at run
time: a malformed ``OTEL_EXPORTER_OTLP_HEADERS`` (the exporter library echoes it on stderr, bearer
token included), a bad ``STEPLOG_OTEL_FLUSH_SECONDS`` or ``OTEL_BSP_*`` number. Its messages name
the variable, never a header's value.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from urllib.parse import unquote

from steplog.errors import UsageError

FLUSH_SECONDS_ENV = "STEPLOG_OTEL_FLUSH_SECONDS"
"""How long the end of an engine process waits for its spans to be sent
(``steplog.tracing.export``)."""
DEFAULT_FLUSH_SECONDS = 1.0
MAX_FLUSH_SECONDS = 600.0
HEADERS_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
"""The variables the OTLP exporter takes its request headers from (the first one set wins)."""
_BSP_ENVS = {
    "OTEL_BSP_SCHEDULE_DELAY": 0,
    "OTEL_BSP_MAX_QUEUE_SIZE": 1,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 1,
}
"""The batching variables steplog's exporter reads, with the least each may be."""

# OTLP exporter spec, "Specifying headers via environment variables": ``key=value`` pairs joined by
# commas, keys HTTP tokens, values URL-encoded. Like the Python SDK's liberal parser, a value may
# also hold plain spaces (``Authorization=Bearer TOKEN``); never ``"`` ``,`` ``;`` or ``\``.
# Pattern text, compiled (through ``re``'s cache) only when headers are checked: every engine start
# imports this module, and most trace nothing.
_HEADER_SEPARATOR = r"[ \t]*,[ \t]*"
_HEADER_ENTRY = r"[ \t]*[!#-'*+\-.0-9A-Z^-z|~]+[ \t]*=[ \t]*[ !#-+\--:<-\[\]-~]*[ \t]*"
_BAD_ESCAPE = r"%(?![0-9A-Fa-f]{2})"
_BAD_DECODED = r"[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\xff]"
"""What no HTTP header value may carry once decoded: a line break (or other control character),
or a character outside Latin-1 (the HTTP library would fail on it, echoing the value)."""


def tracing_wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Do the environment or the program ask for traces? (Imports nothing.)"""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return True
    return _program_provider()


def _program_provider() -> bool:
    """Has the program installed a ``TracerProvider`` of its own? (Imports nothing.)"""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider")


def flush_seconds(env: Mapping[str, str] = os.environ) -> float:
    """``STEPLOG_OTEL_FLUSH_SECONDS``, or 1 s (a bad value is refused by ``check_environment``)."""
    try:
        value = float(env.get(FLUSH_SECONDS_ENV, "").strip() or DEFAULT_FLUSH_SECONDS)
    except ValueError:
        return DEFAULT_FLUSH_SECONDS
    good = math.isfinite(value) and 0 <= value <= MAX_FLUSH_SECONDS
    return value if good else DEFAULT_FLUSH_SECONDS


def check_environment(env: Mapping[str, str] = os.environ) -> None:
    """Refuse (``UsageError``) tracing settings the engine could not use, before it writes anything.

    Only what steplog itself reads: nothing when tracing is off, and no ``OTEL_EXPORTER_OTLP_*``
    or ``OTEL_BSP_*`` when spans go through a provider the program installed."""
    if not tracing_wanted(env):
        return
    raw = env.get(FLUSH_SECONDS_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 <= value <= MAX_FLUSH_SECONDS):
            raise UsageError(
                f"{FLUSH_SECONDS_ENV} must be a number of seconds from 0 to "
                f"{MAX_FLUSH_SECONDS:g} (got {raw!r}): how long an engine's end "
                "waits for its spans to be sent"
            )
    if _program_provider():
        return
    for name, least in _BSP_ENVS.items():
        raw = env.get(name, "").strip()
        if raw and not (raw.isdigit() and int(raw) >= least):
            raise UsageError(
                f"{name} must be a whole number, {least} or more (got {raw!r}); fix or unset it"
            )
    wanted = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    exporters = {n.strip() for n in wanted.split(",")}
    if "otlp" in exporters:
        for name in HEADERS_ENVS:
            _check_headers(name, env.get(name, ""))


def _check_headers(name: str, value: str) -> None:
    """Refuse a malformed headers variable, naming the variable and the entry's position only:
    any part of an entry (a malformed one may be all token) may be a secret."""
    entries = [e for e in re.split(_HEADER_SEPARATOR, value.strip()) if e]
    for n, entry in enumerate(entries, 1):
        if not re.fullmatch(_HEADER_ENTRY, entry):
            problem = 'is not KEY=VALUE (a value may not hold " , ; or \\)'
        elif re.search(_BAD_ESCAPE, entry):
            problem = "has a % that is not followed by two hex digits"
        elif re.search(_BAD_DECODED, unquote(entry.partition("=")[2])):
            problem = (
                "decodes to a line break, another control character or a non-Latin-1 character"
            )
        else:
            continue
        raise UsageError(
            f"{name} is malformed: its entry {n} of {len(entries)} {problem}; write "
            "it as key1=value1,key2=value2 with each value URL-encoded (a space is "
            "%20, a comma %2C), or unset it; nothing was run"
        )
