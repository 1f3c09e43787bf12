"""How long an engine takes to end with its tracing collector down, next to the same run without
tracing (moved here from tests/engine/test_tracing_collector_down.py: a bound on time belongs in
a benchmark). The end waits at most STEPLOG_OTEL_FLUSH_SECONDS (1 s by default) for its spans;
the SDK's own processor waited out the exporter's retries: 7-11 s more."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS

ROUNDS = 3
SLACK_SECONDS = 3.0
"""What an engine may take beyond the run without export plus the flush: loading the exporter
library, a busy machine."""


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seconds(engine: Engine, run_id: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    done: Any = engine.run(
        "run", f"{AGENTS}:noop", "--run-id", run_id, "--db", str(engine.db), "--param", "n=7",
        env=env, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return took


def test_a_run_whose_collector_is_down_takes_as_long_as_one_without_tracing(
    engine: Engine, silent_collector: str
) -> None:
    engine.env = {
        k: v for k, v in engine.env.items() if not k.startswith(("OTEL_", "STEPLOG_OTEL_"))
    }
    where = {
        "no tracing": {},
        "closed port": {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}"},
        "silent listener": {"OTEL_EXPORTER_OTLP_ENDPOINT": silent_collector},
    }
    took: dict[str, list[float]] = {name: [] for name in where}
    for r in range(ROUNDS):
        for name, env in where.items():
            took[name].append(seconds(engine, f"{name.replace(' ', '-')}-{r}", env))
    median = {name: statistics.median(values) for name, values in took.items()}
    print(
        "\n7-step run, median of "
        f"{ROUNDS}: " + ", ".join(f"{name} {value:.2f} s" for name, value in median.items())
    )
    for name in ("closed port", "silent listener"):
        assert median[name] < median["no tracing"] + 1.0 + SLACK_SECONDS, median
