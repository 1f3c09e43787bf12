"""What every HTTP model adapter says about the wire: the wait a server asked for, an endpoint
shown without its secrets, and a server's words made safe to print.

Imports nothing heavy (no SDK), so any adapter and its error mapping can share it.
"""

from __future__ import annotations

import email.utils
import re
import time
from urllib.parse import urlsplit

_SECRET_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*.]+|(?i:bearer)\s+\S+")


def retry_after(headers: object) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, ``retry-after`` seconds or HTTP
    date."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = get(name)
        if isinstance(value, str) and value.strip():
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                pass
    value = get("retry-after")
    if isinstance(value, str):
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return None


def display_url(url: str) -> str:
    """The URL without credentials or query (either may carry a key)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port: show none rather than fail while reporting an error
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else url.split("?", 1)[0]


def scrub(text: str, secret: str | None) -> str:
    """One line, at most 200 characters, with ``secret`` and anything key-like removed."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    text = _SECRET_LIKE.sub("[redacted]", text)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"
