"""``OpenAICompatModel``: any OpenAI-compatible chat endpoint through the official ``openai`` SDK.

Importing this module imports ``openai`` (about 0.6 s), so ``steplog.llm`` only imports it when an
``OpenAICompatModel`` is actually asked for.

One model object holds one SDK client (one connection pool, one SSL context) for all its calls; the
engine makes one model per run and ``close()``s it when the run ends.

One ``complete`` (or ``stream``: the same call, its answer read as it comes, ``openai_stream``)
is exactly one HTTP request: the SDK's own retries are off (``max_retries=0``)
because the engine owns the retry policy, and a call that timed out on our side may still have
been billed on theirs, so it must not be silently sent twice. Each request carries the step's
``Idempotency-Key`` header (ignored by servers that do not support it).

Errors, all with a one-line message that says what to do and never contains the API key:

- ``ModelUnavailable`` (retried by the engine's policy): timeout, connection refused, HTTP 408,
  409, 429 (with ``retry_after`` from ``Retry-After``), 5xx, and a *malformed* 200 answer (body not
  JSON, no ``choices``, no message content). Malformed is treated as transient on purpose: in
  practice it is a proxy or gateway glitch far more often than a stable server bug, and the retry
  policy bounds how often we try. Streamed, also a stream that breaks midway (the connection
  dropped, nothing for ``timeout`` seconds, an error event, a chunk that is not JSON, no finish
  reason): the attempt's streamed text stays in the run's stream, marked cut.
- ``ModelError`` (final): a missing or rejected API key, 403, 404 (unknown model or wrong base URL),
  400/422 (bad request), a 429 that says the quota is exhausted, and a refusal by the model.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from steplog.llm.base import (
    ChatReply,
    Estimate,
    Message,
    ModelError,
    ModelUnavailable,
    Usage,
    estimate_messages,
    estimate_tokens,
)
from steplog.llm.openai_stream import (
    ErrorEvent,
    malformed,
    read_answer,
    reported_usage,
    sse_chunks,
)
from steplog.llm.prices import Price, PriceTable, is_local
from steplog.llm.wire import display_url as _display_url
from steplog.llm.wire import retry_after as _retry_after
from steplog.llm.wire import scrub

DEFAULT_BASE_URL = "https://api.openai.com/v1"
LOCAL_PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to a local server when none is configured (most ignore it, the SDK wants one)."""

_REASONING_MODEL = re.compile(r"^(?:openai/)?(?:o\d|gpt-5)")


class OpenAICompatModel:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        prices: PriceTable | None = None,
    ) -> None:
        self.name = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        self.timeout = timeout
        self.price: Price | None = (prices or PriceTable()).price_for(model, base_url=self.base_url)
        """None when the model's price is unknown: calls are charged 0 and callers say "cost
        unknown"."""
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        local = is_local(self.base_url)
        self._missing_key = not key and not local
        # The key lives in the client only; error messages are scrubbed of it (see _scrub).
        self._client = openai.OpenAI(
            api_key=key or LOCAL_PLACEHOLDER_KEY,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=0,
        )

    @property
    def cost_known(self) -> bool:
        """False when this model is not in the price table and not served locally."""
        return self.price is not None

    def close(self) -> None:
        """Close the client's kept-alive connections. Idempotent."""
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAICompatModel({self.name!r}, base_url={_display_url(self.base_url)!r})"

    def estimate(self, messages: Sequence[Message], *, max_tokens: int) -> Estimate:
        prompt = estimate_messages(messages)
        cost = self.price.cost(prompt, max_tokens) if self.price is not None else 0.0
        return Estimate(tokens=prompt + max_tokens, cost_usd=cost)

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int, idempotency_key: str
    ) -> ChatReply:
        where = _display_url(self.base_url)
        try:
            completion = self._client.chat.completions.create(
                **self._request(messages, max_tokens, idempotency_key, where)
            )
        except openai.APIError as exc:
            raise self._map_error(exc, where) from None
        except openai.OpenAIError as exc:
            raise ModelError(f"model call to {where} failed: {self._scrub(str(exc))}") from None
        except (
            ValueError
        ) as exc:  # the body said JSON and was not (json.JSONDecodeError), or failed validation
            raise malformed(where, type(exc).__name__) from None
        return self._reply(completion, messages, where)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        idempotency_key: str,
        on_text: Callable[[str], None],
        pace: float = 0.0,
    ) -> ChatReply:
        """``complete``, streamed: each piece of the answer's text goes to ``on_text`` as it
        arrives (``openai_stream``); the reply is the one ``complete`` gives for that answer.
        Still one request; a stream that breaks midway is ``ModelUnavailable``. ``pace``
        (``--pace``) is waited before asking: a real model's thinking needs no simulation."""
        where = _display_url(self.base_url)
        if pace > 0:
            time.sleep(pace)
        request = self._request(messages, max_tokens, idempotency_key, where)
        body = {
            key: value
            for key, value in request.items()
            if key != "extra_headers" and value is not openai.omit
        }
        try:
            # The SDK's documented way to a raw endpoint: the same client, auth, timeout and
            # error mapping as ``chat.completions.create``, its server-sent events decoded, each
            # chunk's JSON left a dict (``openai_stream.read_answer`` says why).
            chunks = self._client.post(
                "/chat/completions",
                cast_to=object,
                body={**body, "stream": True, "stream_options": {"include_usage": True}},
                options={"headers": request["extra_headers"]},
                stream=True,
                stream_cls=openai.Stream[object],
            )
        except openai.APIError as exc:
            raise self._map_error(exc, where) from None
        except openai.OpenAIError as exc:
            raise ModelError(f"model call to {where} failed: {self._scrub(str(exc))}") from None
        with chunks:
            text, usage, model, finish = read_answer(
                self._chunks(chunks, where),
                on_text=on_text,
                messages=messages,
                name=self.name,
                where=where,
                scrub=self._scrub,
            )
        return ChatReply(
            text=text,
            usage=usage,
            model=model,
            cost_usd=self.price.cost_of(usage) if self.price is not None else 0.0,
            finish_reason=finish,
        )

    def _chunks(self, stream: openai.Stream[object], where: str) -> Iterator[object]:
        """The stream's chunks (``openai_stream.sse_chunks`` of the response's bytes), a break on
        the way mapped to ``ModelUnavailable`` (never what the chunks' reader raises: its
        ``on_text`` runs outside this generator)."""
        timeouts, transport = _transport_errors()
        try:
            yield from sse_chunks(stream.response.iter_bytes())
        except timeouts:
            raise ModelUnavailable(
                f"the answer from {where} stalled: nothing came for {self.timeout:g}s; "
                "transient; if it keeps happening, raise the timeout or check the server"
            ) from None
        except transport:
            raise ModelUnavailable(
                f"the connection to {where} broke in the middle of the answer: transient; "
                "if it keeps happening, check the server or any proxy in front of it"
            ) from None
        except ErrorEvent as exc:
            raise ModelUnavailable(
                f"{where} sent an error in the middle of the answer: treated as transient"
                f"{self._server_said({'error': exc.error})}"
            ) from None
        except ValueError:  # a chunk that is not JSON
            raise malformed(where, "a streamed chunk is not JSON") from None

    def _request(
        self, messages: Sequence[Message], max_tokens: int, idempotency_key: str, where: str
    ) -> dict[str, Any]:
        """The arguments of one chat request, streamed or not."""
        if self._missing_key:
            raise ModelError(f"no API key for {where}: set OPENAI_API_KEY (or pass api_key=...)")
        params = cast(
            "list[ChatCompletionMessageParam]",
            [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in messages],
        )
        # OpenAI's reasoning models reject max_tokens and take max_completion_tokens instead.
        reasoning = bool(_REASONING_MODEL.match(self.name))
        return {
            "model": self.name,
            "messages": params,
            "max_tokens": openai.omit if reasoning else max_tokens,
            "max_completion_tokens": max_tokens if reasoning else openai.omit,
            "extra_headers": {"Idempotency-Key": idempotency_key},
        }

    def _reply(self, completion: object, messages: Sequence[Message], where: str) -> ChatReply:
        choices = getattr(completion, "choices", None)
        if (
            not isinstance(completion, ChatCompletion)
            or not isinstance(choices, list)
            or not choices
        ):
            raise malformed(where, "no choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None)
        if not isinstance(text, str):
            refusal = getattr(message, "refusal", None)
            if isinstance(refusal, str) and refusal:
                raise ModelError(
                    f"the model declined to answer: {self._scrub(refusal)}; rephrase the prompt"
                )
            raise malformed(where, "no message content")
        usage = reported_usage(getattr(completion, "usage", None))
        if usage is None:
            usage = Usage(estimate_messages(messages), estimate_tokens(text), 0, estimated=True)
        model = getattr(completion, "model", None)
        finish_reason = getattr(choice, "finish_reason", None)
        return ChatReply(
            text=text,
            usage=usage,
            model=model if isinstance(model, str) and model else self.name,
            cost_usd=self.price.cost_of(usage) if self.price is not None else 0.0,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        )

    def _map_error(self, exc: openai.APIError, where: str) -> ModelError:
        if isinstance(exc, openai.APITimeoutError):
            return ModelUnavailable(
                f"model call to {where} timed out after {self.timeout:g}s: transient; "
                "if it keeps happening, raise the timeout or check the server"
            )
        if isinstance(exc, openai.APIConnectionError):
            return ModelUnavailable(
                f"cannot reach {where}: is the server running? (check OPENAI_BASE_URL)"
            )
        if not isinstance(exc, openai.APIStatusError):  # APIResponseValidationError and the like
            return malformed(where, type(exc).__name__)
        status = exc.status_code
        said = self._server_said(exc.body)
        retry_after = _retry_after(exc.response.headers)
        if status == 429 and exc.code == "insufficient_quota":
            return ModelError(
                f"quota exhausted at {where} (HTTP 429): add credit or use another key{said}"
            )
        if status == 429:
            wait = f"; retry after {retry_after:g}s" if retry_after is not None else ""
            return ModelUnavailable(
                f"rate limited by {where} (HTTP 429){wait}{said}", retry_after=retry_after
            )
        if status in (408, 409) or status >= 500:
            return ModelUnavailable(
                f"HTTP {status} from {where}: transient server error; "
                f"if it persists, check the provider's status{said}",
                retry_after=retry_after,
            )
        if status == 401:
            return ModelError(
                f"authentication failed at {where} (HTTP 401): set OPENAI_API_KEY to a valid "
                f"key{said}"
            )
        if status == 403:
            return ModelError(
                f"permission denied for model {self.name!r} at {where} (HTTP 403): "
                f"check that the key's project may use it{said}"
            )
        if status == 404:
            return ModelError(
                f"model {self.name!r} or endpoint not found at {where} (HTTP 404): "
                f"check the model name and that the base URL ends in /v1{said}"
            )
        return ModelError(
            f"request rejected by {where} (HTTP {status}): check the model name and "
            f"max_tokens{said}"
        )

    def _server_said(self, body: object) -> str:
        """The server's own error message, scrubbed and shortened, as a suffix; or ''."""
        message: object = None
        if isinstance(body, dict):
            error = body.get("error", body)
            message = error.get("message") if isinstance(error, dict) else error
        elif isinstance(body, str):
            message = body
        if not isinstance(message, str) or not message.strip():
            return ""
        return f" (server said: {self._scrub(message)})"

    def _scrub(self, text: str) -> str:
        """One line, at most 200 characters, with the API key and anything key-like removed."""
        return scrub(text, self._client.api_key)


def _transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """The HTTP library's exceptions for a read that timed out, and for any broken transfer
    (the SDK's client is built on ``httpx``, or on its fork ``httpx2`` in newer releases: both
    name them alike)."""
    libraries = [m for m in (sys.modules.get("httpx2"), sys.modules.get("httpx")) if m is not None]
    timeouts = tuple(m.TimeoutException for m in libraries)
    transport = (*(m.HTTPError for m in libraries), OSError)
    return timeouts, transport
