"""``Run``: what agent code calls. Every ``run.*`` call is one step with a sequence number.

On resume the agent function is re-entered from the top; a step the log has committed returns its
recorded result without running, and the first unfinished step runs. The order inside a step is
*decide (commit), act (ledgered, keyed), record (commit)*; see DESIGN.md "One step".
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

from steplog.errors import (
    Blocked,
    Cancelled,
    Fenced,
    GaveUp,
    NeedsReconciliation,
    NonDeterminism,
    RunFailed,
    RunStopped,
    RunWaiting,
    SteplogError,
    StorageExhausted,
    UsageError,
    WaitTimeout,
)
from steplog.llm.base import ChatModel, ChatReply, Estimate, Message, StreamingChatModel
from steplog.log import interrupts
from steplog.log.doorbell import Doorbell
from steplog.log.journal import (
    Journal,
    cancel_request,
    deaths_inside,
    deaths_since_progress,
    dumps,
    why_not_json,
)
from steplog.log.ledger import EffectRecord, carried_effect, load_effect, released_effects
from steplog.log.location import LogLocation
from steplog.log.queue import WAKE_LEAD_SECONDS
from steplog.log.steps import Committed, StepRecord, as_stored, result_of
from steplog.log.streams import STREAM_NAME_MAX, TOKENS, Pending
from steplog.policies import Budget, RetryPolicy
from steplog.runtime import crashpoints, effects
from steplog.runtime.redact import redact
from steplog.runtime.versions import call_hash, describe_call, short
from steplog.runtime.waits import WaitOn, check_name, check_seconds, check_timeout, wake_time

PATCH_KIND = "patch"
"""The kind of ``run.patched(name)``'s marker step (``steplog.log.versions`` reads it so)."""

P = ParamSpec("P")
T = TypeVar("T")

_current: ContextVar[StepContext | None] = ContextVar("steplog_step", default=None)


_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS}


def _in_step(ctx: StepContext, fn: Callable[[Any], Any], item: Any) -> Any:
    """A ``run.map`` body on a pool thread: ``current_key()`` works inside it as in any step."""
    _current.set(ctx)
    try:
        return fn(item)
    finally:
        _current.set(None)


def _drive_parallel(
    run: Run,
    fn: Callable[[Any], Any],
    todo: list[tuple[int, str, Any, int, StepRecord | None]],
    results: list[Any],
    concurrency: int,
) -> None:
    """Drive several steps' attempt protocols at once from this thread; bodies (and the pauses
    between retries) run on a pool of ``concurrency`` threads."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="steplog-map")
    active: dict[
        Future[Any], tuple[int, Generator[StepContext | float, tuple[bool, Any], Any], Any]
    ] = {}
    queue = list(reversed(todo))

    def submit(
        i: int,
        attempts: Generator[StepContext | float, tuple[bool, Any], Any],
        order: StepContext | float,
        item: Any,
    ) -> None:
        future = (
            pool.submit(_in_step, order, fn, item)
            if isinstance(order, StepContext)
            else pool.submit(time.sleep, order)
        )
        active[future] = (i, attempts, item)

    try:
        while queue or active:
            while queue and len(active) < concurrency:
                i, step_name, item, seq, prior = queue.pop()
                attempts = run._attempts(seq, step_name, "call", prior, None)
                submit(i, attempts, next(attempts), item)
            finished, _ = wait(list(active), return_when=FIRST_COMPLETED)
            for future in finished:
                i, attempts, item = active.pop(future)
                exc = future.exception()
                try:
                    order = attempts.send(
                        (False, exc) if exc is not None else (True, future.result())
                    )
                except StopIteration as done:
                    results[i] = done.value
                    continue
                submit(i, attempts, order, item)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def storage_problem(exc: BaseException) -> str | None:
    """A full disk, a quota or an I/O error behind ``exc`` (an ``OSError``, or SQLite's own words
    for them from a merge), in a few words; ``None`` for any other failure."""
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, OSError) and e.errno in _STORAGE_ERRNOS:
            where = f": {e.filename}" if e.filename else ""
            return f"{e.strerror or os.strerror(e.errno or 0)}{where}"
        if (target := effects.target_storage_problem(e)) is not None:
            return target
    return None


def effect_key(run_id: str, seq: int, idx: int = 0) -> str:
    """The idempotency key of effect ``idx`` of step ``seq``: a pure function, never random."""
    key = f"{run_id}:{seq}" if idx == 0 else f"{run_id}:{seq}.{idx}"
    if crashpoints.broken("unstable_keys"):  # TEST-ONLY broken engine: a new key per process
        key += f"~{os.getpid()}"
    return key


def current_key() -> str:
    """The stable idempotency key of the step being executed (for effects you make yourself)."""
    ctx = _current.get()
    if ctx is None:
        raise UsageError("steplog.current_key() works only inside a step function (run.step(...))")
    return effect_key(ctx.run.id, ctx.seq)


@dataclass(frozen=True)
class EffectCall:
    """One effect step, apart from how it is driven: its step name and kind, the ledger's kind
    and target, the request's digest, and the act itself (``do(key)``)."""

    name: str
    step_kind: str
    kind: str
    target: str
    request_hash: str
    do: Callable[[str], Any]
    idempotent: bool = True


@dataclass
class StepContext:
    run: Run
    seq: int
    name: str
    decided: bool = False
    _next_effect: int = field(default=0)
    attempt: int = 1
    """Which attempt of the step this is (its stream entries carry it)."""

    def emit(self, value: Any, stream: str) -> None:
        """An entry of this attempt (``run.emit`` inside a step body, a model's tokens)."""
        streams = self.run._journal.streams
        if streams is None:
            raise UsageError("run.emit() needs a run started by the steplog engine")
        streams.append(stream, _entry_json(value, stream), self.seq, self.attempt)

    def emit_text(self, text: str) -> None:
        """A piece of a model's answer, to the stream ``tokens``: pieces that come within one
        batch are written as one entry (their text joined), JSON-encoded once, when written."""
        streams = self.run._journal.streams
        if streams is None:
            raise UsageError("run.chat() streams only in a run started by the steplog engine")
        streams.append_text(TOKENS, text, self.seq, self.attempt)

    def effect(
        self,
        kind: str,
        target: str,
        request_hash: str,
        do: Callable[[str], Any],
        *,
        idempotent: bool = True,
    ) -> Any:
        """One ledgered effect: "started" committed, done with its key, "completed" committed.

        A cancel that comes meanwhile waits for the act and its record (``interrupts.acting``):
        the run then ends ``cancelled`` with this step unfinished and the ledger knowing the
        far side's answer, instead of a request sent and its outcome lost."""
        key, done = self.effect_begin(kind, target, request_hash, idempotent=idempotent)
        if done is not None:
            return done[0]
        with interrupts.acting():
            return self.effect_end(key, do(key))

    def effect_begin(
        self, kind: str, target: str, request_hash: str, *, idempotent: bool = True
    ) -> tuple[str, tuple[Any] | None]:
        """The log's half before the act: the effect's key, and ``(response,)`` when the ledger
        has it completed already (nothing to do), else ``None`` once "started" is committed."""
        run = self.run
        idx = self._next_effect
        self._next_effect += 1
        key = effect_key(run.id, self.seq, idx)
        prior = load_effect(run._journal.conn, key)
        if prior is None and run._forked_from is not None:
            carried = self._carried(run._forked_from, idx, kind, target, request_hash)
            if carried is not None:
                key, prior = carried.key, carried
        if prior is not None:
            if prior.request_hash != request_hash:
                raise NonDeterminism(
                    f"step {self.seq} '{self.name}': effect {key} was started with a different "
                    "request "
                    "than the agent now makes; effects must be a deterministic function of "
                    "recorded results",
                    run_id=run.id,
                )
            if prior.status == "completed":
                return key, (json.loads(prior.response or "null"),)
            if not prior.idempotent:
                raise NeedsReconciliation(
                    f"needs reconciliation: effect {key} ({kind} {target}) was started but never "
                    "confirmed "
                    "and its target cannot deduplicate; check the target by hand, then start a "
                    "new run",
                    run_id=run.id,
                )
        run._journal.effect_started(
            key, self.seq, idx, kind, target, request_hash, idempotent, again=prior is not None
        )
        if crashpoints.broken(
            "record_before_act"
        ):  # TEST-ONLY broken engine (see crashpoints.BREAKS)
            run._journal.effect_completed(key, self.seq, "null")
        crashpoints.reached("after_effect_started", self.seq)
        if (
            run._journal.cancel_requested is not None
        ):  # cancelled: nothing is sent once that is known
            raise run._stop(Cancelled(run._journal.cancel_requested, run_id=run.id))
        return key, None

    def _carried(
        self, forked_from: tuple[str, int], idx: int, kind: str, target: str, request_hash: str
    ) -> EffectRecord | None:
        """The parent's ledger row this fork's effect carries on (``ledger.carried_effect``):
        only the same effect (kind, target, request), and not a non-idempotent one that a forced
        retry of this run released to be sent again."""
        run = self.run
        conn = run._journal.conn
        found = carried_effect(conn, forked_from, self.seq, idx)
        if found is None or (found.kind, found.target) != (kind, target):
            return None  # nothing to carry on here, or another effect: this one is new
        if found.request_hash != request_hash:
            return None  # the fork asks for something else (changed params): a new effect
        released = (
            not found.idempotent
            and found.status != "completed"
            and found.key in released_effects(conn, run.id)
        )
        return None if released else found

    def effect_end(self, key: str, response: Any) -> Any:
        """The log's half after the act: the far side's response, committed.

        A cancel known by now (asked for during the act) leaves the step unfinished: a fork from
        it or before then carries this effect on under its key (``ledger.carried_effect``)
        instead of redoing the step as new work, so the message is not sent a second time."""
        crashpoints.reached("after_effect_applied", self.seq)
        journal = self.run._journal
        journal.effect_completed(key, self.seq, dumps(response))
        crashpoints.reached("after_effect_completed", self.seq)
        if journal.cancel_requested is not None:
            raise self.run._stop(
                Cancelled(
                    journal.cancel_requested,
                    run_id=self.run.id,
                    details={"abandoned_step": self.seq},
                )
            )
        return response


class Run:
    """The handle an agent function gets. Attributes: ``id``, ``workdir``, ``outbox``,
    ``params``, ``incarnation``, ``model``."""

    def __init__(
        self,
        *,
        run_id: str,
        workdir: Path,
        outbox: str | None,
        params: dict[str, Any],
        journal: Journal,
        steps: dict[int, Committed | StepRecord],
        budget: Budget,
        retry: RetryPolicy,
        model: ChatModel,
        pace: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        http: effects.HttpClient,
        exit_when_waiting: bool = False,
        forked_from: tuple[str, int] | None = None,
        location: LogLocation | None = None,
        probe: bool = False,
    ) -> None:
        self.id = run_id
        self._location = location
        """Where the log is: how a waiting step hears of commits (``log.doorbell``)."""
        self._probe = probe
        """Replay only (``steplog.runtime.replaycheck``): the first step the log has not
        committed raises ``_Frontier`` instead of running; nothing is written."""
        self._frontier = False
        self._refused: Blocked | None = None
        self._forked_from = forked_from
        """``(parent run, step)`` of a fork: it carries on the effects of its parent's unfinished
        steps (``StepContext._carried``)."""
        self.workdir = workdir
        self.outbox = outbox
        self.params = params
        self.model = model
        self.budget = budget
        self._journal = journal
        self._steps = steps
        self._retry = retry
        self._pace = pace
        self._sleep = sleep
        self._http = http  # the run's one HTTP client; its owner (engine._work) closes it
        self._seq = 0
        self._stopping: RunStopped | None = None
        self._deaths_checked = False
        """The first new step looked for engines that died in it (``deaths_since_progress``)."""
        self._thread = threading.get_ident()
        self._exit_when_waiting = exit_when_waiting
        self._parked: RunWaiting | None = (
            None  # the engine exits waiting; agent code cannot swallow it
        )

    @property
    def incarnation(self) -> int:
        return self._journal.incarnation

    @property
    def pace(self) -> float:
        """Seconds of simulated thinking per model call (``--pace``); 0 in tests and real runs."""
        return self._pace

    # -- the public steps -------------------------------------------------------------------

    def step(self, name: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` once; its JSON result is checkpointed and replayed.

        The value returned is always the JSON round trip of ``fn``'s result, so first run and
        replay see the same types.
        """
        seq, prior = self._enter(name, "call", step_args(args, kwargs))
        if isinstance(prior, Committed):
            return result_of(prior.result)  # type: ignore[no-any-return]
        return self._execute(seq, name, "call", prior, lambda ctx: fn(*args, **kwargs))  # type: ignore[no-any-return]

    def effect(
        self,
        name: str,
        fn: Callable[[str], T],
        *,
        target: str = "",
        request: Any = None,
        idempotent: bool = True,
    ) -> T:
        """One ledgered effect of your own: ``fn(key)`` with the step's stable idempotency key.

        Declare ``idempotent=False`` when the target cannot deduplicate: an effect found started
        but unconfirmed after a crash then stops the run ("needs reconciliation") instead of
        being sent again.
        """
        return self._effect_step(self._effect_call(name, fn, target, request, idempotent))  # type: ignore[no-any-return]

    def write_file(
        self, path: str, content: str | bytes, *, name: str | None = None
    ) -> dict[str, Any]:
        """Write ``workdir/path`` atomically under its stable name."""
        return self._effect_step(self._write_file_call(path, content, name))  # type: ignore[no-any-return]

    def http_post(
        self,
        url: str,
        body: Any,
        *,
        name: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST ``body`` as JSON with the step's ``Idempotency-Key``; returns status and body.

        Posts share the run's one kept-alive client; ``timeout`` (seconds, default 30) applies to
        this call only."""
        return self._effect_step(self._http_post_call(url, body, name, headers, timeout))  # type: ignore[no-any-return]

    def merge(
        self,
        db: str,
        table: str,
        *,
        key: dict[str, Any],
        values: dict[str, Any],
        name: str | None = None,
    ) -> dict[str, Any]:
        """Upsert one row into SQLite file ``workdir/db`` (created as needed)."""
        return self._effect_step(self._merge_call(db, table, key, values, name))  # type: ignore[no-any-return]

    # What each effect step is, apart from how it is driven (here, or awaited by ``AsyncRun``).

    def _effect_call(
        self, name: str, fn: Callable[[str], Any], target: str, request: Any, idempotent: bool
    ) -> EffectCall:
        return EffectCall(
            name,
            "effect",
            "effect",
            target or name,
            effects.digest(request if request is not None else name),
            fn,
            idempotent,
        )

    def _write_file_call(self, path: str, content: str | bytes, name: str | None) -> EffectCall:
        name = name or f"write {path}"
        self._refuse_early(name, lambda: effects.confined(self.workdir, path))
        return EffectCall(
            name,
            "write_file",
            "write_file",
            path,
            effects.digest(content),
            lambda key: effects.write_file(self.workdir, path, content, key),
        )

    def _http_post_call(
        self,
        url: str,
        body: Any,
        name: str | None,
        headers: dict[str, str] | None,
        timeout: float | None,
    ) -> EffectCall:
        return EffectCall(
            name or f"post {url}",
            "http_post",
            "http_post",
            url,
            effects.digest(body),
            lambda key: self._http.post(url, body, key, headers=headers, timeout=timeout),
        )

    def _merge_call(
        self, db: str, table: str, key: dict[str, Any], values: dict[str, Any], name: str | None
    ) -> EffectCall:
        label = ",".join(f"{k}={v}" for k, v in key.items())
        name = name or f"merge {table} {label}"
        self._refuse_early(name, lambda: effects.check_merge(self.workdir, db, table, key, values))
        return EffectCall(
            name,
            "merge",
            "merge",
            f"{db}:{table}",
            effects.digest({"key": key, "values": values}),
            lambda _key: effects.merge(self.workdir, db, table, key, values),
        )

    def chat(
        self,
        messages: Sequence[Message],
        *,
        name: str = "chat",
        max_tokens: int = 512,
        stream: bool | None = None,
    ) -> ChatReply:
        """Ask the model once. The answer (the *decision*) is committed before anything acts on
        it; on resume a recorded decision is reused and the model is never asked again.

        ``stream``: ``None`` streams the answer's text to the run's stream ``tokens`` when the
        model can (``StreamingChatModel``), ``False`` never does, ``True`` requires it (a
        ``UsageError`` before anything is written if the model cannot). The recorded reply is
        the same either way."""
        streaming = self._streams_chat(stream)
        seq, prior = self._enter(name, "chat", chat_args(messages, max_tokens))
        if isinstance(prior, Committed):
            return ChatReply.from_json(json.loads(prior.result or "{}"))
        if prior is not None and prior.decision is not None:
            decision = json.loads(prior.decision)
            return ChatReply.from_json(
                self._execute(seq, name, "chat", prior, lambda ctx: decision)
            )
        estimate = self.model.estimate(messages, max_tokens=max_tokens)

        def ask(ctx: StepContext) -> dict[str, Any]:
            reply = self._ask(ctx, messages, max_tokens, streaming)
            return self._decided(ctx, reply, estimate)

        return ChatReply.from_json(self._execute(seq, name, "chat", prior, ask, reserve=estimate))

    def _streams_chat(self, stream: bool | None) -> bool:
        """Whether a chat call with ``stream=`` streams (``run.chat``), or ``UsageError``."""
        if stream is not None and not isinstance(stream, bool):
            raise UsageError(f"run.chat(stream=...) is None, False or True (got {stream!r})")
        can = callable(getattr(self.model, "stream", None))
        if stream and not can:
            raise UsageError(
                f"run.chat(stream=True) needs a model that streams, and {self.model!r} has no "
                "stream(...) method: leave stream out (None) to stream only when the model can"
            )
        return can if stream is None else stream

    def _ask(
        self, ctx: StepContext, messages: Sequence[Message], max_tokens: int, streaming: bool
    ) -> ChatReply:
        """One call of the model (on any thread): streamed to the run's stream ``tokens`` when
        ``streaming`` (``_streams_chat``), the whole reply returned either way."""
        key = effect_key(self.id, ctx.seq)
        if streaming:
            reply: ChatReply = cast("StreamingChatModel", self.model).stream(
                messages,
                max_tokens=max_tokens,
                idempotency_key=key,
                on_text=ctx.emit_text,
                pace=self._pace,
            )
            return reply
        if self._pace:
            self._sleep(self._pace)
        return self.model.complete(messages, max_tokens=max_tokens, idempotency_key=key)

    def _decided(self, ctx: StepContext, reply: ChatReply, estimate: Estimate) -> dict[str, Any]:
        """Commit the model's answer (the decision) before anything acts on it."""
        decision = reply.to_json()
        u = reply.usage
        self._journal.record_decision(
            ctx.seq,
            decision,
            tokens_in=u.input_tokens,
            tokens_out=u.output_tokens,
            tokens_cached=u.cached_tokens,
            estimated=u.estimated,
            cost=reply.cost_usd,
            reserved_tokens=estimate.tokens,
            reserved_cost=estimate.cost_usd,
        )
        ctx.decided = True
        crashpoints.reached("after_decision", ctx.seq)
        return decision

    def emit(self, value: Any, *, stream: str = "events") -> None:
        """Append ``value`` (JSON) to the run's stream ``stream`` (``steplog stream RUN_ID``).

        From the agent function, between steps, it is a step of its own (kind ``emit``): the entry
        is written with that step's checkpoint, so it is in the stream exactly once however often
        the run is killed and replayed. Inside a step body it belongs to that attempt of the
        step: written as it goes (batched, off the step's commit path), and marked ``cut`` if a
        kill or a failure ends the attempt before the step is recorded."""
        ctx = _current.get()
        if ctx is not None and ctx.run is self:
            ctx.emit(value, stream)
            return
        text = _entry_json(value, stream)
        seq, prior = self._enter(f"emit {stream}", "emit", {"value": value})
        if isinstance(prior, Committed):
            return  # recorded already: its entry is in the stream
        self._execute(seq, f"emit {stream}", "emit", prior, lambda ctx: None, entry=(stream, text))

    def map(
        self, name: str, fn: Callable[[Any], T], items: Iterable[Any], *, concurrency: int = 4
    ) -> list[T]:
        """One step per item (``name [i]``, numbered now, in item order), ``fn(item)`` run on up
        to ``concurrency`` threads at once; the results in item order.

        Each item's step commits on its own as it finishes; a kill redoes at most the items in
        flight. All log writes stay on this thread: the pool only runs ``fn``."""
        if not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(
                f"run.map(concurrency=...) must be a whole number >= 1 (got {concurrency!r})"
            )
        entered = [
            (f"{name} [{i}]", item, *self._enter(f"{name} [{i}]", "call", step_args((item,), {})))
            for i, item in enumerate(items)
        ]
        results: list[Any] = [None] * len(entered)
        todo = []
        for i, (step_name, item, seq, prior) in enumerate(entered):
            if isinstance(prior, Committed):
                results[i] = result_of(prior.result)
            else:
                todo.append((i, step_name, item, seq, prior))
        if todo:
            _drive_parallel(self, fn, todo, results, concurrency)
        return results

    def wait_for(self, name: str, *, timeout: float | None = None) -> Any:
        """A step that waits for the signal ``name`` (``steplog signal RUN NAME --data JSON``) and
        returns its JSON data; raises ``WaitTimeout`` after ``timeout`` seconds without one.

        A signal sent before the wait is kept and consumed by it. The signal is consumed in the
        transaction that records this step, so it is consumed exactly once however the engine
        dies. While waiting the run's status is ``waiting``, its seconds budget does not run, and
        the engine keeps its lease (or exits, with ``exit_when_waiting``); the deadline is
        recorded, so a resumed engine keeps the same one.
        """
        seq, entered = self._enter_wait(name, timeout)
        if entered is not None:
            for pause in self._waiting(seq, *entered, WaitOn("wait", signal=name), timeout):
                self._sleep(pause)
        return self._waited(name, seq)

    def sleep(self, seconds: float) -> None:
        """A durable sleep: a step (kind ``sleep``) that records its wake-up time, ``seconds``
        from the first time it is reached, and returns then. A kill or a restart does not move
        the wake-up time; while asleep the run is ``waiting`` (``status --json`` shows
        ``sleeping_until``), its seconds budget does not run, and an engine started with
        ``exit_when_waiting`` (a worker's) lets the run go until it is due."""
        until = time.time() + check_seconds(seconds)
        seq, entered = self._enter_waiting("sleep", "sleep")
        if entered is not None:
            for pause in self._waiting(seq, *entered, WaitOn("sleep"), None, until=until):
                self._sleep(pause)

    def sleep_until(self, when: datetime | float) -> None:
        """``run.sleep`` until ``when``: an aware ``datetime`` or epoch seconds. The time the
        first engine reached it with is the one kept on every replay."""
        until = wake_time(when)
        seq, entered = self._enter_waiting("sleep", "sleep")
        if entered is not None:
            for pause in self._waiting(seq, *entered, WaitOn("sleep"), None, until=until):
                self._sleep(pause)

    def recv(self, topic: str, *, timeout: float | None = None) -> Any:
        """A step that receives the oldest message on ``topic`` not received yet (``steplog send
        RUN TOPIC --data JSON``, ``steplog.send``) and returns its value; ``None`` after
        ``timeout`` seconds without one (a message whose value is ``null`` also returns
        ``None``: send a value that says something when that matters).

        Messages are received in send order per topic, each once: a message is consumed in the
        transaction that records this step, so a kill between its arrival and its use neither
        loses nor repeats it. While it waits the run is ``waiting`` (``waiting_for_topic``)."""
        check_name("run.recv", topic)
        check_timeout("run.recv", timeout)
        seq, entered = self._enter_waiting(f"recv {topic}", "recv")
        if entered is not None:
            for pause in self._waiting(seq, *entered, WaitOn("recv", topic=topic), timeout):
                self._sleep(pause)
        return self._received(seq)

    def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` (JSON) as the run's event ``key``: a step (kind ``set_event``) whose
        checkpoint sets it, so it is set once per call however the run is killed; the latest
        value set wins. Others read it with ``steplog.get_event(run_id, key)`` or ``steplog
        event RUN_ID KEY``."""
        check_name("run.set_event", key)
        try:
            text = dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise UsageError(
                f"run.set_event() got {type(value).__name__}, which cannot be recorded as JSON "
                f"({why_not_json(exc)})"
            ) from exc
        name = f"set_event {key}"
        seq, prior = self._enter(name, "set_event")
        if isinstance(prior, Committed):
            return
        self._execute(seq, name, "set_event", prior, lambda ctx: None, publish=(key, text))

    def _enter_wait(
        self, name: str, timeout: float | None
    ) -> tuple[int, tuple[str, StepRecord | None] | None]:
        """Number the wait step (at call time): its number, and ``(step name, prior record)`` when
        it has to wait (``None`` when the log has it recorded already)."""
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise UsageError(
                f"run.wait_for needs a signal name of 1 to 200 characters (got {name!r})"
            )
        check_timeout("run.wait_for", timeout)
        return self._enter_waiting(f"wait {name}", "wait")

    def _enter_waiting(
        self, step_name: str, kind: str
    ) -> tuple[int, tuple[str, StepRecord | None] | None]:
        seq, prior = self._enter(step_name, kind)
        if isinstance(prior, Committed):
            return seq, None
        self._check_budgets(seq, step_name, None)
        return seq, (step_name, prior)

    def _waited(self, name: str, seq: int) -> Any:
        """The recorded outcome of the wait step: the signal's data, or ``WaitTimeout`` raised."""
        recorded = json.loads(self._steps[seq].result or "null")
        if recorded.get("timeout"):
            raise WaitTimeout(
                f"run {self.id} waited {recorded.get('waited')} s for signal {name!r} at step {seq}"
                " and none came"
            )
        return recorded.get("data")

    def _received(self, seq: int) -> Any:
        """The recorded outcome of a recv step: the message's value, ``None`` on a timeout."""
        recorded = json.loads(self._steps[seq].result or "null")
        return None if recorded.get("timeout") else recorded.get("data")

    def _waiting(
        self,
        seq: int,
        step_name: str,
        prior: StepRecord | None,
        on: WaitOn,
        timeout: float | None,
        *,
        until: float | None = None,
    ) -> Generator[float, None, None]:
        """The wait step until what it waits for is consumed or the deadline passes (``until``:
        a sleep's wake-up time); yields the pauses between looks at the log (the driver sleeps
        them: ``time.sleep`` or ``asyncio.sleep``). The log is looked at again when the doorbell
        rings (``steplog.log.doorbell``), the deadline checked at every pause."""
        j = self._journal
        # A wait taken up again (after a kill or an exit while waiting) redoes nothing: it is not
        # counted as an execution, and it is no poison pill (recoveries carried, not counted).
        j.begin_attempt(
            seq,
            step_name,
            on.kind,
            attempt=(prior.attempts if prior else 0) + 1,
            recoveries=prior.recoveries if prior else 0,
            fresh=prior is None,
            durable=False,
            counted=prior is None,
        )
        decided = json.loads(prior.decision) if prior is not None and prior.decision else {}
        deadline = (
            decided.get("deadline")
            if "deadline" in decided
            else until
            if until is not None
            else (time.time() + timeout if timeout is not None else None)
        )
        started, waiting = time.time(), False
        bell: Doorbell | None = None
        look = True
        try:
            while True:
                found = on.pending(j.conn, self.id) if look else None
                expired = found is None and deadline is not None and time.time() >= deadline
                if found is not None or expired:
                    waited = time.time() - (decided.get("since") or started)
                    result_json = dumps(on.result(found, deadline, waited))
                    crashpoints.reached("before_step_record", seq)
                    if j.commit_wait(
                        seq,
                        step_name,
                        on.kind,
                        result_json,
                        duration=time.time() - started,
                        **on.consumes(found),
                    ):
                        self._steps[seq] = Committed(seq, step_name, on.kind, result_json)
                        crashpoints.reached("after_step_record", seq)
                        return
                    continue  # consumed by someone else in between: wait for the next one
                if not waiting:
                    j.begin_wait(
                        seq,
                        on.signal,
                        {
                            **({"signal": on.signal} if on.signal is not None else {}),
                            **({"topic": on.topic} if on.topic is not None else {}),
                            "deadline": deadline,
                            "since": decided.get("since") or started,
                        },
                        topic=on.topic,
                        sleep_until=deadline if on.kind == "sleep" else None,
                    )
                    j.pause_clock()
                    waiting = True
                    # A wait that ends within the worker's lead (it claims such a run that much
                    # early) is waited out here: letting it go would only be claimed back.
                    if self._exit_when_waiting and (
                        deadline is None or deadline - time.time() > WAKE_LEAD_SECONDS
                    ):
                        self._parked = RunWaiting(
                            on.says(self.id, seq, deadline),
                            run_id=self.id,
                            waiting_for=on.signal or "",
                        )
                        raise self._parked
                    bell = Doorbell(j.conn, self._location)
                cancel = j.cancel_requested or cancel_request(j.conn, self.id)
                if cancel is not None:
                    j.cancel_requested = cancel
                    raise self._stop(Cancelled(cancel, run_id=self.id))
                if j.fenced.is_set():
                    raise Fenced(
                        f"run {self.id}: a newer engine took it over; this one (incarnation "
                        f"{j.incarnation}) stops"
                    )
                interrupts.check()
                yield 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.time()))
                look = on.kind != "sleep" and (bell is None or bell.rang())
        finally:
            if bell is not None:
                bell.close()
            j.resume_clock()

    # -- machinery --------------------------------------------------------------------------

    def _effect_step(self, call: EffectCall) -> Any:
        seq, prior = self._enter(call.name, call.step_kind, effect_args(call))
        if isinstance(prior, Committed):
            return result_of(prior.result)
        return self._execute(
            seq,
            call.name,
            call.step_kind,
            prior,
            lambda ctx: ctx.effect(
                call.kind, call.target, call.request_hash, call.do, idempotent=call.idempotent
            ),
        )

    def _refuse_early(self, name: str, check: Callable[[], object]) -> None:
        """Check the input of the step ``name`` is about to be, before anything is recorded; a
        refusal (a path outside the workdir, a bad identifier) fails the run naming that step."""
        if self._stopping is not None:
            raise self._stopping
        try:
            check()
        except UsageError as exc:
            raise self._stop(
                RunFailed(f"step {self._seq + 1} '{name}' was refused: {exc}", run_id=self.id)
            ) from None

    def _stop(self, exc: RunStopped) -> RunStopped:
        """Remember a terminal decision: agent code that swallows it cannot carry on."""
        self._stopping = exc
        return exc

    def _enter(
        self, name: str, kind: str, args: Any = None
    ) -> tuple[int, Committed | StepRecord | None]:
        """Number the step the code calls now and compare it with the step the log has at that
        number (``docs/versions.md``): by name and kind, and by the hash of its name, kind and
        ``args`` (``versions.call_hash``) on a probe and for a step not committed (a step
        recorded before hashes were, schema 7 and older, has none). A difference is
        ``Blocked``: nothing of the step runs."""
        if self._refused is not None:
            raise self._refused
        if self._frontier:
            raise _Frontier()
        if self._stopping is not None:
            raise self._stopping
        if self._parked is not None:
            raise self._parked
        # a step boundary: a stop asked for (and swallowed by agent code) ends here
        interrupts.check()
        cancel = self._journal.cancel_requested
        if cancel is not None:
            raise self._stop(Cancelled(cancel, run_id=self.id))
        outer = _current.get()
        # Only a step of this run counts: a stop that lands on the line resetting ``_current``
        # leaves an earlier run's step behind in this thread, and a later run must not trip on it.
        if outer is not None and outer.run is self:
            raise UsageError(
                f"step '{name}' was called inside another step; call run.* from the agent function "
                "only"
            )
        if threading.get_ident() != self._thread:
            # Steps are numbered in call order; calls racing from threads would number them
            # differently on every replay.
            raise UsageError(
                f"step '{name}' was called from another thread; call run.* from the agent's own "
                "thread"
            )
        self._seq += 1
        seq = self._seq
        prior = self._steps.get(seq)
        if prior is None:
            if self._probe:
                self._frontier = True
                raise _Frontier()
            self._journal.hashes[seq] = call_hash(name, kind, args)
            return seq, None
        if (prior.name != name or prior.kind != kind) and not _same_as_stored(prior, name, kind):
            raise self._refuse(seq, prior, name, kind, args)
        if prior.args_hash is not None and (self._probe or not isinstance(prior, Committed)):
            # A committed step is compared by its arguments too on a probe only: the engine runs
            # one before it claims a run last worked on by another version, and on the same
            # version the code is the same (hashing every replayed step would double the time
            # a long run takes to resume).
            if call_hash(name, kind, args) != prior.args_hash:
                raise self._refuse(seq, prior, name, kind, args)
        if self._probe and not isinstance(prior, Committed):
            self._frontier = True
            raise _Frontier()
        return seq, prior

    def _refuse(
        self, seq: int, prior: Committed | StepRecord, name: str, kind: str, args: Any
    ) -> Blocked:
        """The code asks for another step than the log has at ``seq``: ``Blocked`` with the one
        line that names both (remembered: agent code that swallows it cannot carry on)."""
        recorded, asked = f"`{prior.name}(…)`", f"`{describe_call(name, args)}`"
        if prior.kind != kind:
            recorded, asked = f"{prior.kind} {recorded}", f"{kind} {asked}"
        elif prior.name == name:
            asked += " (the same step with other arguments)"
        self._refused = Blocked(
            divergence_line(
                self.id, seq, recorded=recorded, version=self._recorded_version(seq), asked=asked
            ),
            run_id=self.id,
            at_step=seq,
        )
        return self._refused

    def _recorded_version(self, seq: int) -> str | None:
        """The version that recorded step ``seq`` (read only when a refusal names it)."""
        from steplog.log.versions import version_at

        return version_at(self._journal.conn, self.id, seq)

    def check_complete(self) -> None:
        """The agent returned: a log that holds steps past the last one the code asked for was
        recorded by other code (``Blocked``)."""
        if self._refused is not None:
            raise self._refused
        later = [seq for seq in self._steps if seq > self._seq]
        if later:
            seq = min(later)
            prior = self._steps[seq]
            raise Blocked(
                divergence_line(
                    self.id,
                    seq,
                    recorded=f"`{prior.name}(…)`",
                    version=self._recorded_version(seq),
                    asked="nothing more (the agent returns)",
                ),
                run_id=self.id,
                at_step=seq,
            )

    def patched(self, name: str) -> bool:
        """``True`` where this run reaches this point on code that has the patch ``name``,
        ``False`` where it replays history recorded before the patch (``docs/versions.md``).

        The first time it is ``True`` it records a marker step (kind ``patch``, named
        ``patch NAME``); a replay finds the marker and is ``True`` again. Where the log has
        another step at this number, the run was recorded by code without the patch: ``False``,
        and no step number is taken, so the old branch's steps keep theirs."""
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise UsageError(f"run.patched needs a name of 1 to 200 characters (got {name!r})")
        step_name = f"patch {name}"
        prior = self._steps.get(self._seq + 1)
        if prior is not None and (prior.kind != PATCH_KIND or prior.name != as_stored(step_name)):
            return False  # recorded before the patch: the old branch carries on
        seq, prior = self._enter(step_name, PATCH_KIND)
        if isinstance(prior, Committed):
            return True
        self._execute(seq, step_name, PATCH_KIND, prior, lambda ctx: True)
        return True

    def _check_budgets(self, seq: int, name: str, reserve: Estimate | None) -> None:
        b, u, j = self.budget, self._journal.usage, self._journal
        tokens = u.tokens + u.reserved_tokens
        cost = u.cost_usd + u.reserved_cost_usd
        if b.max_steps is not None and u.steps >= b.max_steps:
            raise self._give_up("steps", u.steps, b.max_steps, seq, name)
        seconds = j.seconds_used()
        if b.max_seconds is not None and seconds >= b.max_seconds:
            raise self._give_up("seconds", round(seconds, 3), b.max_seconds, seq, name)
        need_tokens = reserve.tokens if reserve else 0
        if b.max_tokens is not None and (
            tokens >= b.max_tokens or tokens + need_tokens > b.max_tokens
        ):
            raise self._give_up("tokens", tokens, b.max_tokens, seq, name, need=need_tokens)
        need_cost = reserve.cost_usd if reserve else 0.0
        if b.max_cost_usd is not None and (
            cost >= b.max_cost_usd or cost + need_cost > b.max_cost_usd
        ):
            raise self._give_up(
                "cost_usd", round(cost, 9), b.max_cost_usd, seq, name, need=need_cost
            )

    def _give_up(
        self, budget: str, used: float, limit: float, seq: int, name: str, *, need: float = 0
    ) -> GaveUp:
        why = f"budget exhausted: {budget} used {used} of {limit}"
        if need:
            why += f" (step {seq} '{name}' would need up to {need} more)"
        exc = GaveUp(
            why,
            run_id=self.id,
            details={"budget": budget, "used": used, "limit": limit, "seq": seq},
        )
        self._stop(exc)
        return exc

    def _execute(
        self,
        seq: int,
        name: str,
        kind: str,
        prior: StepRecord | None,
        attempt_fn: Callable[[StepContext], Any],
        *,
        reserve: Estimate | None = None,
        entry: tuple[str, str] | None = None,
        publish: tuple[str, str] | None = None,
    ) -> Any:
        """Drive one step's attempts (``_attempts``) with ``attempt_fn`` as the body, here and
        now."""
        attempts = self._attempts(seq, name, kind, prior, reserve, entry, publish)
        order = next(attempts)
        while True:
            outcome: tuple[bool, Any]
            if isinstance(order, StepContext):
                try:
                    _current.set(
                        order
                    )  # inside the try: a stop landing right after it still clears it
                    outcome = (True, attempt_fn(order))
                except Exception as exc:
                    outcome = (False, exc)
                finally:
                    _current.set(None)  # steps never nest, so "no step" is the state to return to
            else:
                self._sleep(order)
                outcome = (True, None)
            try:
                order = attempts.send(outcome)
            except StopIteration as done:
                return done.value

    def _attempts(
        self,
        seq: int,
        name: str,
        kind: str,
        prior: StepRecord | None,
        reserve: Estimate | None,
        entry: tuple[str, str] | None = None,
        publish: tuple[str, str] | None = None,
    ) -> Generator[StepContext | float, tuple[bool, Any], Any]:
        """One step's attempts as a protocol, the same for every way of running bodies.

        Yields a ``StepContext`` when an attempt's body is to run (its start is committed), and
        gets back ``(True, value)`` or ``(False, exception)``; yields a number of seconds when the
        driver must wait before the next attempt. Returns the recorded result. The log writes all
        happen here, on the driver's thread: a sync agent's (``_execute``), an async agent's event
        loop (``steplog.runtime.arun``), or ``run.map``'s coordinating thread.
        """
        j = self._journal
        self._check_budgets(seq, name, reserve)
        attempts = prior.attempts if prior else 0
        recoveries = prior.recoveries if prior else 0
        if prior is not None and prior.status == "running" and prior.incarnation != j.incarnation:
            # An earlier engine went away inside this step: the attempt it cut short is no
            # failure of the step. Only engines that *died* there count toward the poison pill;
            # a stop (SIGTERM, Stop engine, a worker's drain) is not a death.
            recoveries += 1
            limit = self.budget.max_recoveries
            if limit is not None and recoveries > limit:
                deaths = deaths_inside(j.conn, self.id, seq, current=j.incarnation)
                if deaths > limit:
                    raise self._stop(
                        RunFailed(
                            f"poison pill: {deaths} engines died inside step {seq} '{name}' "
                            f"(max_recoveries {limit}); fix the cause, then raise max_recoveries",
                            run_id=self.id,
                        )
                    )
        fresh = prior is None
        executions = 1
        if fresh and not self._deaths_checked:
            # The first new step of this engine: engines that died before it may have been inside
            # it without writing its start (a deferred start). Each counts as an execution cut
            # short, and toward the poison pill, as a written start would have.
            self._deaths_checked = True
            if j.incarnation > 1:
                deaths = deaths_since_progress(j.conn, self.id, seq, current=j.incarnation)
                recoveries, executions = deaths, 1 + deaths
                limit = self.budget.max_recoveries
                if limit is not None and deaths > limit:
                    raise self._stop(
                        RunFailed(
                            f"poison pill: {deaths} engines died inside step {seq} '{name}' "
                            f"(max_recoveries {limit}); fix the cause, then raise max_recoveries",
                            run_id=self.id,
                        )
                    )
        policy = self._retry
        while True:
            attempts += 1
            j.begin_attempt(
                seq,
                name,
                kind,
                attempt=attempts,
                recoveries=recoveries,
                fresh=fresh,
                durable=reserve is not None,
                reserve_tokens=reserve.tokens if reserve else 0,
                reserve_cost=reserve.cost_usd if reserve else 0.0,
                defer=fresh and reserve is None,
                executions=executions,
            )
            fresh, executions = False, 1
            if (
                j.cancel_requested is not None
            ):  # seen by this very write: the step is abandoned unrun
                raise self._stop(Cancelled(j.cancel_requested, run_id=self.id))
            ctx = StepContext(self, seq, name, attempt=attempts)
            started = time.monotonic()
            ok, value = yield ctx
            if not ok:
                exc: Exception = value
                if isinstance(exc, SteplogError) and not isinstance(exc, UsageError):
                    if isinstance(exc, RunStopped):
                        self._stop(exc)
                    raise exc  # a stop, a fence or a failed log write: not this step's failure
                storage = storage_problem(exc)
                if storage is not None:  # the machine's fault, not the step's: stop resumably
                    raise StorageExhausted(
                        f"step {seq} '{name}' could not write ({storage}); nothing is lost: free "
                        "space or fix the "
                        "disk, then run the same command again to resume from the last checkpoint"
                    ) from exc
                failures = attempts - recoveries
                error = redact(f"{type(exc).__name__}: {exc}")
                # Bad input met inside the body (a nested step, a refused effect) fails the step
                # at once: no retry can cure it.
                retryable = (
                    not isinstance(exc, UsageError)
                    and policy.retries(exc)
                    and failures < policy.max_attempts
                )
                retries_left = (
                    self.budget.max_retries is None or j.usage.retries < self.budget.max_retries
                )
                release = reserve if (reserve is not None and not ctx.decided) else None
                j.fail_attempt(
                    seq,
                    error,
                    will_retry=retryable and retries_left,
                    release_tokens=release.tokens if release else 0,
                    release_cost=release.cost_usd if release else 0.0,
                )
                if retryable and not retries_left:
                    raise self._give_up(
                        "retries", j.usage.retries, self.budget.max_retries or 0, seq, name
                    ) from exc
                if not retryable:
                    raise self._stop(
                        RunFailed(
                            f"step {seq} '{name}' failed after {failures} attempt(s): {error}",
                            run_id=self.id,
                        )
                    ) from exc
                j.count_retry()
                yield max(
                    policy.interval(failures), float(getattr(exc, "retry_after", None) or 0.0)
                )
                self._check_budgets(seq, name, reserve)
                continue
            crashpoints.reached("before_step_record", seq)
            try:
                result_json = dumps(value)
            except (TypeError, ValueError, RecursionError) as exc:
                raise self._stop(
                    RunFailed(
                        f"step {seq} '{name}' returned {type(value).__name__}, which cannot be "
                        f"recorded as JSON ({why_not_json(exc)}); return JSON-compatible data "
                        "(dict, list, str, finite number, "
                        "bool, None)",
                        run_id=self.id,
                    )
                ) from exc
            j.commit_step(
                seq,
                name,
                kind,
                result_json,
                duration=time.monotonic() - started,
                entry=None
                if entry is None
                else Pending(entry[0], entry[1], seq, attempts, time.time()),
                publish=publish,
            )
            crashpoints.reached("after_step_record", seq)
            return json.loads(result_json)


class _Frontier(Exception):
    """A probe (``Run(probe=True)``) reached the first step the log has not committed: the code
    replays the recorded steps so far."""


def step_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ``run.step`` call's arguments as hashed (the function itself is not: see
    ``docs/versions.md``)."""
    return {"args": list(args), "kwargs": kwargs} if kwargs else list(args)


def chat_args(messages: Sequence[Message], max_tokens: int) -> Any:
    return {"messages": list(messages), "max_tokens": max_tokens}


def effect_args(call: EffectCall) -> Any:
    """An effect step's identity: its request's digest, and its target but for an HTTP post
    (the outbox's URL may change from one engine to the next; the ledger keys posts by key)."""
    if call.step_kind == "http_post":
        return {"request": call.request_hash}
    return {"target": call.target, "request": call.request_hash}


def divergence_line(
    run_id: str, seq: int, *, recorded: str, version: str | None, asked: str
) -> str:
    """The one line a refusal says (``docs/versions.md``)."""
    fork = (
        f"fork it from step {seq - 1} (`steplog fork {run_id} --at-step {seq}`)"
        if seq > 1
        else "start it anew on the current code"
    )
    return (
        f"step {seq}: recorded {recorded} under version {short(version)}, the code asks {asked}: "
        f"run it with compatible code, or {fork}"
    )


def _entry_json(value: Any, stream: str) -> str:
    """A stream entry's JSON, or ``UsageError`` naming what is wrong (checked before anything is
    written, so a bad entry costs nothing)."""
    if not isinstance(stream, str) or not stream or len(stream) > STREAM_NAME_MAX:
        raise UsageError(
            f"run.emit(stream=...) must be a name of 1 to {STREAM_NAME_MAX} characters "
            f"(got {stream!r})"
        )
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(
            f"run.emit() got {type(value).__name__}, which cannot be recorded as JSON "
            f"({why_not_json(exc)}); emit JSON-compatible data (dict, list, str, finite number, "
            "bool, None)"
        ) from exc


def _same_as_stored(prior: Any, name: str, kind: str) -> bool:
    """Is this the recorded step after all, once ``name`` is as the log stores it
    (``steps.as_stored``)?"""
    return bool(prior.kind == kind and prior.name == as_stored(name))
