"""``@steplog.agent`` and finding an agent from a spec: ``name``, ``pkg.mod:fn``, ``file.py:fn``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from steplog.errors import AgentSpecError, UsageError
from steplog.policies import Budget, RetryPolicy
from steplog.runtime.params import bind_params

__all__ = ["BUILTINS", "SPEC_HELP", "Agent", "agent", "bind_params", "resolve"]

P = ParamSpec("P")
R = TypeVar("R")

BUILTINS: dict[str, str] = {
    "demo": "steplog.agents.demo:demo",
    "demo_async": "steplog.agents.demo_async:demo_async",
    "flaky": "steplog.agents.flaky:flaky",
    "naive": "steplog.agents.naive:naive",
}
"""Built-in agents by name; the name is what the log records."""

SPEC_HELP = (
    "use a built-in name ("
    + ", ".join(BUILTINS)
    + "), package.module:function or path/to/file.py:function"
)


class Agent(Generic[P, R]):
    """An agent function with its default budget and retry policy.

    Call ``.run(...)`` to start or resume a run from Python; the object itself stays callable
    as the plain function.
    """

    def __init__(
        self,
        fn: Callable[Concatenate[Any, P], R],
        *,
        name: str | None = None,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        needs_outbox: bool = False,
        version: str | None = None,
    ) -> None:
        self.fn = fn
        if version is not None and (not isinstance(version, str) or not version.strip()):
            raise UsageError(
                f"@steplog.agent(version=...) must be a non-empty string (got {version!r})"
            )
        self._version = version
        self.needs_outbox = needs_outbox
        self.name = name or fn.__name__
        self.budget = budget or Budget()
        self.retry = retry or RetryPolicy()
        self.spec: str | None = None  # set when resolved from a spec, or derived lazily
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def version(self) -> str:
        """The code version runs of this agent record: ``version=`` when given, else a
        fingerprint of the source file of the agent function's module
        (``steplog.runtime.versions.fingerprint``: that one file, as it is on disk)."""
        if self._version is None:
            from steplog.runtime.versions import fingerprint

            self._version = fingerprint(self.fn)
        return self._version

    def __call__(self, run: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(run, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<steplog.Agent {self.name}>"

    def require_outbox(self, outbox: str | None) -> None:
        """Refuse to start an agent that posts messages without somewhere to post them."""
        if self.needs_outbox and not outbox:
            raise UsageError(
                f"agent {self.default_spec()} posts messages: pass --outbox URL "
                "(start one with `steplog outbox --port 0`)"
            )

    def default_spec(self) -> str:
        """How the log names this agent so that ``steplog run`` can find it again."""
        if self.spec:
            return self.spec
        module = self.fn.__module__
        qual = self.fn.__qualname__
        if module == "__main__" or module.startswith("steplog_user_"):
            source = inspect.getsourcefile(self.fn)
            if source:
                return f"{Path(source).resolve()}:{qual}"
        for name, target in BUILTINS.items():
            if target == f"{module}:{qual}":
                return name
        return f"{module}:{qual}"

    def run(
        self,
        run_id: str | None = None,
        *,
        db: str | Path | None = None,
        workdir: str | Path | None = None,
        outbox: str | None = None,
        budget: Budget | None = None,
        model: str | None = None,
        base_url: str | None = None,
        pace: float = 0.0,
        tags: dict[str, str] | None = None,
        **params: Any,
    ) -> R:
        """Start run ``run_id`` (a new id when omitted) or resume it; return the agent's result.

        ``tags``: text labels of a new run (``steplog runs --tag KEY=VALUE`` finds it by them);
        a resume may repeat them or leave them out. Raises ``GaveUp`` or ``RunFailed`` when the
        run ends that way, ``LeaseHeld`` when another live engine is working on it.
        """
        from dataclasses import asdict

        from steplog.log.location import parse
        from steplog.runtime.engine import execute

        outcome = execute(
            self,
            run_id=run_id,
            db=parse(db) if db else None,
            workdir=Path(workdir) if workdir else None,
            outbox=outbox,
            params=params,
            limits=asdict(budget) if budget else None,
            model=model,
            base_url=base_url,
            pace=pace,
            tags=tags,
        )
        return outcome.value()  # type: ignore[no-any-return]

    async def run_async(self, run_id: str | None = None, **kwargs: Any) -> Any:
        """``await agent.run_async(...)`` from asyncio code: ``run`` (same arguments) on a worker
        thread, so the caller's event loop goes on; an ``async def`` agent gets a loop of its own
        there. Stop signals stay the application's (the engine handles them on the main thread
        only)."""
        import asyncio

        return await asyncio.to_thread(lambda: self.run(run_id, **kwargs))


@overload
def agent(fn: Callable[Concatenate[Any, P], R], /) -> Agent[P, R]: ...
@overload
def agent(
    *,
    name: str | None = None,
    budget: Budget | None = None,
    retry: RetryPolicy | None = None,
    needs_outbox: bool = False,
    version: str | None = None,
) -> Callable[[Callable[Concatenate[Any, P], R]], Agent[P, R]]: ...


def agent(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    budget: Budget | None = None,
    retry: RetryPolicy | None = None,
    needs_outbox: bool = False,
    version: str | None = None,
) -> Any:
    """Make a function ``f(run, **params)`` a steplog agent (with or without arguments).

    ``needs_outbox``: the agent posts to ``run.outbox``; starting it without one is bad input.
    ``version``: the code version its runs record (``docs/versions.md``); default: a fingerprint
    of the source file of the function's module.
    """

    def wrap(f: Callable[Concatenate[Any, P], R]) -> Agent[P, R]:
        return Agent(
            f, name=name, budget=budget, retry=retry, needs_outbox=needs_outbox, version=version
        )

    return wrap(fn) if fn is not None else wrap


def _load_file(path_text: str) -> Any:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise AgentSpecError(f"agent file {path_text} does not exist; {SPEC_HELP}")
    mod_name = _module_name(path)
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise AgentSpecError(f"cannot load {path_text} as Python; {SPEC_HELP}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, str(path.parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[mod_name]
        raise AgentSpecError(f"importing {path_text} failed: {_import_failure(exc)}") from exc
    return module


def _module_name(path: Path) -> str:
    """The name an agent file is imported under: one per file in this process. A checksum of the
    path, not a cryptographic hash: ``hashlib`` loads OpenSSL, ~2 ms of every relaunch of a file
    agent; a name another file already took gets a suffix instead."""
    import zlib

    base = f"steplog_user_{zlib.crc32(str(path).encode()):08x}"
    name, n = base, 1
    while name in sys.modules and getattr(sys.modules[name], "__file__", None) != str(path):
        n += 1
        name = f"{base}_{n}"
    return name


def _import_failure(exc: BaseException) -> str:
    """Why importing an agent's module failed. ``sys.exit`` there is a failure too: left alone
    it would end the command with the module's code (3 reads as "gave up") and no word."""
    if isinstance(exc, SystemExit):
        return (
            f"it called sys.exit({exc.code!r}) at import; an agent module must not exit when "
            "imported"
        )
    return f"{type(exc).__name__}: {exc}"


def resolve(spec: str) -> Agent[..., Any]:
    """The agent a spec names; ``AgentSpecError`` with what to do when it names none."""
    spec = spec.strip()
    target = BUILTINS.get(spec, spec)
    if ":" not in target:
        raise AgentSpecError(f"unknown agent {spec!r}: {SPEC_HELP}")
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise AgentSpecError(f"malformed agent spec {spec!r}: {SPEC_HELP}")
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _load_file(where)
        canonical = f"{Path(where).expanduser().resolve()}:{attr}"
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise AgentSpecError(
                f"cannot import {where!r} for agent {spec!r} ({exc}); {SPEC_HELP}"
            ) from exc
        except (Exception, SystemExit) as exc:
            raise AgentSpecError(f"importing {where} failed: {_import_failure(exc)}") from exc
        canonical = spec if spec in BUILTINS else target
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise AgentSpecError(f"{where} has no {attr!r}; {SPEC_HELP}")
    if not isinstance(obj, Agent):
        if not callable(obj):
            raise AgentSpecError(f"{spec!r} names a {type(obj).__name__}, not a function")
        obj = Agent(obj)
    obj.spec = canonical
    found: Agent[..., Any] = obj
    return found
