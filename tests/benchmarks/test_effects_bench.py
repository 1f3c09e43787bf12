"""Effect benchmarks: calls per second and CPU per call of each kind of step, side by side.

Not part of the normal test run (``addopts`` ignores this folder). Run:

    python -m pytest tests/benchmarks -s -p no:cacheprovider

Each kind runs as a real ``steplog run`` engine process through the CLI; the agent itself times
its loop of calls (wall clock, and the engine process's CPU, user + system over all its threads,
from ``resource.getrusage``), so start-up is not counted. Kinds take turns in ``ROUNDS`` rounds
so that a disk or CPU that is busier at one moment (fsync latency swings a lot on a shared
machine) weighs on every kind alike. The targets (issue 19): ``http_post`` within 4x the time of
``write_file`` per call (asserted), and at most 2 ms of engine CPU per post (printed: on a shared
2-core machine CPU per call swings by half from one run to the next).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import steplog

CALLS = 400
ROUNDS = 4
KINDS = ("step", "effect", "write_file", "http_post", "merge", "chat")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _nothing(key: str) -> None:
    return None


def _call(run: steplog.Run, kind: str, i: int) -> None:
    if kind == "step":
        run.step("noop", int, i)
    elif kind == "effect":  # the ledger's two commits around an effect that does nothing
        run.effect("nothing", _nothing, request=i)
    elif kind == "write_file":
        run.write_file(f"out/{i}.txt", f"line {i}\n")
    elif kind == "http_post":
        run.http_post(f"{run.outbox}/messages", {"ticket_id": f"B-{i}", "text": f"message {i}"})
    elif kind == "merge":
        run.merge("bench.db", "rows", key={"id": i}, values={"status": "done"})
    elif kind == "chat":
        run.chat([{"role": "user", "content": f"question {i}"}], name=f"ask {i}", max_tokens=16)
    else:
        raise ValueError(f"unknown kind {kind!r}; one of {KINDS}")


@steplog.agent(budget=steplog.Budget(max_steps=1_000_000, max_retries=None, max_recoveries=None))
def effects_bench(
    run: steplog.Run, kind: str = "step", n: int = CALLS, first: int = 0
) -> dict[str, Any]:
    """``n`` steps of one kind, each with its own payload. The first is timed apart (it pays the
    run's one-time costs: imports, an HTTP client); the others are the per-call figures."""
    wall = time.perf_counter()
    _call(run, kind, int(first))
    first_wall = time.perf_counter() - wall
    wall, cpu = time.perf_counter(), _cpu()
    for i in range(int(first) + 1, int(first) + int(n)):
        _call(run, kind, i)
    return {
        "calls": int(n) - 1,
        "wall": time.perf_counter() - wall,
        "cpu": _cpu() - cpu,
        "first": first_wall,
    }


@dataclass
class Measured:
    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    first: float = 0.0
    """Summed wall time of each engine's first call of the kind."""


def run_engine(tmp: Path, kind: str, n: int, first: int, extra: list[str]) -> dict[str, Any]:
    """One ``steplog run`` to completion; what its agent measured."""
    run_id = f"{kind}-{first}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLOG_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parents[2] / "engine"), env.get("PYTHONPATH", "")]
    )
    argv = [
        sys.executable,
        "-m",
        "steplog",
        "run",
        f"{__file__}:effects_bench",
        "--run-id",
        run_id,
        "--db",
        str(tmp / f"{kind}.db"),
        "--workdir",
        str(tmp / kind),
        "--param",
        f"kind={kind}",
        "--param",
        f"n={n}",
        "--param",
        f"first={first}",
        *extra,
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{kind}: exit {done.returncode}: {done.stderr}"
    measured: dict[str, Any] = json.loads(done.stdout.split(" succeeded: ", 1)[1])
    return measured


def test_effect_benchmarks(tmp_path: Path) -> None:
    # Imported here, not at the top: the engine processes import this file for its agent.
    from helpers.openai_server import FakeOpenAI
    from steplog.outbox import start_outbox

    totals = {kind: Measured() for kind in KINDS}
    with start_outbox(tmp_path / "outbox.db") as outbox, FakeOpenAI() as fake:
        extra: dict[str, list[str]] = {
            "http_post": ["--outbox", outbox.url],
            "chat": ["--model", "bench-model", "--base-url", fake.base_url],
        }
        per_round = CALLS // ROUNDS
        for r in range(ROUNDS):
            for kind in KINDS:
                m = run_engine(tmp_path, kind, per_round, r * per_round, extra.get(kind, []))
                t = totals[kind]
                t.calls, t.wall, t.cpu = t.calls + m["calls"], t.wall + m["wall"], t.cpu + m["cpu"]
                t.first += m["first"]
        assert len(outbox.ledger().deliveries) == CALLS  # every post delivered, none twice
        assert fake.call_count == CALLS
    base = totals["write_file"]
    print()
    print(
        f"{CALLS} calls of each kind through `steplog run` (--sync full), {ROUNDS} interleaved "
        f"rounds of {per_round}; per call: each engine's first call apart"
    )
    print(
        f"{'kind':<11} {'calls/s':>9} {'ms/call':>9} {'CPU ms/call':>12} "
        f"{'time vs write_file':>19} {'1st call ms':>12}"
    )
    for kind, m in totals.items():
        print(
            f"{kind:<11} {m.calls / m.wall:>9,.0f} {m.wall / m.calls * 1000:>9.2f} "
            f"{m.cpu / m.calls * 1000:>12.2f} {m.wall / base.wall:>18.2f}x "
            f"{m.first / ROUNDS * 1000:>12.1f}"
        )
    post, effect = totals["http_post"], totals["effect"]
    ratio, post_cpu = post.wall / base.wall, post.cpu / post.calls
    request_cpu = post_cpu - effect.cpu / effect.calls
    print(
        f"target: http_post within 4x write_file's time: {ratio:.2f}x, "
        f"{'met' if ratio <= 4 else 'NOT MET'}"
    )
    print(
        f"target: <= 2 ms engine CPU per post: {post_cpu * 1000:.2f} ms, "
        f"{'met' if post_cpu <= 0.002 else 'NOT MET'} (the request itself: "
        f"{request_cpu * 1000:.2f} ms over a ledgered effect that does nothing)"
    )
    assert ratio <= 4, (
        f"http_post {post.wall / post.calls * 1000:.1f} ms/call vs write_file "
        f"{base.wall / base.calls * 1000:.1f}"
    )
