"""Binding an agent's params: checked against its signature, CLI strings converted to its types.

Apart from ``agent`` so that the engine can bind params without importing the module that
defines ``Agent.run`` (which starts the engine): both name the ``Runnable`` protocol.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

from steplog.errors import UsageError
from steplog.log.journal import dumps, why_not_json
from steplog.runtime.redact import SECRET_PARAM
from steplog.runtime.runnable import Runnable

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(agent_name: str, key: str, raw: Any, annotation: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError(raw)  # NaN and Infinity cannot be stored as JSON
            return number
    except ValueError:
        raise UsageError(
            f"--param {key}={raw}: agent {agent_name} expects "
            f"{'a finite float' if kind == 'float' else kind}"
        ) from None
    if kind == "bool":
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise UsageError(f"--param {key}={raw}: agent {agent_name} expects true or false")
    return raw


def bind_params(agent: Runnable, params: Mapping[str, Any]) -> dict[str, Any]:
    """Check params against the agent's signature and convert CLI strings to its types."""
    for key in params:
        if SECRET_PARAM.search(key):
            raise UsageError(
                f"--param {key}: params are stored in the log, secrets must not be; "
                "pass it through an environment variable instead"
            )
    sig = inspect.signature(agent.fn)
    accepted = list(sig.parameters.values())[1:]  # the first is the run
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted)
    named = {p.name: p for p in accepted if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    out: dict[str, Any] = {}
    for key, raw in params.items():
        p = named.get(key)
        if p is None and not takes_any:
            takes = ", ".join(named) or "no params"
            raise UsageError(f"agent {agent.name} has no parameter {key!r} (it takes: {takes})")
        out[key] = _coerce(agent.name, key, raw, p.annotation if p else "")
    for key, value in out.items():
        try:
            dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise UsageError(
                f"param {key}={value!r} cannot be stored in the log as JSON ({why_not_json(exc)}); "
                "pass JSON data (str, finite number, bool, list, dict)"
            ) from None
    missing = [n for n, p in named.items() if p.default is inspect.Parameter.empty and n not in out]
    if missing:
        raise UsageError(f"agent {agent.name} needs --param {missing[0]}=VALUE")
    return out
