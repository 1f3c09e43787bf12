"""How an engine is started on a run later, by someone else: the ``launch`` options of a queued run.

The run row holds what the run *is* (agent, params, model, workdir, outbox, budget). A few options
of ``steplog run`` are about *how* an engine drives it (the demo's pace, the model endpoint, the
sync level, the lease length); ``steplog submit`` and ``retry``/``fork --no-start`` record those
here, in ``run.launch`` (JSON), and a worker turns them back into the engine's command line with
``engine_args``. One path, whoever queued the run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

SyncLevel = Literal["full", "normal"]

DIE_WITH_PARENT_ENV = "STEPLOG_DIE_WITH_PARENT"
"""Set (to the parent's pid) in the environment of an engine that must not outlive its parent, a
worker's: the engine calls ``procs.die_with_parent()`` first thing (named here, where the engine's
command line reads it without importing ``procs``)."""


@dataclass(frozen=True)
class Launch:
    """The engine options a worker passes when it starts a queued run (README "A queue and
    workers")."""

    pace: float = 0.0
    """Seconds of simulated thinking per model call (``--pace``)."""
    base_url: str | None = None
    """The model's endpoint (``--base-url``); ``None``: the engine's default."""
    sync: SyncLevel = "full"
    """``--sync``: ``full`` survives power loss, ``normal`` process crashes only."""
    lease_seconds: float | None = None
    """``--lease-seconds`` of the engine; ``None``: the worker's own."""

    @classmethod
    def from_options(cls, o: dict[str, Any]) -> Launch:
        """From the parsed engine options of the command line (``cli._ENGINE_OPTIONS``)."""
        return cls(
            pace=float(o.get("pace") or 0.0),
            base_url=o.get("base_url"),
            sync="normal" if o.get("synchronous") == "normal" else "full",
            lease_seconds=o.get("lease_seconds"),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Launch:
        """What a row's ``launch`` says; a run nobody queued (``NULL``, an older log) gets the
        defaults."""
        if not text:
            return cls()
        data = json.loads(text)
        sync = data.get("sync")
        return cls(
            pace=float(data.get("pace") or 0.0),
            base_url=data.get("base_url"),
            sync="normal" if sync == "normal" else "full",
            lease_seconds=data.get("lease_seconds"),
        )

    def engine_args(self, *, default_lease_seconds: float) -> list[str]:
        """The options of ``steplog run`` that start the engine this way."""
        lease = self.lease_seconds if self.lease_seconds is not None else default_lease_seconds
        args = [
            "--pace",
            repr(self.pace),
            "--sync",
            self.sync,
            "--lease-seconds",
            repr(float(lease)),
        ]
        if self.base_url:
            args += ["--base-url", self.base_url]
        return args


__all__ = ["DIE_WITH_PARENT_ENV", "Launch", "SyncLevel"]
