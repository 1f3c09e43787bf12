"""A fork with an edit: what a person may record in place of a step's result.

``steplog fork RUN --at-step N --set-result JSON`` records step N in the fork with the given
result instead of running it, so a run can be replayed from a corrected answer. A chat step's
result is the model's answer (``ChatReply``): a JSON string replaces the answer's text; an object
must be a whole answer (``"text"`` and the reply's other fields). Any other step takes any JSON
value: it is what the agent's code gets back from that step on replay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from steplog.errors import ControlRefused, UsageError
from steplog.llm.base import ChatReply, Usage
from steplog.log.journal import dumps, why_not_json
from steplog.log.steps import StepRecord, result_of


class Unset:
    """No edit was asked for (JSON ``null`` is an edit: ``None`` cannot say "none")."""


NOT_EDITED = Unset()


def edited_result(record: StepRecord | None, run_id: str, at_step: int, value: Any) -> str:
    """``value`` as the JSON text to record for step ``at_step`` of ``run_id``'s fork, or an error
    naming what is wrong and how to say it right. ``record``: the parent's step, if it has one."""
    if record is None:
        raise ControlRefused(
            f"run {run_id} has no step {at_step} to edit; --set-result sets the result of a step "
            "the run has reached (without it, --at-step forks before that step)"
        )
    if record.kind == "chat":
        value = _chat_reply(record, value).to_json()
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"--set-result: {why_not_json(exc)}") from None


def _chat_reply(record: StepRecord, value: Any) -> ChatReply:
    recorded = result_of(record.result) or result_of(record.decision)
    if isinstance(value, str):
        base = ChatReply.from_json(recorded) if isinstance(recorded, dict) else ChatReply(text="")
        return replace(base, text=value, usage=Usage(), cost_usd=0.0, finish_reason="stop")
    try:
        if not isinstance(value, dict) or not isinstance(value.get("text"), str):
            raise TypeError
        return ChatReply.from_json(value)
    except (TypeError, KeyError, ValueError):
        raise UsageError(
            f"--set-result: step {record.seq} ({record.name}) is a chat step, whose result is the "
            "model's answer: give its text as a JSON string (--set-result '\"the answer\"') or a "
            'whole answer object with "text"'
        ) from None
