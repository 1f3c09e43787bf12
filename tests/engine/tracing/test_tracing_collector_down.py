"""A tracing collector that is down, or that never answers, never holds an engine up: spans go
out from a thread of their own, the process's end waits for them at most
STEPLOG_OTEL_FLUSH_SECONDS (1 s by default), then drops the rest with one line saying how many
and where to. OTEL_EXPORTER_OTLP_HEADERS (it carries tokens) is checked before anything runs and
never printed. Real engine processes, real sockets on 127.0.0.1.

No test here times an engine: the exporter is told to keep trying for 600 s, so an engine that
waited for it would never end within a test's deadline. How long a run takes with its collector
down, next to one without tracing, is measured in ``tests/benchmarks/test_tracing_bench.py``."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from helpers.engine import Engine
from helpers.paths import AGENTS

NOOP = f"{AGENTS}:noop"
WITNESS = f"{AGENTS}:witness"
SECRET = "s3cr3t-T0KEN-4711"
PATIENT_EXPORTER = {"OTEL_EXPORTER_OTLP_TIMEOUT": "600"}
"""The OTLP exporter's own deadline (seconds) for one export, its retries included."""
EXIT_STOPPED = 130

pytestmark = pytest.mark.usefixtures("untraced")


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)  # read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    for conn in held:
        conn.close()


class _Collector(ThreadingHTTPServer):
    """A working OTLP/HTTP receiver: keeps the span names and the headers of each POST."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay = delay
        """Seconds each POST waits before it is answered."""
        self.names: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.server.delay)
        request = ExportTraceServiceRequest.FromString(body)
        names = [s.name for r in request.resource_spans for sc in r.scope_spans for s in sc.spans]
        with self.server.lock:
            self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
            self.server.names += names
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def serving(server: _Collector) -> Iterator[_Collector]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def collector() -> Iterator[_Collector]:
    yield from serving(_Collector())


@pytest.fixture
def slow_collector() -> Iterator[_Collector]:
    """A working receiver that answers each POST after 2 s."""
    yield from serving(_Collector(delay=2.0))


def seven_steps(engine: Engine, run_id: str) -> list[str]:
    """``steplog run`` of a 7-step run (8 spans with its root)."""
    return ["run", NOOP, "--run-id", run_id, "--db", str(engine.db), "--param", "n=7"]


def run(engine: Engine, *args: str, env: dict[str, str] | None = None) -> Any:
    return engine.run(*args, env=env, timeout=120)


@pytest.fixture
def untraced(engine: Engine) -> Engine:
    """The engine's environment with no OpenTelemetry setting at all (each test adds its own)."""
    engine.env = {
        k: v for k, v in engine.env.items() if not k.startswith(("OTEL_", "STEPLOG_OTEL_"))
    }
    return engine


def said(stderr: str) -> list[str]:
    """What an engine printed on stderr beyond its usual start and stop lines."""
    usual = ("steplog: starting run ", "steplog: stopped by a signal;")
    return [line for line in stderr.splitlines() if not line.startswith(usual)]


@pytest.mark.parametrize("where", ["closed port", "silent listener"])
def test_a_run_whose_collector_is_down_ends_without_waiting_for_the_exporter(
    engine: Engine, tmp_path: Path, silent_collector: str, where: str
) -> None:
    url = f"http://127.0.0.1:{closed_port()}" if where == "closed port" else silent_collector
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, **PATIENT_EXPORTER}
    traced = run(engine, *seven_steps(engine, "traced"), env=env)

    assert traced.returncode == 0, traced.stderr
    # One line says what was lost and where it was going; the exporter's retries say nothing.
    [line] = said(traced.stderr)
    assert line.startswith(f"steplog: tracing: dropped 8 of 8 spans bound for {url}/v1/traces")
    assert "8 were still unsent after the 1 s the end waits (STEPLOG_OTEL_FLUSH_SECONDS)" in line
    assert engine.status("traced")["status"] == "succeeded"


def test_the_flush_is_as_long_as_the_variable_says(
    engine: Engine, slow_collector: _Collector
) -> None:
    """A collector that answers after 2 s: with STEPLOG_OTEL_FLUSH_SECONDS=0 the end does not
    wait for it and drops every span; given 60 s, the end waits for the answer and drops none."""
    url = f"http://127.0.0.1:{slow_collector.server_address[1]}"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, **PATIENT_EXPORTER}
    # Nothing goes out before the run ends (the batch delay is 10 min), then all 8 spans at once.
    env["OTEL_BSP_SCHEDULE_DELAY"] = "600000"
    hasty = run(
        engine, *seven_steps(engine, "hasty"), env={**env, "STEPLOG_OTEL_FLUSH_SECONDS": "0"}
    )
    assert hasty.returncode == 0, hasty.stderr
    [line] = said(hasty.stderr)
    assert "8 were still unsent after the 0 s the end waits" in line

    patient = run(
        engine, *seven_steps(engine, "patient"), env={**env, "STEPLOG_OTEL_FLUSH_SECONDS": "60"}
    )
    assert patient.returncode == 0, patient.stderr
    assert said(patient.stderr) == []
    with slow_collector.lock:
        assert slow_collector.names.count("s0") >= 1 and "steplog run" in slow_collector.names


def test_a_stopped_engine_exits_promptly_though_its_collector_never_answers(
    engine: Engine, tmp_path: Path, silent_collector: str
) -> None:
    """SIGTERM mid-run (Stop engine, a worker's drain): the engine stops at its safe point, waits
    the flush out, says what it dropped, and exits with its usual code."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": silent_collector,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        **PATIENT_EXPORTER,
    }
    proc = engine.start(
        "run",
        WITNESS,
        "--run-id",
        "w",
        "--db",
        str(engine.db),
        "--param",
        "n=40",
        "--param",
        "pause=0.2",
        "--param",
        f"witness={tmp_path / 'w.db'}",
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while engine.events("step_committed") < 6:  # an export to the listener is in flight by now
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)  # waiting on the exporter: 600 s
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == EXIT_STOPPED, stderr
    [line] = said(stderr)
    assert line.startswith("steplog: tracing: dropped ")
    assert f"bound for {silent_collector}/v1/traces" in line
    assert engine.status("w")["status"] == "running"  # resumable, as after any stop


MALFORMED = {
    "no equals sign": f"Bearer {SECRET}",
    "a semicolon in the value": f"Authorization=Bearer {SECRET};x",
    "a quote in the value": f'x-a=1,Authorization="{SECRET}"',
    "a bad escape": f"Authorization=Bearer%20{SECRET}%zz",
    "a line break once decoded": f"Authorization=Bearer%20{SECRET}%0D%0AX-Injected:%201",
}


def assert_refused(done: Any, variable: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"steplog: {variable} is malformed: its entry "), line
    assert SECRET not in done.stderr and "Bearer" not in done.stderr


def test_malformed_otlp_headers_are_refused_before_anything_is_written(engine: Engine) -> None:
    first = engine.run("run", NOOP, "--run-id", "earlier", "--db", str(engine.db), "--param", "n=2")
    assert first.returncode == 0, first.stderr
    before = engine.db.read_bytes()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "OTEL_EXPORTER_OTLP_HEADERS": MALFORMED["a semicolon in the value"],
    }

    for args in (
        ["run", NOOP, "--run-id", "new", "--db", str(engine.db), "--param", "n=2"],
        ["run", NOOP, "--run-id", "earlier", "--db", str(engine.db)],
        ["worker", "--db", str(engine.db), "--drain"],
    ):
        assert_refused(engine.run(*args, env=env, timeout=60), "OTEL_EXPORTER_OTLP_HEADERS")
        assert engine.db.read_bytes() == before, args


@pytest.mark.parametrize(
    ("how", "variable"),
    [
        ("no equals sign", "OTEL_EXPORTER_OTLP_HEADERS"),
        ("a semicolon in the value", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
        ("a quote in the value", "OTEL_EXPORTER_OTLP_HEADERS"),
        ("a bad escape", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
        ("a line break once decoded", "OTEL_EXPORTER_OTLP_HEADERS"),
    ],
)
def test_every_malformed_form_is_refused_without_being_printed(
    engine: Engine, how: str, variable: str
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        variable: MALFORMED[how],
    }
    assert_refused(engine.run("run", NOOP, "--db", str(engine.db), env=env, timeout=60), variable)
    assert not engine.db.exists()


def test_well_formed_headers_reach_a_working_collector_and_never_stderr(
    engine: Engine, collector: _Collector
) -> None:
    """The plain form (a space in the value) and the URL-encoded one both work; the spans arrive."""
    url = f"http://127.0.0.1:{collector.server_address[1]}"
    forms = [f"Authorization=Bearer {SECRET},x-team=a", f"authorization=Bearer%20{SECRET}"]
    for n, headers in enumerate(forms):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_HEADERS": headers}
        done = run(engine, *seven_steps(engine, f"h{n}"), env=env)
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stdout + done.stderr and said(done.stderr) == []
    with collector.lock:
        assert collector.names.count("steplog run") == 2 and collector.names.count("s0") == 2
        assert {h["authorization"] for h in collector.headers} == {f"Bearer {SECRET}"}


def test_bad_flush_seconds_are_refused(engine: Engine) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "STEPLOG_OTEL_FLUSH_SECONDS": "soon",
    }
    done = engine.run("run", NOOP, "--db", str(engine.db), env=env, timeout=60)
    assert done.returncode == 2 and not engine.db.exists()
    assert done.stderr.splitlines() == [
        "steplog: STEPLOG_OTEL_FLUSH_SECONDS must be a number of seconds from 0 to 600 "
        "(got 'soon'): how long an engine's end waits for its spans to be sent"
    ]


def test_opentelemetry_log_records_never_carry_a_header_value(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever an OpenTelemetry logger says outside the export thread goes on to the program's
    handlers with every header value masked (the export thread's own troubles are summed up in
    the one drop line instead)."""
    from steplog.tracing.export import guard_logs

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{SECRET},x-team=blue")
    logger = logging.getLogger("opentelemetry")
    saved = list(logger.handlers), logger.propagate
    try:
        guard_logs([])
        with caplog.at_level(logging.WARNING):
            library = logging.getLogger("opentelemetry.exporter.otlp.proto.http.some_module")
            library.warning("request headers %s", {"authorization": f"Bearer {SECRET}"})
            library.error("token %s refused", SECRET)
    finally:
        logger.handlers[:], logger.propagate = saved
    assert caplog.messages == ["request headers {'authorization': '***'}", "token *** refused"]
