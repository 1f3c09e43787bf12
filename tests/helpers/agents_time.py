"""Agents for the time and messages tests (issue 33), named by path as a user names their own
file (``f"{TIME_AGENTS}:sleeper"``)."""

from __future__ import annotations

import time
from typing import Any

import steplog


def _now() -> float:
    return time.time()


@steplog.agent(budget=steplog.Budget(max_steps=10_000, max_recoveries=1_000))
def sleeper(run: steplog.Run, seconds: float = 2.0) -> dict[str, Any]:
    """Records a time, sleeps ``seconds`` durably, records the time it woke."""
    before = run.step("before", _now)
    run.sleep(seconds)
    return {"before": before, "after": run.step("after", _now)}


@steplog.agent(budget=steplog.Budget(max_steps=100_000, max_recoveries=1_000))
def receiver(
    run: steplog.Run, n: int = 10, topic: str = "work", timeout: float = -1.0
) -> dict[str, Any]:
    """Receives ``n`` messages on ``topic`` (``timeout`` < 0: waits for each as long as it takes)
    and returns them in the order received."""
    got = [run.recv(topic, timeout=None if timeout < 0 else timeout) for _ in range(n)]
    return {"got": got}


@steplog.agent
def publisher(run: steplog.Run, n: int = 3, pause: float = 0.0) -> int:
    """Sets its event ``progress`` after each of ``n`` steps, then ``status`` to ``done``."""
    run.set_event("status", "working")
    for i in range(n):
        run.step(f"work {i}", time.sleep, pause)
        run.set_event("progress", i)
    run.set_event("status", "done")
    return n


@steplog.agent
async def async_sleeper(run: Any, seconds: float = 0.5) -> dict[str, Any]:
    """``sleeper``, recv and set_event as an ``async def`` agent."""
    before = await run.step("before", _now)
    await run.sleep(seconds)
    await run.set_event("woke", True)
    value = await run.recv("go", timeout=0.2)
    return {"before": before, "after": await run.step("after", _now), "value": value}
