"""The OpenAI-compatible adapter streams (issue 30): the same answer as unstreamed, piece by piece,
against the fake server's real server-sent events on 127.0.0.1; a stream that breaks midway is
transient, a refusal final, and one call is always one request."""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import pytest

from helpers.openai_server import (
    CACHED_TOKENS,
    REFUSAL,
    FakeOpenAI,
    pieces,
    reply_content,
    usage_for,
)
from steplog.llm import ChatReply, ModelError, ModelUnavailable, Usage
from steplog.llm.base import StreamingChatModel, estimate_messages, estimate_tokens
from steplog.llm.openai_compat import OpenAICompatModel

SECRET = "sk-test-DO-NOT-LEAK-stream-0123456789abcdef"
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello to the streaming test."},
]


@pytest.fixture
def model(fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAICompatModel]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    made = OpenAICompatModel(
        "gpt-4o-mini", base_url=fake_openai.base_url, api_key=SECRET, timeout=0.5
    )
    yield made
    made.close()


def streamed(model: OpenAICompatModel, key: str = "k") -> tuple[ChatReply, list[str]]:
    got: list[str] = []
    reply = model.stream(MESSAGES, max_tokens=50, idempotency_key=key, on_text=got.append)
    return reply, got


@pytest.mark.parametrize("behaviour", ["ok", "ok_cached", "ok+words:200"])
def test_the_streamed_reply_is_the_unstreamed_one_handed_over_piece_by_piece(
    model: OpenAICompatModel, fake_openai: FakeOpenAI, behaviour: str
) -> None:
    assert isinstance(model, StreamingChatModel)
    fake_openai.script(behaviour, behaviour)
    whole = model.complete(MESSAGES, max_tokens=50, idempotency_key="plain")
    reply, got = streamed(model, "step-9")
    assert reply == whole, "text, usage, cost, model and finish reason alike"
    assert got == pieces(whole.text) and "".join(got) == whole.text
    if behaviour.endswith("words:200"):
        assert len(got) > 200
    plain, stream = fake_openai.calls
    assert stream.idempotency_key == "step-9" and stream.authorization == f"Bearer {SECRET}"
    assert stream.body is not None and stream.body["stream"] is True
    assert stream.body["stream_options"] == {"include_usage": True}
    assert {k: v for k, v in stream.body.items() if not k.startswith("stream")} == plain.body


def test_usage_comes_from_the_usage_chunk_and_is_estimated_only_without_one(
    model: OpenAICompatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("ok_cached", "no_usage")
    reply, _ = streamed(model)
    body = fake_openai.calls[0].body
    sent = usage_for(body, reply_content(body), CACHED_TOKENS)
    assert reply.usage == Usage(
        sent["prompt_tokens"], sent["completion_tokens"], CACHED_TOKENS, estimated=False
    )
    assert reply.cost_usd > 0
    guessed, _ = streamed(model)
    text = guessed.text
    assert guessed.usage == Usage(
        estimate_messages(MESSAGES), estimate_tokens(text), 0, estimated=True
    )


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        ("ok+words:20+cut:5", "connection to"),
        ("ok+words:20+bad_chunk:5", "malformed response"),
        ("ok+words:20+error_event:5", "sent an error in the middle of the answer"),
        ("ok+words:20+slow:900", "stalled"),
    ],
)
def test_a_stream_that_breaks_midway_is_transient_and_was_asked_once(
    model: OpenAICompatModel, fake_openai: FakeOpenAI, behaviour: str, says: str
) -> None:
    fake_openai.script(behaviour)
    got: list[str] = []
    with pytest.raises(ModelUnavailable) as caught:
        model.stream(MESSAGES, max_tokens=50, idempotency_key="k", on_text=got.append)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert "".join(got) == "".join(pieces(reply_content(fake_openai.calls[0].body, 20))[: len(got)])
    if "slow" not in behaviour:
        assert len(got) == 5, "what came before the break was handed over"
    rendered = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert SECRET not in rendered
    assert fake_openai.call_count == 1, "one request: the SDK's retries are off"


@pytest.mark.parametrize(
    ("behaviour", "error", "says"),
    [
        ("429", ModelUnavailable, "rate limited"),
        ("500", ModelUnavailable, "HTTP 500"),
        ("401", ModelError, "set OPENAI_API_KEY"),
        ("400", ModelError, "HTTP 400"),
        ("404", ModelError, "check the model name"),
        ("quota", ModelError, "add credit"),
        ("refusal", ModelError, "declined to answer"),
    ],
)
def test_refusals_and_http_errors_map_as_they_do_unstreamed(
    model: OpenAICompatModel,
    fake_openai: FakeOpenAI,
    behaviour: str,
    error: type[ModelError],
    says: str,
) -> None:
    fake_openai.script(behaviour)
    with pytest.raises(ModelError) as caught:
        streamed(model)
    assert type(caught.value) is error and says in str(caught.value)
    if behaviour == "refusal":
        assert REFUSAL in str(caught.value)
    rendered = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert SECRET not in rendered and SECRET[10:] not in rendered
    assert fake_openai.call_count == 1


def test_server_sent_events_are_decoded_however_the_bytes_are_split() -> None:
    from steplog.llm.openai_stream import ErrorEvent, sse_chunks

    wire = (
        b": keep-alive comment\r\n\r\n"
        b'event: message\r\ndata: {"a": 1}\r\n\r\n'
        b'data: {"b":\ndata: 2}\n\n'  # one event's data on two lines
        b"id: 7\nretry: 100\n\n"  # no data: no event
        b'data:{"c": 3}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"after": "done"}\n\n'
    )
    whole = list(sse_chunks([wire]))
    assert whole == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert list(sse_chunks(wire[i : i + 1] for i in range(len(wire)))) == whole
    with pytest.raises(ErrorEvent):
        list(sse_chunks([b'data: {"ok": 1}\n\ndata: {"error": {"message": "down"}}\n\n']))
    with pytest.raises(ValueError):
        list(sse_chunks([b"data: {not json\n\n"]))
