"""OpenTelemetry traces: one per incarnation, a span per step attempt, effects and model calls
as children; through the program's own TracerProvider, or to an OTLP/HTTP receiver the standard
variables name; and nothing of OpenTelemetry imported when tracing is off."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import steplog
from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS

WITNESS = f"{AGENTS}:witness"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The program's own TracerProvider, exporting to memory; the global one is restored after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = saved


def _user_work(i: int) -> int:
    with trace.get_tracer("user-code").start_as_current_span(f"user work {i}"):
        return i * 2


@steplog.agent
def traced(run: steplog.Run) -> int:
    a = run.step("double", _user_work, 21)
    run.chat([{"role": "user", "content": "Summarise 42."}], name="summarise", max_tokens=32)
    run.write_file("out.txt", str(a))
    return a


def by_name(found: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [s for s in found if s.name == name]
    return span


def test_a_run_is_one_trace_with_a_span_per_step_and_its_effects_and_model_calls(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    assert traced.run("t1", db=tmp_path / "log.db") == 42
    found = list(spans.get_finished_spans())

    root = by_name(found, "steplog run")
    assert root.parent is None
    assert {s.context.trace_id for s in found} == {root.context.trace_id}
    assert {
        "steplog.run.id": "t1",
        "steplog.incarnation": 1,
        "steplog.resumed": False,
        "steplog.run.status": "succeeded",
    }.items() <= dict(root.attributes or {}).items()
    steps = {s.name: s for s in found if s.attributes and "steplog.step.seq" in s.attributes}
    assert list(steps) == ["double", "summarise", "write out.txt"]
    for seq, step in enumerate(steps.values(), 1):
        assert step.parent is not None and step.parent.span_id == root.context.span_id
        assert step.attributes is not None
        assert (
            step.attributes["steplog.step.seq"],
            step.attributes["steplog.step.attempt"],
            step.attributes["steplog.step.redone"],
            step.attributes["steplog.step.outcome"],
        ) == (seq, 1, False, "committed")

    user = by_name(found, "user work 21")  # the agent's own span nests under its step
    assert user.parent is not None and user.parent.span_id == steps["double"].context.span_id

    model = by_name(found, "chat offline")
    assert model.parent is not None and model.parent.span_id == steps["summarise"].context.span_id
    attrs = dict(model.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == "offline"
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    assert steps["summarise"].attributes is not None
    assert (
        steps["summarise"].attributes["steplog.step.tokens"]
        == attrs["gen_ai.usage.input_tokens"] + attrs["gen_ai.usage.output_tokens"]
    )

    effect = by_name(found, "effect write_file")
    assert (
        effect.parent is not None
        and effect.parent.span_id == steps["write out.txt"].context.span_id
    )
    assert dict(effect.attributes or {})["steplog.effect.key"] == "t1:3"


class _BrokenTracer(trace.NoOpTracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("collector library bug")


class _BrokenProvider(TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _BrokenTracer()


@steplog.agent
def plain(run: steplog.Run) -> str:
    run.chat([{"role": "user", "content": "Hello."}], name="greet", max_tokens=16)
    run.write_file("out.txt", "ok")
    return "ok"


def test_a_tracing_failure_never_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(_BrokenProvider())
    try:
        assert plain.run("b1", db=tmp_path / "log.db") == "ok"
    finally:
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = saved
    said = [ln for ln in capsys.readouterr().err.splitlines() if "tracing failed" in ln]
    assert said == [
        "steplog: tracing failed (RuntimeError: collector library bug); the run goes on"
    ]


def test_parallel_steps_are_siblings_under_the_incarnation(
    spans: InMemorySpanExporter, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """asyncio.gather and run.map open several steps at once: each span still has the right
    parent."""
    from helpers import agents_for_tests as agents

    agents.gatherer.run("g1", db=tmp_path / "log.db", n=4)
    found = list(spans.get_finished_spans())
    root = by_name(found, "steplog run")
    steps = [s for s in found if s.attributes and "steplog.step.seq" in s.attributes]
    assert len(steps) >= 16 and all(
        s.parent is not None and s.parent.span_id == root.context.span_id for s in steps
    )
    by_id = {s.context.span_id: s for s in steps}
    for child in (s for s in found if s.name.startswith(("chat ", "effect "))):
        assert child.parent is not None and child.parent.span_id in by_id
    assert "tracing failed" not in capsys.readouterr().err
    assert trace.get_current_span() is trace.INVALID_SPAN  # every context attached was detached


@steplog.agent(retry=steplog.RetryPolicy(max_attempts=2, initial_interval=0.0))
def fails_once(run: steplog.Run, marker: str) -> str:
    def flaky() -> str:
        if not Path(marker).exists():
            Path(marker).write_text("failed once")
            raise RuntimeError("first attempt fails")
        return "ok"

    return run.step("flaky", flaky)  # type: ignore[no-any-return]


def test_a_retried_step_is_one_span_per_attempt(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    assert fails_once.run("f1", db=tmp_path / "log.db", marker=str(tmp_path / "marker")) == "ok"
    attempts = [s for s in spans.get_finished_spans() if s.name == "flaky"]
    assert [(s.attributes or {}).get("steplog.step.attempt") for s in attempts] == [1, 2]
    assert [(s.attributes or {}).get("steplog.step.outcome") for s in attempts] == [
        "retrying",
        "committed",
    ]
    assert attempts[0].status.description == "RuntimeError: first attempt fails"


def test_without_otel_settings_nothing_of_opentelemetry_is_imported(
    tmp_path: Path, engine: Engine
) -> None:
    """Start-up is unchanged when tracing is off: a whole run (from Python, and from the command
    line's module) leaves no opentelemetry module loaded, though the package is installed."""
    script = (
        "import sys, steplog, steplog.cli\n"
        f"sys.path.insert(0, {str(AGENTS.parent)!r})\n"
        "import agents_for_tests as a\n"
        f"a.witness.run('w', db={str(tmp_path / 'log.db')!r}, n=2, "
        f"witness={str(tmp_path / 'w.db')!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    clean = {k: v for k, v in engine.env.items() if not k.startswith("OTEL_")}
    for extra in (
        {},
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    ):
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env={**clean, **extra},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"


class _Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: decodes each protobuf export request into plain spans."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}.get(
                "service.name"
            )
            for scope in resource.scope_spans:
                for s in scope.spans:
                    attrs = {a.key: _value(a.value) for a in s.attributes}
                    found.append(
                        {
                            "name": s.name,
                            "trace": s.trace_id.hex(),
                            "id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "attrs": attrs,
                            "service": service,
                            "path": self.path,
                        }
                    )
        with self.server.lock:
            self.server.spans.extend(found)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_killed_run_sends_both_incarnations_to_an_otlp_receiver(
    engine: Engine, receiver: _Receiver, tmp_path: Path
) -> None:
    """Real engine processes, a real SIGKILL, a real OTLP/HTTP receiver on 127.0.0.1: the killed
    incarnation's finished steps arrive, its trace stops there; the next one's root names the
    takeover and its first step is marked redone."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OTEL_SERVICE_NAME": "steplog-test",
    }
    args = [
        "run",
        WITNESS,
        "--run-id",
        "k",
        "--db",
        str(engine.db),
        "--param",
        "n=4",
        "--param",
        "pause=0.4",
        "--param",
        f"witness={tmp_path / 'w.db'}",
    ]
    proc = engine.start(*args, env=env)

    def inside_second_compute() -> bool:
        """Step 5 committed and nothing since: step 6, "compute 1", runs (0.4 s: its start is
        written with its commit, a deferred start)."""
        rows = (
            engine.query("SELECT kind, seq FROM event ORDER BY id DESC LIMIT 1")
            if engine.db.exists()
            else []
        )
        return bool(rows) and tuple(rows[0]) == ("step_committed", 5)

    try:
        _wait_for(
            lambda: engine.events("step_committed") >= 5 and inside_second_compute(),
            "the second compute step",
        )
        time.sleep(0.1)  # the batch processor exports every 20 ms: the first five steps go out
    finally:
        kill_group(proc)
    done = engine.run(*args, env=env)
    assert done.returncode == 0, done.stderr

    def roots() -> list[dict[str, Any]]:
        with receiver.lock:
            return [s for s in receiver.spans if s["name"] == "steplog run"]

    _wait_for(lambda: roots(), "the second incarnation's root span")
    with receiver.lock:
        got = list(receiver.spans)
    [root] = roots()  # the killed incarnation's root never ended, so it was never sent
    assert root["path"] == "/v1/traces" and root["service"] == "steplog-test"
    assert root["attrs"]["steplog.incarnation"] == 2 and root["attrs"]["steplog.resumed"] is True
    assert (
        "dead" in root["attrs"]["steplog.takeover"]
        and root["attrs"]["steplog.previous_pid"] == proc.pid
    )
    first = [
        s
        for s in got
        if s["attrs"].get("steplog.step.seq") is not None and s["trace"] != root["trace"]
    ]
    assert {s["attrs"]["steplog.step.seq"] for s in first} == {1, 2, 3, 4, 5}
    second = {
        s["attrs"]["steplog.step.seq"]: s
        for s in got
        if s["trace"] == root["trace"] and "steplog.step.seq" in s["attrs"]
    }
    assert sorted(second) == list(range(6, 21))
    assert second[6]["attrs"]["steplog.step.redone"] is True
    assert all(not s["attrs"]["steplog.step.redone"] for seq, s in second.items() if seq > 6)
    assert all(s["parent"] == root["id"] for s in second.values())
    effects = [s for s in got if s["name"].startswith("effect ") and s["trace"] == root["trace"]]
    assert {s["attrs"]["steplog.effect.key"] for s in effects} >= {"k:8", "k:9", "k:10"}
