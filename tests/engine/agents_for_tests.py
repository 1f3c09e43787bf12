"""Agents the engine tests run by file path (``path.py:function``), as a user would.

``witness`` makes every kind of step, and its effects go to a *witness*: a SQLite file the test
owns, playing a far side that deduplicates on the idempotency key and records every attempt.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import steplog


def compute(i: int, pause: float) -> int:
    if pause:
        time.sleep(pause)
    return (i * 7919) % 1000


def apply_to_witness(witness: str, key: str, i: int, value: int) -> dict[str, Any]:
    conn = sqlite3.connect(witness, timeout=30, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE IF NOT EXISTS attempt (n INTEGER PRIMARY KEY, key TEXT, i INTEGER)")
        conn.execute("CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, i INTEGER, value INTEGER)")
        conn.execute("INSERT INTO attempt (key, i) VALUES (?, ?)", (key, i))
        conn.execute("INSERT OR IGNORE INTO applied (key, i, value) VALUES (?, ?, ?)", (key, i, value))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return {"applied": key}


@steplog.agent(budget=steplog.Budget(max_steps=100_000))
def witness(run: steplog.Run, n: int = 10, witness: str = "", pause: float = 0.0) -> dict[str, Any]:
    total = 0
    for i in range(n):
        value = run.step(f"compute {i}", compute, i, pause)
        reply = run.chat([{"role": "user", "content": f"Item {i} has value {value}. Summarise."}],
                         name=f"think {i}", max_tokens=64)
        run.effect(f"apply {i}", lambda key, i=i, value=value: apply_to_witness(witness, key, i, value),
                   target="witness", request={"i": i, "value": value})
        run.write_file(f"out/{i}.txt", f"{i}: {value}\n{reply.text}\n")
        run.merge("rows.db", "items", key={"i": i}, values={"value": value})
        total += value
    return {"n": n, "total": total}


@steplog.agent
def noop(run: steplog.Run, n: int = 100) -> int:
    for i in range(n):
        run.step(f"s{i}", int, i)
    return n


STEPS_PER_ITEM = 5


@steplog.agent(budget=steplog.Budget(max_recoveries=2))
def suicidal(run: steplog.Run) -> str:
    """Its second step kills its own engine every time: a poison pill."""
    import os
    import signal

    run.step("fine", int, 1)
    run.step("deadly", lambda: os.kill(os.getpid(), signal.SIGKILL))
    return "unreachable"


def _send_once(path: str) -> dict[str, Any]:
    with open(path, "a") as f:
        f.write(f"{steplog.current_key()}\n")
    return {"sent": True}


@steplog.agent
def fire_and_forget(run: steplog.Run, outbox_file: str = "") -> str:
    """A non-idempotent effect (an append that cannot deduplicate)."""
    run.step("prepare", int, 1)
    run.effect("send", lambda key: _send_once(outbox_file), target=outbox_file, idempotent=False)
    return "sent"


@steplog.agent
def chatty(run: steplog.Run, n: int = 5) -> int:
    for i in range(n):
        run.chat([{"role": "user", "content": f"Say something about item {i}."}], name=f"ask {i}", max_tokens=50)
    return n


@steplog.agent
def not_a_number(run: steplog.Run, where: str = "step") -> Any:
    """Returns NaN from a step (``where=step``) or as the agent's result (``where=result``)."""
    value = run.step("measure", float, "nan" if where == "step" else "1")
    return float("inf") if where == "result" else value
