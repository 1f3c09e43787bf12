"""Read an outbox over HTTP: ``fetch_ledger(url)``, for code that only knows the outbox's URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from steplog.outbox.ledger import Ledger

if TYPE_CHECKING:
    import httpx


def fetch_ledger(
    url: str, *, timeout: float = 10.0, transport: httpx.BaseTransport | None = None
) -> Ledger:
    """``GET {url}/messages`` as a ``Ledger``; ``url`` is the base, e.g. ``http://127.0.0.1:8765``.

    ``transport`` is the seam for tests (``httpx.MockTransport``). HTTP errors raise
    ``httpx.HTTPStatusError``, unreachable outboxes ``httpx.TransportError``.
    """
    # Imported here: httpx is most of the import time of ``steplog.outbox``, and the server
    # child (which only reads its own file) never needs it.
    import httpx

    with httpx.Client(transport=transport, timeout=timeout) as client:
        response = client.get(f"{url.rstrip('/')}/messages")
        response.raise_for_status()
        return Ledger.from_json(response.json())
