"""What an Anthropic SDK error means to the engine: retry it (``ModelUnavailable``) or not
(``ModelError``), in one line that says what to do and never shows the API key.

- ``ModelUnavailable``: a timeout, a connection refused or cut mid-stream, HTTP 408, 409, 429
  (with ``retry_after`` from ``retry-after``), 529 overloaded and other 5xx, an ``error`` event in
  the middle of a stream whose type is ``overloaded_error``, ``api_error`` or
  ``rate_limit_error``, and a malformed answer (see ``openai_compat``: a proxy's glitch more
  often than a stable bug; the retry policy bounds it).
- ``ModelError``: 400 (bad request), 401 (key), 402 (billing), 403 (permission), 404 (model or
  base URL), 413, and any other 4xx.

Imports the SDK, so it is imported with ``steplog.llm.anthropic`` only.
"""

from __future__ import annotations

import anthropic

from steplog.llm.base import ModelError, ModelUnavailable
from steplog.llm.wire import retry_after, scrub

KEY_HINT = "set ANTHROPIC_API_KEY to a valid key"
TRANSIENT_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
"""``error.type`` values of an error event that are worth a retry (Anthropic's error types)."""


def map_error(
    exc: anthropic.AnthropicError, *, model: str, where: str, timeout: float, secret: str | None
) -> ModelError:
    """The engine's error for ``exc``, raised by a call of ``model`` at ``where``."""
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelUnavailable(
            f"model call to {where} timed out after {timeout:g}s: transient; "
            "if it keeps happening, raise the timeout or check the server"
        )
    if isinstance(exc, anthropic.APIConnectionError):
        said = f" ({scrub(str(exc), secret)})"
        return ModelUnavailable(
            f"lost the connection to {where}{said}: transient; is the server up? "
            "(check ANTHROPIC_BASE_URL)"
        )
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc, model=model, where=where, secret=secret)
    if isinstance(exc, anthropic.APIError):  # APIResponseValidationError and the like
        return malformed(where, type(exc).__name__)
    return ModelError(f"model call to {where} failed: {scrub(str(exc), secret)}")


def malformed(where: str, what: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"malformed response from {where} ({what}): treated as transient; "
        "if it persists, check the server or any proxy in front of it"
    )


def _status_error(
    exc: anthropic.APIStatusError, *, model: str, where: str, secret: str | None
) -> ModelError:
    status = exc.status_code
    kind, message = _error_of(exc.body)
    said = f" (server said: {scrub(message, secret)})" if message.strip() else ""
    wait = retry_after(exc.response.headers)
    if status < 400:  # an ``error`` event inside a stream that began with 200
        if kind in TRANSIENT_TYPES:
            return ModelUnavailable(
                f"{where} broke off the answer with {kind}: transient{said}", retry_after=wait
            )
        return ModelError(f"{where} broke off the answer with {kind or 'an error'}{said}")
    if status == 429:
        after = f"; retry after {wait:g}s" if wait is not None else ""
        return ModelUnavailable(
            f"rate limited by {where} (HTTP 429){after}{said}", retry_after=wait
        )
    if status == 529:
        return ModelUnavailable(
            f"{where} is overloaded (HTTP 529): transient{said}", retry_after=wait
        )
    if status in (408, 409) or status >= 500:
        return ModelUnavailable(
            f"HTTP {status} from {where}: transient server error; "
            f"if it persists, check status.anthropic.com{said}",
            retry_after=wait,
        )
    if status == 401:
        return ModelError(f"authentication failed at {where} (HTTP 401): {KEY_HINT}{said}")
    if status == 402:
        return ModelError(f"billing problem at {where} (HTTP 402): add credit{said}")
    if status == 403:
        return ModelError(
            f"permission denied for model {model!r} at {where} (HTTP 403): "
            f"check that the key's workspace may use it{said}"
        )
    if status == 404:
        return ModelError(
            f"model {model!r} or endpoint not found at {where} (HTTP 404): check the model "
            f"name (e.g. anthropic:claude-haiku-4-5) and ANTHROPIC_BASE_URL{said}"
        )
    return ModelError(
        f"request rejected by {where} (HTTP {status}): check the model name and max_tokens{said}"
    )


def _error_of(body: object) -> tuple[str, str]:
    """``(error.type, error.message)`` of an Anthropic error body; empty strings when absent."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        kind, message = error.get("type"), error.get("message")
        return (kind if isinstance(kind, str) else "", message if isinstance(message, str) else "")
    return "", error if isinstance(error, str) else ""
