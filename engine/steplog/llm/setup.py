"""Which provider serves a ``--model`` string, and whether this machine is set up to call it.

``anthropic:MODEL`` is Anthropic's Messages API (``steplog.llm.anthropic``); any other name but
``offline`` is an OpenAI-compatible endpoint. Nothing here imports an SDK: ``steplog run`` asks
``check_ready`` before it opens the log, so a missing key or package is refused with exit 2 and
nothing written.
"""

from __future__ import annotations

import os

from steplog.errors import UsageError

ANTHROPIC = "anthropic:"
"""The prefix of a model served by Anthropic's Messages API: ``anthropic:claude-haiku-4-5``."""
ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"


def anthropic_model(name: str | None) -> str | None:
    """The Anthropic model id in ``name`` (``anthropic:ID``), or None for another provider."""
    if name is None or not name.startswith(ANTHROPIC):
        return None
    return name[len(ANTHROPIC) :]


def anthropic_url(base_url: str | None) -> str:
    """Where Anthropic models are called: ``--base-url``, else ``$ANTHROPIC_BASE_URL``, else
    Anthropic's API."""
    return (base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_URL).rstrip("/")


def check_name(name: str) -> None:
    """Refuse ``anthropic:`` without a model id (``UsageError``)."""
    model = anthropic_model(name)
    if model is not None and not model.strip():
        raise UsageError(
            f"--model {name!r} names no Anthropic model; write e.g. --model "
            "anthropic:claude-haiku-4-5"
        )


def check_ready(name: str | None, *, base_url: str | None, api_key: str | None = None) -> None:
    """Refuse to start a run with a model this machine cannot call (``UsageError``): the
    ``anthropic`` package missing, or no ``ANTHROPIC_API_KEY`` for a remote endpoint."""
    if anthropic_model(name) is None:
        return
    import importlib.util

    from steplog.llm.prices import is_local

    if importlib.util.find_spec("anthropic") is None:
        raise UsageError(
            f"--model {name} needs the Anthropic SDK: pip install 'steplog[anthropic]'"
        )
    key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
    if not key and not is_local(anthropic_url(base_url)):
        raise UsageError(
            f"--model {name} needs an API key: set ANTHROPIC_API_KEY (from "
            "https://console.anthropic.com/settings/keys) and run again"
        )
