"""Agents the engine tests run by file path (``path.py:function``), as a user would.

``witness`` makes every kind of step, and its effects go to a *witness*: a SQLite file the test
owns, playing a far side that deduplicates on the idempotency key and records every attempt.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
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
        conn.execute(
            "CREATE TABLE IF NOT EXISTS attempt (n INTEGER PRIMARY KEY, key TEXT, i INTEGER)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, i INTEGER, value INTEGER)"
        )
        conn.execute("INSERT INTO attempt (key, i) VALUES (?, ?)", (key, i))
        conn.execute(
            "INSERT OR IGNORE INTO applied (key, i, value) VALUES (?, ?, ?)", (key, i, value)
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return {"applied": key}


@steplog.agent(budget=steplog.Budget(max_steps=100_000))
def witness(run: steplog.Run, n: int = 10, witness: str = "", pause: float = 0.0) -> dict[str, Any]:
    total = 0
    for i in range(n):
        value = run.step(f"compute {i}", compute, i, pause)
        reply = run.chat(
            [{"role": "user", "content": f"Item {i} has value {value}. Summarise."}],
            name=f"think {i}",
            max_tokens=64,
        )
        run.effect(
            f"apply {i}",
            lambda key, i=i, value=value: apply_to_witness(witness, key, i, value),
            target="witness",
            request={"i": i, "value": value},
        )
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
def chatty(run: steplog.Run, n: int = 5, stream: str = "auto") -> int:
    """``n`` model calls; ``stream``: ``auto`` (when the model can), ``on`` or ``off``."""
    streaming = {"auto": None, "on": True, "off": False}[stream]
    for i in range(n):
        run.chat(
            [{"role": "user", "content": f"Say something about item {i}."}],
            name=f"ask {i}",
            max_tokens=50,
            stream=streaming,
        )
    return n


@steplog.agent
def not_a_number(run: steplog.Run, where: str = "step") -> Any:
    """Returns NaN from a step (``where=step``) or as the agent's result (``where=result``)."""
    value = run.step("measure", float, "nan" if where == "step" else "1")
    return float("inf") if where == "result" else value


@steplog.agent(budget=steplog.Budget(max_steps=100_000))
def approval(
    run: steplog.Run, n: int = 3, witness: str = "", pause: float = 0.0, timeout: float = -1.0
) -> dict[str, Any]:
    """``n`` items sent to the witness, then a wait for the signal ``approve`` (with a timeout when
    ``timeout`` >= 0), then ``n`` more items, sent only when the signal's data approves them."""

    def send(i: int) -> None:
        value = run.step(f"compute {i}", compute, i, pause)
        run.effect(
            f"apply {i}",
            lambda key, i=i, value=value: apply_to_witness(witness, key, i, value),
            target="witness",
            request={"i": i, "value": value},
        )

    for i in range(n):
        send(i)
    try:
        decision = run.wait_for("approve", timeout=None if timeout < 0 else timeout)
    except steplog.WaitTimeout:
        return {"approved": None, "sent": n}
    if not (isinstance(decision, dict) and decision.get("approved")):
        return {"approved": False, "sent": n}
    for i in range(n, 2 * n):
        send(i)
    return {"approved": True, "sent": 2 * n, "note": decision.get("note")}


@steplog.agent
def fixable(
    run: steplog.Run, n: int = 3, witness: str = "", fixed_when: str = ""
) -> dict[str, Any]:
    """Sends ``n`` items, then fails for good (a ``PermanentError``) until the file ``fixed_when``
    exists, then sends ``n`` more."""
    import os

    def check() -> str:
        if not os.path.exists(fixed_when):
            raise steplog.PermanentError(f"{fixed_when} is missing")
        return "fixed"

    for i in range(2 * n):
        if i == n:
            run.step("check", check)
        value = run.step(f"compute {i}", compute, i, 0.0)
        run.effect(
            f"apply {i}",
            lambda key, i=i, value=value: apply_to_witness(witness, key, i, value),
            target="witness",
            request={"i": i, "value": value},
        )
    return {"sent": 2 * n}


async def _jittered(i: int, seed: int) -> int:
    import asyncio
    import random

    await asyncio.sleep(random.Random(seed * 1000 + i).uniform(0, 0.03))
    return i * i


def _jittered_sync(i: int) -> int:
    import random

    time.sleep(random.uniform(0, 0.02))
    return i + 100


@steplog.agent
async def gatherer(run: Any, n: int = 6, seed: int = 0) -> dict[str, Any]:
    """Parallel steps whose durations depend on ``seed``: completion order differs run to run."""
    import asyncio

    squares = await asyncio.gather(*(run.step(f"square {i}", _jittered, i, seed) for i in range(n)))
    replies = await asyncio.gather(
        *(
            run.chat(
                [{"role": "user", "content": f"Item {i} is {s}."}], name=f"ask {i}", max_tokens=40
            )
            for i, s in enumerate(squares)
        )
    )
    await asyncio.gather(*(run.write_file(f"out/{i}.txt", r.text) for i, r in enumerate(replies)))
    mapped = await run.map("plus", _jittered_sync, range(n), concurrency=3)
    return {"squares": squares, "mapped": mapped}


@steplog.agent
async def branching(run: Any) -> list[int]:
    """Steps made by coroutines that gather started: refused (their numbering would depend on
    timing)."""
    import asyncio

    async def branch(i: int) -> int:
        first = await run.step(f"first {i}", int, i)
        return int(await run.step(f"second {i}", int, first))

    return list(await asyncio.gather(*(branch(i) for i in range(2))))


_live = 0
_most = 0


def _counted(i: int) -> int:

    global _live, _most
    with _lock:
        _live += 1
        _most = max(_most, _live)
    time.sleep(0.02)
    with _lock:
        _live -= 1
    return _most


_lock = __import__("threading").Lock()


@steplog.agent
def mapper(run: steplog.Run, n: int = 12, concurrency: int = 3) -> dict[str, Any]:
    """``run.map`` from a sync agent: results in item order, never more than ``concurrency`` at
    once."""
    most = run.map("count", _counted, range(n), concurrency=concurrency)
    return {
        "most_at_once": max(most),
        "keys": run.map("key", lambda _i: steplog.current_key(), range(3)),
    }


@steplog.agent
async def async_approval(run: Any, witness: str = "") -> dict[str, Any]:
    """An async agent that gathers its sends, waits for ``approve``, then gathers more."""
    import asyncio

    def send(i: int) -> Any:
        return run.effect(
            f"apply {i}",
            lambda key, i=i: apply_to_witness(witness, key, i, i),
            target="witness",
            request={"i": i},
        )

    await asyncio.gather(*(send(i) for i in range(3)))
    decision = await run.wait_for("approve")
    if decision.get("approved"):
        await asyncio.gather(*(send(i) for i in range(3, 6)))
    return {"approved": decision.get("approved")}


@steplog.agent(budget=steplog.Budget(max_steps=10_000, max_recoveries=1_000))
def program(run: steplog.Run, ops: str = "[]", witness: str = "") -> dict[str, Any]:
    """Runs a generated program (JSON ``[[op, i], ...]``): the property-based simulation's agent.

    ``call`` a pure step, ``chat`` a model call, ``write`` a file, ``merge`` a row, ``apply`` an
    idempotent effect at the witness, ``once`` a non-idempotent one (an append that cannot
    deduplicate). The result sums what the steps returned, so a replay that reused a wrong
    result would show."""
    import json as _json

    total = 0
    for op, i in _json.loads(ops):
        if op == "call":
            total += run.step(f"call {i}", compute, i, 0.0)
        elif op == "chat":
            total += len(
                run.chat(
                    [{"role": "user", "content": f"item {i}"}], name=f"chat {i}", max_tokens=32
                ).text
            )
        elif op == "write":
            run.write_file(f"files/{i}.txt", f"item {i}\n")
        elif op == "merge":
            run.merge("rows.db", "items", key={"i": i}, values={"v": i * 3})
        elif op == "apply":
            run.effect(
                f"apply {i}",
                lambda key, i=i: apply_to_witness(witness, key, i, i),
                target="witness",
                request={"i": i},
            )
        elif op == "once":
            run.effect(
                f"once {i}",
                lambda key, i=i: _append_once(witness + ".appended", key),
                target="append",
                request={"i": i},
                idempotent=False,
            )
    return {"total": total}


def _append_once(path: str, key: str) -> dict[str, Any]:
    with open(path, "a") as f:
        f.write(f"{key}\n")
    return {"appended": key}


@steplog.agent
def nul_text(run: steplog.Run, fixed_when: str = "") -> str:
    """NUL characters where a log keeps text: a step's name, its result, a failure's message."""
    import os

    first = run.step("a\x00b", lambda: "x\x00y")

    def check() -> str:
        if not os.path.exists(fixed_when):
            raise RuntimeError(f"bad \x00 byte; {fixed_when} is missing")
        return "ok"

    return first + run.step("check", check)


def _fail_once(marker: str) -> str:
    """Fails transiently the first time (the marker file is made then), succeeds after."""
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        raise steplog.TransientError("the partner hiccupped; the retry policy sends it again")
    return "ok"


def _fail_until(path: str) -> str:
    import os

    if not os.path.exists(path):
        raise steplog.PermanentError(f"{path} is missing")
    return "fixed"


@steplog.agent(retry=steplog.RetryPolicy(max_attempts=3, initial_interval=0.01), needs_outbox=True)
def poster(
    run: steplog.Run,
    n: int = 4,
    pause: float = 0.0,
    hiccup: str = "",
    fixed_when: str = "",
    wait: str = "",
) -> dict[str, Any]:
    """``n`` items, each a computed step then a post to the run's outbox. Halfway: a step that fails
    once then succeeds (``hiccup``: its marker file), one that fails for good until a file exists
    (``fixed_when``), or a wait for the signal ``wait``."""
    for i in range(n):
        value = run.step(f"compute {i}", compute, i, pause)
        if i == n // 2:
            if hiccup:
                run.step("call partner", _fail_once, hiccup)
            if fixed_when:
                run.step("check", _fail_until, fixed_when)
            if wait:
                run.wait_for(wait)
        run.http_post(f"{run.outbox}/messages", {"item": i, "value": value}, name=f"post {i}")
    return {"sent": n}


@steplog.agent(budget=steplog.Budget(max_recoveries=1))
def patient(run: steplog.Run, n: int = 3, pause: float = 2.0) -> int:
    """``n`` long steps, and a poison-pill limit of one engine death per step."""
    return sum(run.step(f"think {i}", compute, i, pause) for i in range(n))


def _die_then_list_modules(listing: str) -> int:
    """The first time: SIGKILL this engine (a marker beside ``listing`` says it happened). The
    next engine, for which this is the first new step: write the modules it has loaded by now."""
    marker = Path(f"{listing}.killed")
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    Path(listing).write_text(json.dumps(sorted(sys.modules)))
    return 1


@steplog.agent
def relaunched(run: steplog.Run, listing: str = "") -> int:
    """A step, then a SIGKILL inside the second; the engine that resumes the run writes
    ``sys.modules`` to ``listing`` as its first new step runs: what a relaunch imports."""
    run.step("before the kill", int, 1)
    return run.step("first new step", _die_then_list_modules, listing)


def _talk(run: steplog.Run, i: int, chunks: int, pause: float) -> int:
    """A step that streams as a model would: ``chunks`` pieces of text, ``pause`` apart."""
    for c in range(chunks):
        run.emit(f"{i}.{c} ", stream="tokens")
        time.sleep(pause)
    return i


@steplog.agent(budget=steplog.Budget(max_steps=10_000, max_recoveries=1_000))
def streamer(run: steplog.Run, n: int = 6, chunks: int = 20, pause: float = 0.02) -> int:
    """Agent events between steps (each exactly once) and a stream of text inside each step."""
    run.emit({"phase": "start"})
    for i in range(n):
        run.step(f"talk {i}", _talk, run, i, chunks, pause)
        run.emit({"done": i})
    return n


def _plus_one(value: int) -> int:
    return value + 1


@steplog.agent
def relay(run: steplog.Run, start: int = 1, n: int = 4) -> int:
    """Adds one ``n`` times, each addition a step that takes the one before's result."""
    value = start
    for i in range(n):
        value = run.step(f"add {i + 1}", _plus_one, value)
    return value
