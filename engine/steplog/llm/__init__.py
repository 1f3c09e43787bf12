"""Chat models for steplog: the seam (``ChatModel``), a scripted offline model, an OpenAI
adapter and an Anthropic one (``anthropic:MODEL``).

``import steplog.llm`` stays cheap: the ``openai`` and ``anthropic`` SDKs (and their HTTP stacks)
are imported only when a model of theirs is first asked for, so an offline run resumes without
paying for them; the scripted model's rules (``tickets``) and the price table likewise when first
asked for, since every ``import steplog`` loads this package (the public ``ChatModel`` lives in
``base``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from steplog.llm.base import (
    ChatModel,
    ChatReply,
    Estimate,
    ModelError,
    ModelUnavailable,
    Usage,
    close_model,
)

if TYPE_CHECKING:
    from steplog.llm.anthropic import AnthropicModel
    from steplog.llm.offline import OfflineModel
    from steplog.llm.openai_compat import OpenAICompatModel
    from steplog.llm.prices import Price, PriceTable

__all__ = [
    "AnthropicModel",
    "ChatModel",
    "ChatReply",
    "Estimate",
    "ModelError",
    "ModelUnavailable",
    "OfflineModel",
    "OpenAICompatModel",
    "Price",
    "PriceTable",
    "Usage",
    "check_model",
    "check_ready",
    "close_model",
    "make_model",
]


def check_model(name: str | None) -> None:
    """Refuse a model name no endpoint can serve (``UsageError``) before a run is started or
    queued: an empty ``--model ''`` was taken for a model name and the run failed only at its
    first model step, with whatever the endpoint said about it."""
    from steplog.errors import UsageError

    if name is None:
        return
    if not name.strip():
        raise UsageError(
            "--model names no model; leave it out for the offline model, or name one, "
            "e.g. --model gpt-4o-mini"
        )
    if name != name.strip() or any(not c.isprintable() for c in name):
        raise UsageError(
            f"--model {name!r} has spaces around it or control characters; give the "
            "model's name as the endpoint knows it, e.g. --model gpt-4o-mini"
        )
    from steplog.llm.setup import check_name

    check_name(name)


def check_ready(name: str | None, *, base_url: str | None = None) -> None:
    """Refuse (``UsageError``) to start a run whose model this machine cannot call: for
    ``anthropic:MODEL``, the ``anthropic`` package missing or no ``ANTHROPIC_API_KEY``. Asked
    before the log is opened; ``make_model`` asks again for a resumed run."""
    from steplog.llm.setup import check_ready as check

    check(name, base_url=base_url)


def make_model(name: str | None, *, base_url: str | None = None) -> ChatModel:
    """The model called ``name``: ``None`` or ``"offline"`` is the scripted ``OfflineModel``;
    ``anthropic:MODEL`` is Claude at ``base_url`` (default ``$ANTHROPIC_BASE_URL``, else
    Anthropic's API) with the key from ``$ANTHROPIC_API_KEY``; anything else is served by an
    OpenAI-compatible endpoint at ``base_url`` (default ``$OPENAI_BASE_URL``, else OpenAI itself)
    with the key from ``$OPENAI_API_KEY``.
    """
    if name is None or name == "offline":
        from steplog.llm.offline import OfflineModel

        return OfflineModel()
    if name.startswith("anthropic:"):
        check_ready(name, base_url=base_url)  # before the SDK is imported
        from steplog.llm.anthropic import AnthropicModel

        return AnthropicModel(name, base_url=base_url)
    from steplog.llm.openai_compat import OpenAICompatModel

    return OpenAICompatModel(name, base_url=base_url or os.environ.get("OPENAI_BASE_URL"))


_LAZY = {
    "AnthropicModel": "steplog.llm.anthropic",
    "OfflineModel": "steplog.llm.offline",
    "OpenAICompatModel": "steplog.llm.openai_compat",
    "Price": "steplog.llm.prices",
    "PriceTable": "steplog.llm.prices",
}
"""Names imported on first use only (PEP 562), with the module that defines each."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
