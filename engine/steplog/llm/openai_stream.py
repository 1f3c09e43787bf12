"""An OpenAI-compatible answer read as it streams: chunks in, text handed on, one ``ChatReply`` out.

``OpenAICompatModel.stream`` asks with ``stream=True`` and ``stream_options={"include_usage":
True}``; this module reads what comes back. Each chunk's ``delta.content`` goes to ``on_text`` as
it arrives; the reply it returns is the one ``complete`` would have returned for the same answer:
the whole text, the usage of the final usage chunk (estimated, and marked so, only when the
server sent none), the model the server named and the finish reason.

An answer is whole only once a choice has said why it finished. A stream that ends without a
finish reason, breaks (connection dropped, a timeout between chunks), sends an error event or a
chunk that is not JSON is *broken*: ``ModelUnavailable``, retried by the engine's policy like any
transient failure (the cut attempt's streamed text stays in the run's stream, marked cut). A
refusal is final (``ModelError``), as it is unstreamed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence

from steplog.llm.base import (
    Message,
    ModelError,
    ModelUnavailable,
    Usage,
    estimate_messages,
    estimate_tokens,
)


def read_answer(
    chunks: Iterable[object],
    *,
    on_text: Callable[[str], None],
    messages: Sequence[Message],
    name: str,
    where: str,
    scrub: Callable[[str], str],
) -> tuple[str, Usage, str, str]:
    """The streamed answer's text, usage, model and finish reason; ``on_text`` has had every
    piece of the text, in order, by the time it returns. Errors as the module says.

    ``chunks`` are the events' JSON as decoded (dicts): read as they are, not built into the
    SDK's typed chunk objects, which cost ~0.3 ms each (more than the rest of a chunk's way)."""
    pieces: list[str] = []
    refused: list[str] = []
    usage: Usage | None = None
    model = ""
    finish: str | None = None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            raise malformed(where, "a streamed chunk is not a JSON object")
        if not model:
            named = chunk.get("model")
            model = named if isinstance(named, str) else ""
        raw_usage = chunk.get("usage")
        if raw_usage is not None:
            usage = usage_of(raw_usage) or usage
        choices = chunk.get("choices")
        if not choices:
            continue  # the usage chunk (include_usage) has no choices
        choice = choices[0] if isinstance(choices, list) else None
        if not isinstance(choice, dict):
            raise malformed(where, "a streamed chunk's choices are not a list of objects")
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text = delta.get("content")
            if text and isinstance(text, str):
                pieces.append(text)
                on_text(text)
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                refused.append(refusal)
        reason = choice.get("finish_reason")
        if reason and isinstance(reason, str):
            finish = reason
    if refused and not pieces:
        raise ModelError(
            f"the model declined to answer: {scrub(''.join(refused))}; rephrase the prompt"
        )
    if finish is None:
        raise ModelUnavailable(
            f"the answer from {where} stopped before it was finished (no finish reason): "
            "treated as transient; if it persists, check the server or any proxy in front of it"
        )
    text = "".join(pieces)
    if usage is None:
        usage = Usage(estimate_messages(messages), estimate_tokens(text), 0, estimated=True)
    return text, usage, model or name, finish


class ErrorEvent(Exception):
    """The server sent an error in the stream (``{"error": ...}`` as a chunk)."""

    def __init__(self, error: object) -> None:
        super().__init__("error event")
        self.error = error


def sse_chunks(data: Iterable[bytes]) -> Iterator[object]:
    """The JSON of each ``data:`` event of a server-sent event stream, up to ``data: [DONE]``.

    Decoded here from the response's bytes, one ``split`` per read and one ``json.loads`` per
    event: the SDK's line-by-line decoder took ~40 % of a long answer's streaming overhead.
    ``ValueError`` for an event that is not JSON, ``ErrorEvent`` for an error event; comments,
    ``event:``, ``id:`` and ``retry:`` lines are ignored (lines end in LF or CRLF)."""
    pending = b""
    lines: list[bytes] = []
    for raw in data:
        pending += raw
        if b"\n" not in raw:
            continue
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.startswith(b"data:"):
                lines.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif not line and lines:  # a blank line ends the event
                payload = lines[0] if len(lines) == 1 else b"\n".join(lines)
                lines = []
                if payload.startswith(b"[DONE]"):
                    return
                chunk = json.loads(payload)
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise ErrorEvent(chunk["error"])
                yield chunk


def usage_of(raw: object) -> Usage | None:
    """``reported_usage`` of a usage object as decoded JSON (a streamed usage chunk's)."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(prompt, completion, cached if isinstance(cached, int) else 0, estimated=False)


def reported_usage(raw: object) -> Usage | None:
    """Provider-reported usage, or None when the server sent none (or nonsense)."""
    prompt = getattr(raw, "prompt_tokens", None)
    completion = getattr(raw, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    cached = getattr(getattr(raw, "prompt_tokens_details", None), "cached_tokens", None)
    return Usage(prompt, completion, cached if isinstance(cached, int) else 0, estimated=False)


def malformed(where: str, what: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"malformed response from {where} ({what}): treated as transient; "
        "if it persists, check the server or any proxy in front of it"
    )
