"""The model seam's adapters: the scripted offline model, the OpenAI adapter against a real HTTP
fake, the price table and the shipped demo tickets."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from importlib import resources

import pytest

from helpers.openai_server import CACHED_TOKENS, FakeOpenAI, reply_content, usage_for
from helpers.paths import ROOT
from steplog.errors import TransientError
from steplog.llm import (
    ChatModel,
    ModelError,
    ModelUnavailable,
    OfflineModel,
    Price,
    PriceTable,
    Usage,
    make_model,
)
from steplog.llm.base import estimate_messages, estimate_tokens
from steplog.llm.openai_compat import OpenAICompatModel
from steplog.llm.prices import FREE, is_local
from steplog.llm.tickets import CATEGORIES, PRIORITIES, SIGNATURE, parse_ticket

ENGINE = ROOT / "engine"
SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdefXYZ"
INSTRUCTION = (
    "Classify the ticket and draft a reply. Answer in JSON with keys category "
    "(billing|bug|account|feature_request|privacy|outage|praise|other), priority "
    "(urgent|high|normal|low) and reply."
)


def load_tickets() -> list[dict[str, str]]:
    text = resources.files("steplog").joinpath("data/tickets.json").read_text(encoding="utf-8")
    tickets: list[dict[str, str]] = json.loads(text)
    return tickets


def ticket_prompt(t: dict[str, str], instruction: str = INSTRUCTION) -> list[dict[str, str]]:
    text = f"Ticket {t['id']} from {t['customer']}\nSubject: {t['subject']}\n\n{t['body']}"
    if instruction.startswith("\n"):  # right under the body, no blank line between
        text += instruction
    elif instruction:
        text += f"\n\n{instruction}"
    return [
        {"role": "system", "content": "You triage support tickets."},
        {"role": "user", "content": text},
    ]


def sentences(paragraph: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", paragraph.strip()) if s]


# --- the shipped demo data ------------------------------------------------------------------------


def test_shipped_tickets_are_varied_realistic_and_well_formed() -> None:
    tickets = load_tickets()
    assert len(tickets) >= 14
    ids = [t["id"] for t in tickets]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids), "deterministic, documented order"
    for t in tickets:
        assert set(t) == {"id", "customer", "subject", "body"}
        assert re.fullmatch(r"T-\d{4}", t["id"])
        assert t["customer"].strip() and t["subject"].strip()
        assert 2 <= len(sentences(t["body"])) <= 6, t["id"]


# --- the offline model ----------------------------------------------------------------------------


def test_offline_answers_every_shipped_ticket_with_valid_json() -> None:
    model = OfflineModel()
    for t in load_tickets():
        messages = ticket_prompt(t)
        reply = model.complete(messages, max_tokens=400, idempotency_key=f"k-{t['id']}")
        answer = json.loads(reply.text)
        assert set(answer) == {"category", "priority", "reply"}
        assert answer["category"] in CATEGORIES and answer["priority"] in PRIORITIES
        greeting, body, signature = answer["reply"].split("\n\n")
        assert greeting == f"Hi {t['customer'].split()[0]},"
        assert f'"{t["subject"]}"' in body
        assert 3 <= len(sentences(body)) <= 6, (t["id"], body)
        assert signature == SIGNATURE and "scripted model" in signature
        assert reply.usage == Usage(
            estimate_messages(messages), estimate_tokens(reply.text), 0, estimated=True
        )
        assert reply.cost_usd == 0.0 and reply.model == "offline" and reply.finish_reason == "stop"


def test_offline_categories_and_priorities_vary_across_the_demo() -> None:
    model = OfflineModel()
    answers = [
        json.loads(model.complete(ticket_prompt(t), max_tokens=400, idempotency_key="k").text)
        for t in load_tickets()
    ]
    assert len({a["category"] for a in answers}) >= 5
    assert len({a["priority"] for a in answers}) >= 3


@pytest.mark.parametrize(
    "instruction",
    [
        INSTRUCTION,
        "Answer in JSON.",
        "\nClassify this ticket.\nReturn JSON with keys category, priority and reply.",
        "\n"
        "You are a triage assistant. Reply with a JSON object: category "
        "(billing|bug|account|...), priority, reply.",
    ],
)
def test_offline_reads_the_ticket_not_the_instruction(instruction: str) -> None:
    """Instructions list category names; they must not sway the rules, nor cut a body that
    mentions JSON."""
    model = OfflineModel()
    for t in load_tickets():
        prompt = ticket_prompt(t, instruction=instruction)
        parsed = parse_ticket(prompt[1]["content"])
        assert parsed is not None and (parsed.id, parsed.subject, parsed.body) == (
            t["id"],
            t["subject"],
            t["body"],
        )
        bare = model.complete(
            ticket_prompt(t, instruction=""), max_tokens=400, idempotency_key="a"
        ).text
        assert model.complete(prompt, max_tokens=400, idempotency_key="b").text == bare
    prepended = [
        {"role": "user", "content": f"{instruction}\n\n{ticket_prompt(t, '')[1]['content']}"}
    ]
    assert model.complete(prepended, max_tokens=400, idempotency_key="c").text == bare


def test_offline_summarises_a_request_that_is_not_a_ticket() -> None:
    model = OfflineModel()
    request = (
        "Write a short digest of today's tickets:\n"
        "- T-1001 billing high\n"
        "- T-1002 bug low\n"
        "- T-1006 outage urgent"
    )
    reply = model.complete(
        [{"role": "user", "content": request}], max_tokens=200, idempotency_key="d"
    )
    assert (
        reply.text
        == model.complete(
            [{"role": "user", "content": request}], max_tokens=200, idempotency_key="e"
        ).text
    )
    assert reply.text.startswith("Digest written offline by steplog's scripted model")
    assert "3 tickets (T-1001 to T-1006)" in reply.text and "outage 1" in reply.text
    with pytest.raises(ValueError):
        json.loads(reply.text)
    plain = model.complete(
        [{"role": "user", "content": "Hello. Anything new?"}], max_tokens=200, idempotency_key="f"
    )
    assert '"Hello."' in plain.text and "1 line and 3 words" in plain.text


def test_offline_stops_at_max_tokens_like_a_real_model() -> None:
    model = OfflineModel()
    messages = ticket_prompt(load_tickets()[0])
    reply = model.complete(messages, max_tokens=20, idempotency_key="k")
    assert reply.finish_reason == "length" and reply.usage.output_tokens <= 20
    assert model.estimate(messages, max_tokens=20).tokens >= reply.usage.total
    assert model.estimate(messages, max_tokens=20).cost_usd == 0.0


def test_offline_reply_is_identical_in_other_processes() -> None:
    """A pure function of the messages: same text under different hash seeds, in fresh
    interpreters."""
    tickets = load_tickets()
    prompts = [ticket_prompt(t) for t in tickets] + [
        [{"role": "user", "content": "Summarise: T-1 billing, T-2 bug"}]
    ]
    here = [OfflineModel().complete(p, max_tokens=400, idempotency_key="k").text for p in prompts]
    script = (
        "import json, sys\n"
        "from steplog.llm import OfflineModel\n"
        "prompts = json.load(sys.stdin)\n"
        "print(json.dumps([OfflineModel().complete(p, max_tokens=400, idempotency_key='x').text "
        "for p in prompts]))\n"
    )
    for seed in ("0", "4242"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": os.pathsep.join([str(ENGINE), os.environ.get("PYTHONPATH", "")]),
        }
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(prompts),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        )
        assert json.loads(done.stdout) == here


# --- the package surface --------------------------------------------------------------------------


def test_importing_steplog_llm_does_not_import_the_openai_sdk() -> None:
    script = (
        "import sys, steplog.llm\n"
        "before = 'openai' in sys.modules\n"
        "steplog.llm.make_model('offline')\n"
        "after_offline = 'openai' in sys.modules\n"
        "steplog.llm.OpenAICompatModel\n"
        "print(before, after_offline, 'openai' in sys.modules)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ENGINE), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "False", "True"]


def test_make_model(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI) -> None:
    assert isinstance(make_model(None), OfflineModel) and isinstance(
        make_model("offline"), OfflineModel
    )
    model = make_model("llama3", base_url=fake_openai.base_url)
    assert isinstance(model, OpenAICompatModel) and isinstance(model, ChatModel)
    assert model.base_url == fake_openai.base_url
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    from_env = make_model("llama3")
    assert (
        isinstance(from_env, OpenAICompatModel) and from_env.base_url == "http://localhost:11434/v1"
    )


# --- the price table ------------------------------------------------------------------------------


def test_price_table() -> None:
    table = PriceTable()
    mini = table.price_for("gpt-4o-mini")
    assert mini == Price(0.15, 0.60, 0.075)
    assert table.price_for("gpt-4o-mini-2024-07-18") == mini and table.price_for("gpt-4o") != mini
    assert mini.cost(1_000_000, 1_000_000, 500_000) == pytest.approx(
        0.5 * 0.15 + 0.5 * 0.075 + 0.60
    )
    assert table.price_for("llama3", base_url="http://127.0.0.1:8080/v1") == FREE
    assert table.price_for("llama3", base_url="http://localhost:11434/v1") == FREE
    assert (
        table.price_for("llama3", base_url="https://api.example.com/v1") is None
    )  # "cost unknown"
    assert (
        table.price_for("gpt-4o-mini", base_url="http://127.0.0.1:4000/v1") == mini
    )  # a local proxy still bills
    assert table.with_prices({"llama3": Price(1, 2)}).price_for("llama3") == Price(1, 2)
    assert (
        is_local("http://[::1]:8000/v1")
        and not is_local("https://api.openai.com/v1")
        and not is_local(None)
    )


# --- the OpenAI-compatible adapter against the fake -----------------------------------------------


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def model(fake_openai: FakeOpenAI, no_openai_env: None) -> Iterator[OpenAICompatModel]:
    yield OpenAICompatModel(
        "gpt-4o-mini", base_url=fake_openai.base_url, api_key=SECRET, timeout=0.5
    )


MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello to the test suite."},
]


def test_reply_carries_the_servers_usage_and_the_tables_cost(
    model: OpenAICompatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("ok_cached")
    reply = model.complete(MESSAGES, max_tokens=50, idempotency_key="step-7")
    (call,) = fake_openai.calls
    assert call.idempotency_key == "step-7" and call.authorization == f"Bearer {SECRET}"
    assert (
        call.body is not None
        and call.body["max_tokens"] == 50
        and call.body["model"] == "gpt-4o-mini"
    )
    assert reply.text == reply_content(call.body)
    sent = usage_for(call.body, reply.text, CACHED_TOKENS)
    assert reply.usage == Usage(
        sent["prompt_tokens"], sent["completion_tokens"], CACHED_TOKENS, estimated=False
    )
    expected = (
        (sent["prompt_tokens"] - CACHED_TOKENS) * 0.15
        + CACHED_TOKENS * 0.075
        + sent["completion_tokens"] * 0.60
    ) / 1e6
    assert reply.cost_usd == pytest.approx(expected) and reply.cost_usd > 0
    assert reply.model == "gpt-4o-mini" and reply.finish_reason == "stop"


def test_estimate_is_an_upper_bound_at_list_price(
    model: OpenAICompatModel, fake_openai: FakeOpenAI
) -> None:
    estimate = model.estimate(MESSAGES, max_tokens=50)
    assert estimate.tokens == estimate_messages(MESSAGES) + 50
    assert estimate.cost_usd == pytest.approx(
        (estimate_messages(MESSAGES) * 0.15 + 50 * 0.60) / 1e6
    )
    reply = model.complete(MESSAGES, max_tokens=50, idempotency_key="k")
    assert reply.usage.total <= estimate.tokens and reply.cost_usd <= estimate.cost_usd


def test_missing_usage_is_estimated(model: OpenAICompatModel, fake_openai: FakeOpenAI) -> None:
    fake_openai.script("no_usage")
    reply = model.complete(MESSAGES, max_tokens=50, idempotency_key="k")
    assert reply.usage == Usage(
        estimate_messages(MESSAGES), estimate_tokens(reply.text), 0, estimated=True
    )


def test_custom_and_local_prices(fake_openai: FakeOpenAI, no_openai_env: None) -> None:
    priced = OpenAICompatModel(
        "house-model",
        base_url=fake_openai.base_url,
        prices=PriceTable({"house-model": Price(1.0, 2.0)}),
    )
    reply = priced.complete(MESSAGES, max_tokens=50, idempotency_key="k")
    assert reply.cost_usd == pytest.approx(
        (reply.usage.input_tokens * 1.0 + reply.usage.output_tokens * 2.0) / 1e6
    )
    local = OpenAICompatModel("house-model", base_url=fake_openai.base_url)
    assert (
        local.complete(MESSAGES, max_tokens=50, idempotency_key="k").cost_usd == 0.0
        and local.cost_known
    )
    assert (
        fake_openai.calls[-1].authorization == "Bearer not-needed"
    )  # no key configured: a placeholder
    remote = OpenAICompatModel("house-model", base_url="https://api.example.com/v1", api_key="sk-x")
    assert (
        remote.price is None
        and not remote.cost_known
        and remote.estimate(MESSAGES, max_tokens=50).cost_usd == 0.0
    )


def test_reasoning_models_get_max_completion_tokens(
    fake_openai: FakeOpenAI, no_openai_env: None
) -> None:
    OpenAICompatModel("o4-mini", base_url=fake_openai.base_url).complete(
        MESSAGES, max_tokens=64, idempotency_key="k"
    )
    body = fake_openai.calls[0].body
    assert body is not None and body["max_completion_tokens"] == 64 and "max_tokens" not in body


def test_timeout_is_unavailable_quickly_and_not_retried(
    model: OpenAICompatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("hang")
    # The client's own 0.5 s timeout ends the call (the fake would hang for HANG_LIMIT_S).
    with pytest.raises(ModelUnavailable, match="timed out after 0.5s"):
        model.complete(MESSAGES, max_tokens=50, idempotency_key="slow")
    assert fake_openai.calls_by_key() == {"slow": 1}


def test_rate_limit_carries_retry_after(model: OpenAICompatModel, fake_openai: FakeOpenAI) -> None:
    fake_openai.script("429")
    with pytest.raises(ModelUnavailable) as caught:
        model.complete(MESSAGES, max_tokens=50, idempotency_key="k")
    assert caught.value.retry_after == 1 and isinstance(caught.value, TransientError)
    assert fake_openai.call_count == 1
    # and the next call goes through: the fake's script is used up
    assert model.complete(MESSAGES, max_tokens=50, idempotency_key="k").text


@pytest.mark.parametrize(
    ("behaviour", "error", "says"),
    [
        ("500", ModelUnavailable, "HTTP 500"),
        ("malformed", ModelUnavailable, "malformed response"),
        ("no_choices", ModelUnavailable, "malformed response"),
        ("no_content", ModelUnavailable, "malformed response"),
        ("401", ModelError, "set OPENAI_API_KEY"),
        ("400", ModelError, "HTTP 400"),
        ("404", ModelError, "check the model name"),
        ("quota", ModelError, "add credit"),
    ],
)
def test_errors_are_mapped_sent_once_and_never_show_the_key(
    model: OpenAICompatModel,
    fake_openai: FakeOpenAI,
    behaviour: str,
    error: type[ModelError],
    says: str,
) -> None:
    fake_openai.script(behaviour)
    with pytest.raises(ModelError) as caught:
        model.complete(MESSAGES, max_tokens=50, idempotency_key="k")
    assert type(caught.value) is error and says in str(caught.value)
    assert "\n" not in str(caught.value)
    rendered = "".join(traceback.format_exception(caught.value)) + repr(caught.value) + repr(model)
    assert SECRET not in rendered and SECRET[10:] not in rendered
    assert fake_openai.call_count == 1, "exactly one HTTP request: the SDK's retries are off"


def test_connection_refused_is_unavailable(no_openai_env: None) -> None:
    with socket.socket() as sock:  # a port that nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAICompatModel("gpt-4o-mini", base_url=f"http://127.0.0.1:{port}/v1", timeout=2)
    with pytest.raises(ModelUnavailable, match="cannot reach"):
        model.complete(MESSAGES, max_tokens=50, idempotency_key="k")


def test_a_remote_endpoint_without_a_key_says_what_to_do(no_openai_env: None) -> None:
    model = OpenAICompatModel("gpt-4o-mini", base_url="https://api.example.invalid/v1")
    with pytest.raises(ModelError, match="set OPENAI_API_KEY") as caught:
        model.complete(MESSAGES, max_tokens=50, idempotency_key="k")
    assert not isinstance(caught.value, ModelUnavailable)
