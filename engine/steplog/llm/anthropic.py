"""``AnthropicModel``: Claude through Anthropic's Messages API and the official ``anthropic`` SDK.

``--model anthropic:claude-haiku-4-5``. Importing this module imports the SDK (about 0.3 s), so
``steplog.llm`` imports it only when an Anthropic model is asked for: a resume of any other run
never pays for it.

One model object holds one SDK client for all its calls; the engine makes one per run and
``close()``s it when the run ends. One call is one HTTP request: the SDK's retries are off
(``max_retries=0``), the engine owns the retry policy. Each request carries the step's
``Idempotency-Key`` header. ``system`` messages become the request's ``system`` text; the others
are sent in order as ``user`` and ``assistant`` turns.

``stream`` (what the engine uses) reads the answer as server-sent events and hands each piece of
text to the run's stream ``tokens`` as it arrives; ``complete`` asks for the whole answer at once.
Usage is Anthropic's, normalised: ``input_tokens`` counts the whole prompt (Anthropic's
``input_tokens`` plus cache reads plus cache writes), ``cached_tokens`` the cache reads,
``cache_write_tokens`` the cache writes. Errors: see ``anthropic_errors``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import anthropic
from anthropic.types import Message as AnthropicMessage

from steplog.llm.anthropic_errors import malformed, map_error
from steplog.llm.base import ChatReply, Estimate, Message, ModelError, Usage, estimate_messages
from steplog.llm.prices import Price, PriceTable
from steplog.llm.setup import ANTHROPIC, anthropic_url, check_ready
from steplog.llm.wire import display_url

LOCAL_PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to a local endpoint when none is configured (the SDK wants one)."""


class AnthropicModel:
    """A Claude model behind Anthropic's ``/v1/messages``."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        prices: PriceTable | None = None,
    ) -> None:
        self.model = model.removeprefix(ANTHROPIC)
        """The model id the API knows (``claude-haiku-4-5``)."""
        self.name = ANTHROPIC + self.model
        """As the log shows it: ``anthropic:claude-haiku-4-5``."""
        self.base_url = anthropic_url(base_url)
        self.timeout = timeout
        check_ready(self.name, base_url=self.base_url, api_key=api_key)
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        self.price: Price | None = (prices or PriceTable()).price_for(
            self.model, base_url=self.base_url
        )
        """None when the model's price is unknown: calls are charged 0 ("cost unknown")."""
        self._where = display_url(self.base_url)
        # The key lives in the client only; error messages are scrubbed of it.
        self._client = anthropic.Anthropic(
            api_key=key or LOCAL_PLACEHOLDER_KEY,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=0,
        )

    @property
    def cost_known(self) -> bool:
        return self.price is not None

    def close(self) -> None:
        """Close the client's kept-alive connections. Idempotent."""
        self._client.close()

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, base_url={self._where!r})"

    def estimate(self, messages: Sequence[Message], *, max_tokens: int) -> Estimate:
        """The prompt at its dearest (every token a cache write) plus ``max_tokens`` of output."""
        prompt = estimate_messages(messages)
        cost = 0.0
        if self.price is not None:
            cost = self.price.cost(prompt, max_tokens, cache_write_tokens=prompt)
            cost = max(cost, self.price.cost(prompt, max_tokens))
        return Estimate(tokens=prompt + max_tokens, cost_usd=cost)

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int, idempotency_key: str
    ) -> ChatReply:
        try:
            message = self._client.messages.create(
                **self._request(messages, max_tokens, idempotency_key)
            )
        except anthropic.AnthropicError as exc:
            raise self._error(exc) from None
        except ValueError as exc:  # a body that said JSON and was not
            raise malformed(self._where, type(exc).__name__) from None
        return self._reply(message)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        idempotency_key: str,
        on_text: Callable[[str], None],
        pace: float = 0.0,
    ) -> ChatReply:
        """``complete``, each piece of text passed to ``on_text`` as the server sends it.
        ``pace`` (``--pace``) is waited before asking."""
        if pace > 0:
            time.sleep(pace)
        try:
            with self._client.messages.stream(
                **self._request(messages, max_tokens, idempotency_key)
            ) as events:
                for text in events.text_stream:
                    if text:
                        on_text(text)
                message = events.get_final_message()
        except anthropic.AnthropicError as exc:
            raise self._error(exc) from None
        except ValueError as exc:  # an event whose data was not JSON
            raise malformed(self._where, type(exc).__name__) from None
        return self._reply(message)

    def _request(
        self, messages: Sequence[Message], max_tokens: int, idempotency_key: str
    ) -> dict[str, Any]:
        system = "\n\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
        turns: list[dict[str, str]] = [
            {
                "role": "assistant" if m.get("role") == "assistant" else "user",
                "content": m.get("content", ""),
            }
            for m in messages
            if m.get("role") != "system"
        ]
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": turns,
            "extra_headers": {"Idempotency-Key": idempotency_key},
        }
        if system:
            request["system"] = system
        return request

    def _reply(self, message: object) -> ChatReply:
        if not isinstance(message, AnthropicMessage) or message.stop_reason is None:
            raise malformed(self._where, "no complete message")
        if message.stop_reason == "refusal":
            raise ModelError(f"the model declined to answer ({self.name}); rephrase the prompt")
        text = "".join(block.text for block in message.content if block.type == "text")
        usage, one_hour = _usage(message.usage)
        cost = 0.0
        if self.price is not None:
            # 1-hour cache writes bill at 2x input, the 5-minute rate is in the table.
            five_minute = self.price.cache_write
            written_at = self.price.input if five_minute is None else five_minute
            extra = one_hour * (2 * self.price.input - written_at)
            cost = self.price.cost_of(usage) + max(0.0, extra) / 1_000_000
        return ChatReply(
            text=text,
            usage=usage,
            model=message.model or self.model,
            cost_usd=cost,
            finish_reason=message.stop_reason,
        )

    def _error(self, exc: anthropic.AnthropicError) -> ModelError:
        return map_error(
            exc,
            model=self.model,
            where=self._where,
            timeout=self.timeout,
            secret=self._client.api_key,
        )


def _usage(raw: Any) -> tuple[Usage, int]:
    """Anthropic's usage normalised, and how many cache writes were 1-hour ones."""

    def count(value: object) -> int:
        return value if isinstance(value, int) and value > 0 else 0

    fresh = count(getattr(raw, "input_tokens", 0))
    read = count(getattr(raw, "cache_read_input_tokens", 0))
    written = count(getattr(raw, "cache_creation_input_tokens", 0))
    one_hour = count(getattr(getattr(raw, "cache_creation", None), "ephemeral_1h_input_tokens", 0))
    usage = Usage(
        input_tokens=fresh + read + written,
        output_tokens=count(getattr(raw, "output_tokens", 0)),
        cached_tokens=read,
        cache_write_tokens=written,
    )
    return usage, min(one_hour, written)
