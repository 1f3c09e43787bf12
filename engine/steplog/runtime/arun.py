"""``AsyncRun``: the handle an ``async def`` agent gets, with the steps of ``Run`` as awaitables.

A step's sequence number is given when the step is *called*, before anything is awaited, so
``asyncio.gather(run.step(...), run.step(...))`` numbers its steps in argument order and a replay
numbers them the same way, whichever finished first. Every log write happens on the event loop's
thread (the engine's main thread), through the same attempt protocol as a sync agent's
(``Run._attempts``); what may block (a sync step function, a model call, a file write, a POST, a
merge) runs in a worker thread meanwhile, so parallel steps overlap their work while their
commits are serialised by the one writer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from steplog.errors import UsageError
from steplog.llm.base import ChatReply, Estimate, Message
from steplog.log import interrupts
from steplog.log.steps import Committed, result_of
from steplog.runtime.run import (
    EffectCall,
    Run,
    StepContext,
    _current,
    chat_args,
    effect_args,
    effect_key,
    step_args,
)
from steplog.runtime.waits import WaitOn, check_name, check_seconds, check_timeout, wake_time

T = TypeVar("T")


async def _recorded(value: Any) -> Any:
    return value


class AsyncRun:
    """What an ``async def`` agent calls; each step returns an awaitable. Attributes as ``Run``."""

    def __init__(self, run: Run, task: asyncio.Task[Any] | None = None) -> None:
        self._run = run
        self._task = task
        self.id = run.id
        self.workdir = run.workdir
        self.outbox = run.outbox
        self.params = run.params
        self.model = run.model
        self.budget = run.budget

    @property
    def incarnation(self) -> int:
        return self._run.incarnation

    # -- the public steps -------------------------------------------------------------------

    def _enter(self, name: str, kind: str, args: Any = None) -> tuple[int, Any]:
        """Number a step now. Only the agent's own task may: a step called from a task that
        ``gather`` started runs after an await, so its number would depend on which awaits
        finished first, and a replay would number the steps differently."""
        self._own_task(name)
        return self._run._enter(name, kind, args)

    def _own_task(self, name: str) -> None:
        if self._task is not None and asyncio.current_task() is not self._task:
            raise UsageError(
                f"step '{name}' was called from a task the agent started; call steps from the "
                "agent itself "
                "(gather the steps, not coroutines that make steps): asyncio.gather(run.step(...), "
                "run.step(...)) or run.map(...), a phase at a time"
            )

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """``await run.step(name, fn, ...)``: ``fn`` sync (run in a worker thread) or async."""
        seq, prior = self._enter(name, "call", step_args(args, kwargs))
        if isinstance(prior, Committed):
            return _recorded(result_of(prior.result))

        async def body(_ctx: StepContext) -> Any:
            return await _call(fn, *args, **kwargs)

        return self._drive(seq, name, "call", prior, body)

    def effect(
        self,
        name: str,
        fn: Callable[[str], Any],
        *,
        target: str = "",
        request: Any = None,
        idempotent: bool = True,
    ) -> Awaitable[Any]:
        return self._effect_step(self._run._effect_call(name, fn, target, request, idempotent))

    def write_file(
        self, path: str, content: str | bytes, *, name: str | None = None
    ) -> Awaitable[dict[str, Any]]:
        return self._effect_step(self._run._write_file_call(path, content, name))

    def http_post(
        self,
        url: str,
        body: Any,
        *,
        name: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Awaitable[dict[str, Any]]:
        return self._effect_step(self._run._http_post_call(url, body, name, headers, timeout))

    def merge(
        self,
        db: str,
        table: str,
        *,
        key: dict[str, Any],
        values: dict[str, Any],
        name: str | None = None,
    ) -> Awaitable[dict[str, Any]]:
        return self._effect_step(self._run._merge_call(db, table, key, values, name))

    def chat(
        self,
        messages: Sequence[Message],
        *,
        name: str = "chat",
        max_tokens: int = 512,
        stream: bool | None = None,
    ) -> Awaitable[ChatReply]:
        """``await run.chat(...)``: as ``Run.chat``, ``stream=`` included."""
        run = self._run
        streaming = run._streams_chat(stream)
        seq, prior = self._enter(name, "chat", chat_args(messages, max_tokens))
        if isinstance(prior, Committed):
            return _recorded(ChatReply.from_json(json.loads(prior.result or "{}")))
        if prior is not None and prior.decision is not None:
            decision = json.loads(prior.decision)

            async def recorded(_ctx: StepContext) -> Any:
                return decision

            return _as_reply(self._drive(seq, name, "chat", prior, recorded))
        estimate: Estimate = run.model.estimate(messages, max_tokens=max_tokens)

        async def ask(ctx: StepContext) -> Any:
            if run._pace and not streaming:
                await asyncio.sleep(run._pace)  # a streaming model spreads it over its pieces
                reply = await asyncio.to_thread(
                    run.model.complete,
                    messages,
                    max_tokens=max_tokens,
                    idempotency_key=effect_key(run.id, seq),
                )
            else:
                reply = await asyncio.to_thread(run._ask, ctx, messages, max_tokens, streaming)
            return run._decided(ctx, reply, estimate)

        return _as_reply(self._drive(seq, name, "chat", prior, ask, reserve=estimate))

    def patched(self, name: str) -> bool:
        """As ``Run.patched`` (not awaited: it records at most a marker step, at once)."""
        self._own_task(f"patch {name}")
        return self._run.patched(name)

    def wait_for(self, name: str, *, timeout: float | None = None) -> Awaitable[Any]:
        """``await run.wait_for(name)``: as ``Run.wait_for``; other steps go on while it waits."""
        run = self._run
        self._own_task(f"wait {name}")
        seq, entered = run._enter_wait(name, timeout)
        on = WaitOn("wait", signal=name)

        async def wait() -> Any:
            if entered is not None:
                for pause in run._waiting(seq, *entered, on, timeout):
                    await asyncio.sleep(pause)
            return run._waited(name, seq)

        return wait()

    def sleep(self, seconds: float) -> Awaitable[None]:
        """``await run.sleep(seconds)``: as ``Run.sleep``."""
        return self._sleep_until(time.time() + check_seconds(seconds))

    def sleep_until(self, when: datetime | float) -> Awaitable[None]:
        """``await run.sleep_until(when)``: as ``Run.sleep_until``."""
        return self._sleep_until(wake_time(when))

    def _sleep_until(self, until: float) -> Awaitable[None]:
        run = self._run
        self._own_task("sleep")
        seq, entered = run._enter_waiting("sleep", "sleep")

        async def wait() -> None:
            if entered is not None:
                for pause in run._waiting(seq, *entered, WaitOn("sleep"), None, until=until):
                    await asyncio.sleep(pause)

        return wait()

    def recv(self, topic: str, *, timeout: float | None = None) -> Awaitable[Any]:
        """``await run.recv(topic)``: as ``Run.recv``; other steps go on while it waits."""
        run = self._run
        check_name("run.recv", topic)
        check_timeout("run.recv", timeout)
        self._own_task(f"recv {topic}")
        seq, entered = run._enter_waiting(f"recv {topic}", "recv")

        async def wait() -> Any:
            if entered is not None:
                for pause in run._waiting(seq, *entered, WaitOn("recv", topic=topic), timeout):
                    await asyncio.sleep(pause)
            return run._received(seq)

        return wait()

    def set_event(self, key: str, value: Any) -> Awaitable[None]:
        """``await run.set_event(key, value)``: as ``Run.set_event``."""
        self._own_task(f"set_event {key}")
        self._run.set_event(key, value)
        return _recorded(None)

    def map(
        self, name: str, fn: Callable[[Any], Any], items: Iterable[Any], *, concurrency: int = 4
    ) -> Awaitable[list[Any]]:
        """``await run.map(name, fn, items, concurrency=k)``: one step per item (``name [i]``),
        at most ``k`` at once, results in item order. All are numbered now, in item order."""
        if not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(
                f"run.map(concurrency=...) must be a whole number >= 1 (got {concurrency!r})"
            )
        calls = [self.step(f"{name} [{i}]", fn, item) for i, item in enumerate(items)]
        limit = asyncio.Semaphore(concurrency)

        async def bounded(call: Awaitable[Any]) -> Any:
            async with limit:
                return await call

        async def gathered() -> list[Any]:
            return list(await asyncio.gather(*(bounded(c) for c in calls)))

        return gathered()

    # -- machinery --------------------------------------------------------------------------

    def _effect_step(self, call: EffectCall) -> Awaitable[Any]:
        seq, prior = self._enter(call.name, call.step_kind, effect_args(call))
        if isinstance(prior, Committed):
            return _recorded(result_of(prior.result))

        async def act(ctx: StepContext) -> Any:
            key, done = ctx.effect_begin(
                call.kind, call.target, call.request_hash, idempotent=call.idempotent
            )
            if done is not None:
                return done[0]
            # A cancel waits for the act and its record, as in ``StepContext.effect``.
            with interrupts.acting():
                return ctx.effect_end(key, await asyncio.to_thread(call.do, key))

        return self._drive(seq, call.name, call.step_kind, prior, act)

    async def _drive(
        self,
        seq: int,
        name: str,
        kind: str,
        prior: Any,
        body: Callable[[StepContext], Awaitable[Any]],
        *,
        reserve: Estimate | None = None,
    ) -> Any:
        """``Run._execute`` for coroutines: the same protocol, bodies awaited, pauses slept."""
        attempts = self._run._attempts(seq, name, kind, prior, reserve)
        order = next(attempts)
        while True:
            outcome: tuple[bool, Any]
            if isinstance(order, StepContext):
                token = _current.set(order)
                try:
                    outcome = (True, await body(order))
                except Exception as exc:
                    outcome = (False, exc)
                finally:
                    _current.reset(token)
            else:
                await asyncio.sleep(order)
                outcome = (True, None)
            try:
                order = attempts.send(outcome)
            except StopIteration as done:
                return done.value


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def _as_reply(decision: Awaitable[Any]) -> ChatReply:
    return ChatReply.from_json(await decision)


def run_async_agent(fn: Callable[..., Coroutine[Any, Any, T]], run: Run) -> T:
    """Run an ``async def`` agent to its end on a fresh event loop in this (the engine's) thread."""

    async def main() -> T:
        return await fn(AsyncRun(run, asyncio.current_task()), **run.params)

    return asyncio.run(main())
