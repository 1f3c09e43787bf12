"""Keep secrets out of the log: API keys and bearer tokens never reach a row or an event."""

from __future__ import annotations

import re

# Pattern text, compiled through ``re``'s cache by the first ``redact``: only a failure is
# redacted, and every ``import steplog`` loads this module.
_PATTERNS = (
    r"\bsk-[A-Za-z0-9_\-]{16,}",  # OpenAI-style keys
    r"(?i)\bbearer\s+[A-Za-z0-9._\-~+/]{8,}=*",  # Authorization: Bearer ...
    r"(?i)\b(api[_-]?key|token|secret|password)=([^&\s]+)",  # key=... in URLs
)
SECRET_PARAM = re.compile(r"(?i)(api[_-]?key|secret|password|passwd|token|credential)")


def redact(text: str) -> str:
    """``text`` with anything that looks like a credential replaced by ``[redacted]``."""
    for pattern in _PATTERNS:
        text = re.sub(
            pattern, lambda m: (m.group(1) + "=[redacted]") if m.lastindex else "[redacted]", text
        )
    return text
