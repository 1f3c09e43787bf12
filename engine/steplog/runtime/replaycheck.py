"""Can this code replay a run's recorded steps? Asked before any engine or worker claims it.

When the run was last worked on by code of another version (``run.version``), the agent function
is run once from the top on a probe (``Run(probe=True)``): each step it calls is compared with
the log's (``Run._enter``) and returns its recorded result; the first step the log has not
committed ends the probe (``_Frontier``). No step body runs and nothing is written. On the same
version the code is the same and the probe is skipped (the engine's own replay still compares
every step, so code that drifts by itself is refused too, after its claim).

Code between steps runs once more on a probe, as it does on every resume: it must be a
deterministic function of the recorded results (``docs/versions.md``).
"""

from __future__ import annotations

import inspect
from pathlib import Path

from steplog.errors import Blocked, SteplogError
from steplog.log.db import LogConnection
from steplog.log.journal import Journal, Usage
from steplog.log.steps import load_steps
from steplog.log.versions import ResumeState, has_steps, record_refusal, resume_state
from steplog.policies import Budget
from steplog.runtime.effects import HttpClient
from steplog.runtime.run import Run, _Frontier
from steplog.runtime.runnable import Runnable


def divergence(agent: Runnable, conn: LogConnection, run_id: str) -> Blocked | None:
    """``Blocked`` naming the first step where ``agent``'s code and the run's log differ, or
    ``None`` (no such run, a finished one, one on this very version, or one it replays)."""
    state = resume_state(conn, run_id)
    if state is None or state.finished or state.version == agent.version:
        return None
    if not has_steps(conn, run_id):
        return None
    return probe(agent, conn, state)


def probe(agent: Runnable, conn: LogConnection, state: ResumeState) -> Blocked | None:
    """Run ``agent`` on a probe over the run's recorded steps (see the module)."""
    from steplog.llm.offline import OfflineModel

    journal = Journal(conn, state.run_id, state.incarnation, Usage(), lease_seconds=30.0)
    http = HttpClient()
    run = Run(
        run_id=state.run_id,
        workdir=Path(state.workdir),
        outbox=state.outbox,
        params=state.params,
        journal=journal,
        steps=load_steps(conn, state.run_id),
        budget=Budget(),
        retry=agent.retry,
        model=OfflineModel(),
        http=http,
        forked_from=state.parent,
        probe=True,
    )
    try:
        if inspect.iscoroutinefunction(agent.fn):
            from steplog.runtime.arun import run_async_agent

            run_async_agent(agent.fn, run)
        else:
            agent.fn(run, **run.params)
        if run._refused is None and not run._frontier:
            run.check_complete()
    except Blocked as blocked:
        return blocked
    except _Frontier:
        pass
    except (SteplogError, Exception):
        pass  # the code's own failure: the engine's replay meets it and records it
    finally:
        http.close()
    return run._refused


def refuse_before_claim(
    agent: Runnable,
    conn: LogConnection,
    run_id: str | None,
    *,
    worker: dict[str, object] | None = None,
) -> Blocked | None:
    """``divergence``, and when there is one its refusal recorded (``run.blocked`` and one
    ``resume_refused`` event: the only write)."""
    if run_id is None:
        return None
    blocked = divergence(agent, conn, run_id)
    if blocked is not None:
        record_refusal(
            conn,
            run_id,
            reason=blocked.reason,
            at_step=blocked.at_step,
            version=agent.version,
            worker=worker,
        )
    return blocked
