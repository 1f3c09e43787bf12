"""What the engine asks of an agent, as a protocol.

``steplog.runtime.agent.Agent`` is one; its ``run()`` starts the engine, so the engine and the
parameter binding name this protocol instead of the class, and each module reads without the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from steplog.log.claim import Claimant
from steplog.policies import RetryPolicy


class Runnable(Claimant, Protocol):
    """An agent as the engine runs it: its body, its name and its policies."""

    @property
    def fn(self) -> Callable[..., Any]:
        """The agent function: ``fn(run, **params)``, sync or ``async``."""
        ...

    @property
    def name(self) -> str: ...

    @property
    def retry(self) -> RetryPolicy: ...

    @property
    def version(self) -> str:
        """The code version a run records (``docs/versions.md``)."""
        ...

    def default_spec(self) -> str:
        """How ``steplog run`` names this agent when the caller gave no spec."""
        ...
