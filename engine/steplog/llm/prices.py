"""What a model call costs: list prices per million tokens, and the rule for local endpoints.

``PriceTable.price_for(model, base_url=...)`` answers with

- the table's ``Price`` for a known model name (a dated snapshot such as
  ``gpt-4o-mini-2024-07-18`` is priced as its base name), wherever it is served from: a localhost
  proxy in front of a paid API still bills, and over-counting is the safe side of a budget;
- ``FREE`` for any other model on a local endpoint (localhost, a loopback address): a model you
  run yourself costs nothing per token;
- ``None`` for an unknown model on a remote endpoint. Callers charge 0 for it and say
  "cost unknown" rather than pretend to know.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

from steplog.llm.base import Usage


@dataclass(frozen=True)
class Price:
    """USD per one million tokens."""

    input: float
    """Uncached prompt tokens."""
    output: float
    """Completion tokens (reasoning tokens included, as the providers bill them)."""
    cached_input: float | None = None
    """Prompt tokens served from the provider's cache; ``None`` means the full input price."""
    cache_write: float | None = None
    """Prompt tokens written to the provider's cache (Anthropic's 5-minute cache write);
    ``None`` means the full input price."""

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """USD for one call; ``cached_tokens`` (read from the cache) and ``cache_write_tokens``
        (written to it) are parts of ``input_tokens``."""
        cached = min(max(cached_tokens, 0), input_tokens)
        written = min(max(cache_write_tokens, 0), input_tokens - cached)
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        per_million = (
            (input_tokens - cached - written) * self.input
            + cached * cached_price
            + written * write_price
            + output_tokens * self.output
        )
        return per_million / 1_000_000

    def cost_of(self, usage: Usage) -> float:
        """USD for a call that used ``usage``."""
        return self.cost(
            usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.cache_write_tokens
        )


FREE = Price(input=0.0, output=0.0, cached_input=0.0)
"""The price of a model served from your own machine."""


def _claude(input: float, output: float) -> Price:
    """A Claude price: cache reads at 0.1x and 5-minute cache writes at 1.25x the input price,
    the multipliers Anthropic's pricing page states for every model in the table below."""
    return Price(input, output, cached_input=round(input * 0.1, 6), cache_write=input * 1.25)


# Anthropic list prices, USD per 1M tokens (input, output), as published on
# https://platform.claude.com/docs/en/about-claude/pricing ("Model pricing"; read 2026-12 from
# copies of that page, which also give each cache price used by _claude). Keys are the API's model
# ids and aliases (https://platform.claude.com/docs/en/about-claude/models/overview); a dated
# snapshot such as claude-sonnet-4-5-20250929 is priced as its alias. Batch is cheaper and
# 1-hour cache writes (2x input) dearer: the adapter charges those (steplog.llm.anthropic).
# Not verified: the ids claude-opus-4-7 and claude-opus-4-8 (the page names the models, the ids
# follow the family's pattern). Newer models (Opus 5.5, Sonnet 5.x, Haiku 5.5, Fable, Mythos) are
# left out: the copies of the page disagree on their prices. Unknown models cost "unknown".
ANTHROPIC_PRICES: Mapping[str, Price] = {
    "claude-opus-5": _claude(5.00, 25.00),
    "claude-opus-4-8": _claude(5.00, 25.00),
    "claude-opus-4-7": _claude(5.00, 25.00),
    "claude-opus-4-6": _claude(5.00, 25.00),
    "claude-opus-4-5": _claude(5.00, 25.00),
    "claude-opus-4-1": _claude(15.00, 75.00),
    "claude-opus-4-0": _claude(15.00, 75.00),
    "claude-opus-4": _claude(15.00, 75.00),
    "claude-sonnet-4-6": _claude(3.00, 15.00),
    "claude-sonnet-4-5": _claude(3.00, 15.00),
    "claude-sonnet-4-0": _claude(3.00, 15.00),
    "claude-sonnet-4": _claude(3.00, 15.00),
    "claude-3-7-sonnet": _claude(3.00, 15.00),
    "claude-haiku-4-5": _claude(1.00, 5.00),
    "claude-3-5-haiku": _claude(0.80, 4.00),
    "claude-3-opus": _claude(15.00, 75.00),
    "claude-3-haiku": Price(0.25, 1.25, cached_input=0.03, cache_write=0.30),
}

# OpenAI list prices, standard tier, USD per 1M tokens (input, output, cached input), as published
# on https://openai.com/api/pricing and checked 2025-08; unchanged in third-party snapshots of that
# page dated 2026-03. Batch and flex tiers are cheaper; we charge the standard price.
LIST_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-4o": Price(2.50, 10.00, 1.25),
        "gpt-4o-mini": Price(0.15, 0.60, 0.075),
        "gpt-4.1": Price(2.00, 8.00, 0.50),
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
        "o3": Price(2.00, 8.00, 0.50),
        "o3-mini": Price(1.10, 4.40, 0.55),
        "o4-mini": Price(1.10, 4.40, 0.275),
        "gpt-5": Price(1.25, 10.00, 0.125),
        "gpt-5-mini": Price(0.25, 2.00, 0.025),
        "gpt-5-nano": Price(0.05, 0.40, 0.005),
        **ANTHROPIC_PRICES,
    }
)

_SNAPSHOT_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$|-\d{8}$|-latest$")
"""A dated snapshot (OpenAI ``-2024-07-18``, Anthropic ``-20250929``) or a ``-latest`` alias."""
_LOCAL_NAMES = frozenset({"localhost", "host.docker.internal"})


def is_local(base_url: str | None) -> bool:
    """True when ``base_url`` points at this machine (localhost or a loopback/unspecified
    address)."""
    if not base_url:
        return False
    host = (urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or "").lower()
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


@dataclass(frozen=True)
class PriceTable:
    """Model name to ``Price``; ``PriceTable()`` is the shipped list, ``PriceTable({...})`` your
    own."""

    prices: Mapping[str, Price] = field(default_factory=lambda: LIST_PRICES, hash=False)

    def price_for(self, model: str, *, base_url: str | None = None) -> Price | None:
        """The price of ``model`` served at ``base_url``; None when it is unknown (see module
        doc)."""
        name = model.strip()
        if name.startswith("openai/"):  # router-style names, e.g. "openai/gpt-4o-mini"
            name = name[len("openai/") :]
        for candidate in (name, _SNAPSHOT_SUFFIX.sub("", name)):
            price = self.prices.get(candidate)
            if price is not None:
                return price
        return FREE if is_local(base_url) else None

    def with_prices(self, prices: Mapping[str, Price]) -> PriceTable:
        """A copy of this table with ``prices`` added or replaced."""
        return PriceTable(MappingProxyType({**self.prices, **prices}))
