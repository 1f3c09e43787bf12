"""The model seam: what the engine needs from any chat model, and the normalised reply.

"Model" in steplog means an LLM; Qt item models are "views' models" and tables are "tables".
Adapters implement ``ChatModel``; the engine reserves budget with ``estimate`` before calling
``complete`` and charges the ``Usage`` the reply reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from steplog.errors import PermanentError, TransientError

Message = Mapping[str, str]
"""One chat message: ``{"role": "system"|"user"|"assistant", "content": "..."}``."""


@dataclass(frozen=True)
class Usage:
    """Token usage of one model call, normalised across providers."""

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens."""
    cached_tokens: int = 0
    """Prompt tokens served from the provider's cache (a subset of ``input_tokens``)."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache (a subset of ``input_tokens``, disjoint from
    ``cached_tokens``); Anthropic bills them above the input price."""
    estimated: bool = False
    """True when counted from text length, not reported by the provider."""

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ChatReply:
    """A model's answer: the recorded *decision* of a chat step."""

    text: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    cost_usd: float = 0.0
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChatReply:
        usage = Usage(**data.get("usage", {}))
        return cls(
            text=data["text"],
            usage=usage,
            model=data.get("model", ""),
            cost_usd=float(data.get("cost_usd", 0.0)),
            finish_reason=data.get("finish_reason"),
        )


@dataclass(frozen=True)
class Estimate:
    """The most a call may spend: reserved against the budget before the call is made."""

    tokens: int
    cost_usd: float


class ModelError(PermanentError):
    """A model call that failed for good (bad request, auth, malformed reply); not retried."""


class ModelUnavailable(ModelError, TransientError):
    """A model call that may succeed if retried: timeout, 429, 5xx, connection refused.

    ``retry_after`` is the provider's requested wait in seconds, when it sent one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@runtime_checkable
class ChatModel(Protocol):
    """What the engine needs from a chat model."""

    name: str
    """Model name as shown in the log and used for pricing."""

    def estimate(self, messages: Sequence[Message], *, max_tokens: int) -> Estimate:
        """An upper bound on what ``complete`` with these arguments can cost."""
        ...

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int, idempotency_key: str
    ) -> ChatReply:
        """Call the model once. No retries inside: the engine owns the retry policy."""
        ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A chat model that can hand its answer over as it comes (optional: the engine then writes
    the text to the run's stream ``tokens`` while the call runs; the recorded decision is still
    the whole reply)."""

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        idempotency_key: str,
        on_text: Callable[[str], None],
        pace: float = 0.0,
    ) -> ChatReply:
        """``complete``, with each piece of the answer's text passed to ``on_text`` as it
        arrives. ``pace``: seconds of simulated thinking (``--pace``) to spread the pieces over,
        for a scripted model; a real one waits them before asking."""
        ...


def close_model(model: ChatModel) -> None:
    """Release what a model holds (an adapter's HTTP client and its kept-alive connections).

    ``close`` is optional for a ``ChatModel``: one without it holds nothing to release.
    """
    close = getattr(model, "close", None)
    if callable(close):
        close()


def estimate_tokens(text: str) -> int:
    """A conservative token count from text: ~3 characters a token, never zero."""
    return max(1, (len(text) + 2) // 3)


def estimate_messages(messages: Sequence[Message]) -> int:
    """Estimated prompt tokens for a message list (content plus ~4 tokens framing each)."""
    return sum(estimate_tokens(m.get("content", "")) + 4 for m in messages)
