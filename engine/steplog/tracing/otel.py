"""OpenTelemetry traces of runs (the ``otel`` extra): one trace per engine incarnation.

Imported only when tracing is on (``steplog.tracing.observe.from_environment``). The shape::

    steplog run                      root: one per incarnation (run id, agent, incarnation,
    ├── <step name>                  resumed, and how it took over: a kill shows here)
    │   ├── chat <model>             one span per step attempt (seq, attempt, kind, redone,
    │   └── effect http_post         tokens, cost); model calls with GenAI attributes
    └── ...                          (gen_ai.*); effects with their idempotency key

Spans go through the program's own ``TracerProvider`` when it installed one; otherwise through
one built here from the standard variables (``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_*``,
``OTEL_BSP_*``), installed as the global provider so spans agent code makes inside a step nest
under that step (the step's span is the current span while it runs). Ours sends them from a
thread of its own and waits for them at most ``STEPLOG_OTEL_FLUSH_SECONDS`` when the process ends
(``steplog.tracing.export``): a collector that is down or does not answer never holds a run up. A
killed engine's trace simply stops: its root span never ends, spans still queued die with it,
and the next incarnation's root says ``steplog.takeover`` (how it found the previous holder)
with ``steplog.previous_pid`` and ``steplog.killed_at``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from steplog.log.runstatus import RunStatus
from steplog.tracing.env import flush_seconds
from steplog.tracing.export import BoundedSpanProcessor, destination, guard_logs

if TYPE_CHECKING:  # observe chooses this module: a type-only import keeps the two acyclic
    from steplog.log.observer import Incarnation

_lock = threading.Lock()
_own_provider: Any = None
_own_processors: list[BoundedSpanProcessor] = []


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("steplog")
    except PackageNotFoundError:
        return "0"


def tracer_provider() -> trace.TracerProvider:
    """The program's provider if it set one, else ours (built once from the environment)."""
    global _own_provider
    current = trace.get_tracer_provider()
    if type(current).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return current
    with _lock:
        if _own_provider is None:
            _own_provider = _build_provider()
            trace.set_tracer_provider(_own_provider)
        provider: trace.TracerProvider = _own_provider
        return provider


def _build_provider() -> trace.TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

    # shutdown_on_exit: the provider's atexit shutdown is the process's bounded flush
    # (``BoundedSpanProcessor.shutdown``), after a normal end, a stop by a signal or a cancel.
    service = os.environ.get("OTEL_SERVICE_NAME", "steplog")
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=True
    )
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporters: list[tuple[SpanExporter, str]] = []
    for name in (n.strip() for n in wanted.split(",")):
        if name == "console":
            exporters.append((ConsoleSpanExporter(out=sys.stderr), "stderr (the console exporter)"))
        elif name == "otlp":
            protocol = (
                os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            )
            if protocol != "http/protobuf":
                print(
                    f"steplog: OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; sending "
                    "OTLP over "
                    "http/protobuf (the collector's port 4318)",
                    file=sys.stderr,
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = _traces_endpoint()
            exporters.append((OTLPSpanExporter(endpoint=endpoint), destination(endpoint)))
        elif name != "none":
            print(
                f"steplog: OTEL_TRACES_EXPORTER={name} is not supported (use otlp or console); "
                "ignored",
                file=sys.stderr,
            )
    for exporter, where in exporters:
        processor = BoundedSpanProcessor(exporter, destination=where)
        _own_processors.append(processor)
        provider.add_span_processor(processor)
    guard_logs(_own_processors)
    return provider


def _traces_endpoint() -> str:
    """Where OTLP traces go, as the exporter library resolves it (given to it explicitly, so the
    drop warning names the very URL it used)."""
    if url := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return url
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
    return f"{base.removesuffix('/')}/v1/traces"


def _flush_theirs(provider: trace.TracerProvider, seconds: float) -> None:
    """Flush a provider the program installed, waiting at most ``seconds``: the SDK's own batch
    processor exports on the flushing thread and ignores its timeout, so it flushes on a thread
    of its own that is left behind if the collector does not answer."""
    flush = getattr(provider, "force_flush", None)
    if not callable(flush):
        return

    def go() -> None:
        try:
            flush(int(seconds * 1000))
        except Exception:  # noqa: BLE001 (the program's exporter: its trouble, not the run's)
            pass

    helper = threading.Thread(target=go, name="steplog-otel-flush", daemon=True)
    helper.start()
    helper.join(seconds)


_F = TypeVar("_F", bound=Callable[..., None])


def _never_raises(method: _F) -> _F:
    """A tracing failure must never become the run's failure: the journal calls these between
    committed transactions, where an exception would read as the step failing. Said once, then
    the run goes on untraced by that call."""

    @functools.wraps(method)
    def guarded(self: OtelObserver, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception as exc:
            if not self._complained:
                self._complained = True
                print(
                    f"steplog: tracing failed ({type(exc).__name__}: {exc}); the run goes on",
                    file=sys.stderr,
                )

    return guarded  # type: ignore[return-value]


@dataclass
class _Step:
    span: Span
    token: object | None
    """Set while this step's span is the current one (one step at a time: see
    ``attempt_started``)."""
    kind: str
    started_ns: int
    model_done: bool = False
    tokens: int = 0
    cost: float = 0.0
    effects: dict[str, tuple[Span, object | None]] = field(default_factory=dict)


class OtelObserver:
    """A ``steplog.log.observer.RunObserver`` that turns the journal's reports into spans."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._provider = provider or tracer_provider()
        self._tracer = self._provider.get_tracer("steplog", _version())
        self._root: Span | None = None
        self._root_token: object | None = None
        self._inc: Incarnation | None = None
        self._step: dict[int, _Step] = {}
        self._seen: set[int] = set()
        self._complained = False

    # -- the incarnation ---------------------------------------------------------------------

    @_never_raises
    def incarnation_started(self, inc: Incarnation) -> None:
        self._inc = inc
        attrs: dict[str, Any] = {
            "steplog.run.id": inc.run_id,
            "steplog.agent": inc.agent,
            "steplog.incarnation": inc.incarnation,
            "steplog.resumed": inc.resumed,
        }
        if inc.takeover:
            attrs["steplog.takeover"] = inc.takeover
        if inc.previous_pid is not None:
            attrs["steplog.previous_pid"] = inc.previous_pid
        if inc.killed_at is not None:
            attrs["steplog.killed_at"] = inc.killed_at
        # A new trace per incarnation, whatever span the calling program has open.
        self._root = self._tracer.start_span(
            "steplog run", context=context.Context(), kind=SpanKind.INTERNAL, attributes=attrs
        )
        self._root_token = context.attach(trace.set_span_in_context(self._root))

    @_never_raises
    def incarnation_ended(self, status: str | None, reason: str | None) -> None:
        root = self._root
        if root is None:
            return
        self._end_steps("the engine stopped inside this step")
        root.set_attribute("steplog.run.status", status or RunStatus.RUNNING)
        root.set_attribute("steplog.incarnation.end", "finished" if status else "released")
        if reason:
            root.set_attribute("steplog.run.reason", reason)
        if status == RunStatus.FAILED:
            root.set_status(Status(StatusCode.ERROR, reason or RunStatus.FAILED))
        elif status == RunStatus.SUCCEEDED:
            root.set_status(Status(StatusCode.OK))
        self._detach(self._root_token)
        root.end()
        self._root = self._root_token = None

    @_never_raises
    def close(self) -> None:
        if self._root is not None:
            self._root.set_attribute("steplog.incarnation.end", "stopped")
            self.incarnation_ended(None, None)
        # The process may end right after the run: send what is queued now. Ours goes out from
        # its thread, and the process's end waits for it (boundedly); never wait here, where a
        # Python program running many runs would wait once per run.
        if self._provider is _own_provider:
            for processor in _own_processors:
                processor.send_now()
        else:
            _flush_theirs(self._provider, flush_seconds())

    # -- steps -------------------------------------------------------------------------------

    @_never_raises
    def attempt_started(
        self, seq: int, name: str, kind: str, *, attempt: int, recoveries: int
    ) -> None:
        self._end_step(seq, "superseded")  # never expected: the previous attempt reported its end
        redone = recoveries > 0 and seq not in self._seen  # an earlier engine died inside this step
        self._seen.add(seq)
        # Parents are always explicit. The step's span also becomes the current one (so spans agent
        # code makes inside it nest there) only when no other step is open: parallel steps
        # (asyncio.gather, run.map) would otherwise attach and detach contexts out of order.
        alone = not self._step
        span = self._tracer.start_span(
            name,
            context=self._under(self._root),
            attributes={
                "steplog.step.seq": seq,
                "steplog.step.name": name,
                "steplog.step.kind": kind,
                "steplog.step.attempt": attempt,
                "steplog.step.redone": redone,
                "steplog.step.recoveries": recoveries,
            },
        )
        token = context.attach(trace.set_span_in_context(span)) if alone else None
        self._step[seq] = _Step(span, token, kind, time.time_ns())

    @_never_raises
    def decision_recorded(
        self,
        seq: int,
        decision: dict[str, Any],
        *,
        tokens_in: int,
        tokens_out: int,
        tokens_cached: int,
        estimated: bool,
        cost: float,
    ) -> None:
        step = self._step.get(seq)
        if step is None:
            return
        step.tokens += tokens_in + tokens_out
        step.cost += cost
        step.model_done = True
        requested = self._inc.model if self._inc else "offline"
        provider = "steplog.offline" if requested == "offline" else "openai"
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": requested,
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
            "steplog.tokens_estimated": estimated,
            "steplog.cost_usd": cost,
        }
        if decision.get("model"):
            attrs["gen_ai.response.model"] = str(decision["model"])
        if decision.get("finish_reason"):
            attrs["gen_ai.response.finish_reasons"] = [str(decision["finish_reason"])]
        if tokens_cached:
            attrs["gen_ai.usage.cache_read.input_tokens"] = tokens_cached
        span = self._tracer.start_span(
            f"chat {requested}",
            context=self._under(step.span),
            kind=SpanKind.CLIENT,
            start_time=step.started_ns,
            attributes=attrs,
        )
        span.end()

    @_never_raises
    def attempt_failed(self, seq: int, error: str, *, will_retry: bool) -> None:
        step = self._step.get(seq)
        if step is not None and step.kind == "chat" and not step.model_done:
            requested = self._inc.model if self._inc else "offline"
            span = self._tracer.start_span(
                f"chat {requested}",
                context=self._under(step.span),
                kind=SpanKind.CLIENT,
                start_time=step.started_ns,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": requested,
                    "error.type": error.split(":", 1)[0],
                },
            )
            span.set_status(Status(StatusCode.ERROR, error))
            span.end()
        self._end_step(seq, "retrying" if will_retry else "failed", error)

    @_never_raises
    def step_committed(self, seq: int) -> None:
        self._end_step(seq, "committed")

    @_never_raises
    def effect_started(self, seq: int, key: str, kind: str, target: str, *, again: bool) -> None:
        step = self._step.get(seq)
        if step is None:
            return
        span = self._tracer.start_span(
            f"effect {kind}",
            context=self._under(step.span),
            kind=SpanKind.CLIENT if kind == "http_post" else SpanKind.INTERNAL,
            attributes={
                "steplog.effect.key": key,
                "steplog.effect.kind": kind,
                "steplog.effect.target": target,
                "steplog.effect.again": again,
            },
        )
        current = step.token is not None and not step.effects  # nested in the current step only
        step.effects[key] = (
            span,
            context.attach(trace.set_span_in_context(span)) if current else None,
        )

    @_never_raises
    def effect_completed(self, seq: int, key: str) -> None:
        step = self._step.get(seq)
        if step is None or key not in step.effects:
            return
        span, token = step.effects.pop(key)
        self._detach(token)
        span.end()

    # -- plumbing ----------------------------------------------------------------------------

    def _end_step(self, seq: int, outcome: str, error: str | None = None) -> None:
        step = self._step.pop(seq, None)
        if step is None:
            return
        for span, token in reversed(
            list(step.effects.values())
        ):  # unconfirmed effects of a failed attempt
            span.set_status(Status(StatusCode.ERROR, error or "not confirmed"))
            self._detach(token)
            span.end()
        step.span.set_attribute("steplog.step.outcome", outcome)
        step.span.set_attribute("steplog.step.tokens", step.tokens)
        step.span.set_attribute("steplog.step.cost_usd", step.cost)
        if error:
            step.span.set_status(Status(StatusCode.ERROR, error))
        self._detach(step.token)
        step.span.end()

    def _end_steps(self, why: str) -> None:
        for seq in sorted(self._step, reverse=True):
            self._end_step(seq, "interrupted", why)

    @staticmethod
    def _under(parent: Span | None) -> context.Context:
        return (
            trace.set_span_in_context(parent, context.Context())
            if parent is not None
            else context.Context()
        )

    @staticmethod
    def _detach(token: object | None) -> None:
        if token is not None:
            context.detach(token)  # type: ignore[arg-type]
