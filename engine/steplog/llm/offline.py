"""``OfflineModel``: a deterministic, scripted stand-in for a chat model.

It is not an LLM and never claims to be one. It reads a support ticket out of the last user
message, classifies it with keyword rules and fills per-category reply templates (``tickets``),
and it signs every draft as written by steplog's scripted model. Its reply is a pure function of
the messages, so a run interrupted and resumed produces byte-identical output to one that ran
straight through. For a message without a ticket it answers a short plain-text digest.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from steplog.llm.base import ChatReply, Estimate, Message, Usage, estimate_messages, estimate_tokens


class OfflineModel:
    """A deterministic scripted model for the demo, tests and kill tests. Costs nothing."""

    name = "offline"

    def estimate(self, messages: Sequence[Message], *, max_tokens: int) -> Estimate:
        return Estimate(tokens=estimate_messages(messages) + max_tokens, cost_usd=0.0)

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int, idempotency_key: str
    ) -> ChatReply:
        from steplog.llm.tickets import answer_ticket, digest, parse_ticket  # compiled when asked

        prompt = _last_user_text(messages)
        ticket = parse_ticket(prompt)
        text = answer_ticket(ticket) if ticket is not None else digest(prompt)
        finish_reason = "stop"
        if estimate_tokens(text) > max_tokens:  # behave like a real model: cut at the limit
            text, finish_reason = text[: max(0, max_tokens) * 3], "length"
        usage = Usage(
            input_tokens=estimate_messages(messages),
            output_tokens=estimate_tokens(text),
            estimated=True,
        )
        return ChatReply(
            text=text, usage=usage, model=self.name, cost_usd=0.0, finish_reason=finish_reason
        )

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        idempotency_key: str,
        on_text: Callable[[str], None],
        pace: float = 0.0,
    ) -> ChatReply:
        """``complete``, its text handed to ``on_text`` a few words at a time, spread over
        ``pace`` seconds (the demo's simulated thinking) as a model's tokens would come."""
        reply = self.complete(messages, max_tokens=max_tokens, idempotency_key=idempotency_key)
        pieces = _pieces(reply.text)
        for piece in pieces:
            if pace > 0:
                time.sleep(pace / len(pieces))
            on_text(piece)
        return reply

    def __repr__(self) -> str:
        return "OfflineModel()"


def _last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message.get("content", "")
    return messages[-1].get("content", "") if messages else ""


_PIECE = re.compile(r"\S+\s*|\s+")


def _pieces(text: str, words: int = 3) -> list[str]:
    """``text`` in pieces of a few words each (their concatenation is ``text``)."""
    found = _PIECE.findall(text)
    return ["".join(found[i : i + words]) for i in range(0, len(found), words)] or [text]
