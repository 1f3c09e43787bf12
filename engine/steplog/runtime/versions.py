"""Code versions and step calls as the replay check sees them (``docs/versions.md``).

- ``fingerprint(fn)``: an agent's version when ``@steplog.agent(version=...)`` names none: a hash
  of the source file of the module that defines the agent function, as it is on disk (the same
  in every process that loads that file). It covers that one file: a change in a module it
  imports, or in steplog, does not change it. Name versions yourself for more.
- ``call_hash(name, kind, args)``: what each recorded step keeps (``step.args_hash``) and a resume
  compares the code's call with: a 64-bit BLAKE2b of the canonical JSON of ``[kind, name, args]``
  (keys sorted, compact, UTF-8). An argument JSON cannot carry is hashed by a stable stand-in
  (``_stand_in``): its ``repr`` when that names no memory address (``<... at 0x7f...>`` differs
  from process to process), else its type's qualified name, so such an argument is compared by
  type only.
- ``describe_call(name, args)``: the call in words for the refusal line (``send(to='a@x')``).

``_blake2`` is imported directly: ``hashlib`` loads OpenSSL, ~8 ms of every engine start.
"""

from __future__ import annotations

import json
import re
import sys
from _blake2 import blake2b
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stand_in(value: Any) -> Any:
    """What an argument JSON cannot carry is hashed as (see the module)."""
    if isinstance(value, (set, frozenset)):
        return sorted(_ENCODER.encode(v) for v in value)
    if isinstance(value, bytes):
        return {"bytes": blake2b(value, digest_size=16).hexdigest()}
    text = repr(value)
    if _ADDRESS.search(text):
        return f"<{type(value).__module__}.{type(value).__qualname__}>"
    return text


_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    check_circular=False,
    default=_stand_in,
)


def call_hash(name: str, kind: str, args: Any = None) -> str:
    """The hash a step's row keeps of its name, kind and arguments (see the module)."""
    try:
        text = _ENCODER.encode([kind, name, args])
    except (ValueError, RecursionError, TypeError):  # NaN keys, cycles: compared by type only
        text = _ENCODER.encode([kind, name, type(args).__qualname__])
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def describe_call(name: str, args: Any = None, *, limit: int = 60) -> str:
    """``name(args…)`` for a person, cut at ``limit`` characters of arguments."""
    if args is None or args == {} or args == []:
        inner = ""
    elif isinstance(args, dict) and set(args) == {"args", "kwargs"}:  # a run.step call's
        inner = ", ".join(
            [repr(a) for a in args["args"]] + [f"{k}={v!r}" for k, v in args["kwargs"].items()]
        )
    elif isinstance(args, dict):
        inner = ", ".join(f"{k}={v!r}" for k, v in args.items())
    elif isinstance(args, (list, tuple)):
        inner = ", ".join(repr(a) for a in args)
    else:
        inner = repr(args)
    inner = _ADDRESS.sub("", inner)
    if len(inner) > limit:
        inner = inner[: limit - 1] + "…"
    return f"{name}({inner})"


def fingerprint(fn: Callable[..., Any]) -> str:
    """The version of an agent that names none: 12 hex digits of a hash of its module's source
    file (see the module); of its code object when there is no file (a REPL)."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    data: bytes | None = None
    if path:
        try:
            data = Path(path).read_bytes()
        except OSError:
            data = None
    if data is None:
        code = getattr(fn, "__code__", None)
        data = repr((getattr(fn, "__qualname__", ""), code.co_code if code else b"")).encode()
    return blake2b(data, digest_size=6).hexdigest()


def short(version: str | None) -> str:
    """A version as the refusal line shows it."""
    return "an unrecorded version" if version is None else version
