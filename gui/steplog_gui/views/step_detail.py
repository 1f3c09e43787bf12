"""Step detail: the recorded decision, each effect with its key and ledger status, result/error.

Everything the model or a tool wrote is shown as plain text (``QPlainTextEdit``, ``PlainText``
labels): a reply that contains markup is displayed, never interpreted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from steplog.log.reader import LogRepository, StepDetail
from steplog_gui import jobs
from steplog_gui.feeds.outbox_watcher import OutboxWatcher
from steplog_gui.views.records_model import RecordsModel, records_table


def _read_detail(path: Path, run_id: str, seq: int) -> StepDetail | None:
    repo = LogRepository(path)
    try:
        return repo.step_detail(run_id, seq)
    finally:
        repo.close()


class StepDetailLoader(QObject):
    """Loads one step's rows off the GUI thread (a fresh read-only connection per request)."""

    detail_loaded = Signal(object)
    """A ``StepDetail`` (or ``None`` when the step is not in the log)."""
    load_failed = Signal(str)
    """Why it could not be read."""

    def __init__(self, path_of: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._path_of = path_of  # callable -> current log path
        self._wanted: tuple[str, int] | None = None

    def load(self, run_id: str, seq: int) -> None:
        self._wanted = (run_id, seq)
        path = self._path_of()
        jobs.submit(
            lambda: _read_detail(path, run_id, seq),
            lambda d: self.detail_loaded.emit(d) if self._wanted == (run_id, seq) else None,
            lambda exc: self.load_failed.emit(str(exc)),
            owner=self,
        )

    def reload(self) -> None:
        if self._wanted:
            self.load(*self._wanted)

    def forget(self) -> None:
        """No step is wanted any more (another run was selected): a read under way is dropped."""
        self._wanted = None


def _pretty(text: str | None) -> str:
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _field(key: str, value: object) -> str:
    """``key: value``, a multi-line value indented below its key (its newlines kept as newlines)."""
    text = str(value)
    if "\n" not in text:
        return f"{key}: {text}"
    return f"{key}:\n" + "\n".join(f"    {line}" if line else "" for line in text.splitlines())


def decision_text(text: str | None) -> str:
    """A recorded chat decision as a person reads it: the model's answer first (pretty-printed
    when it is JSON itself, as the demo's triage answers are), then which model and how it ended.
    Anything else is shown as pretty JSON."""
    if not text:
        return ""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return _pretty(text)
    answer = data["text"]
    try:
        inner = json.loads(answer)
    except ValueError:
        inner = None
    if isinstance(inner, dict) and all(
        isinstance(v, (str, int, float, bool)) or v is None for v in inner.values()
    ):
        answer = "\n".join(_field(k, v) for k, v in inner.items())  # a flat answer, e.g. a triage
    elif inner is not None:
        answer = json.dumps(inner, indent=2, ensure_ascii=False)
    meta = [f"model {data.get('model') or '?'}"]
    if data.get("finish_reason"):
        meta.append(f"finish {data['finish_reason']}")
    return f"{answer}\n\n— {', '.join(meta)}"


def ledger_status(effect: dict[str, Any], ledger: Any) -> str:
    """What the outbox's ledger says of an http_post effect's key; '' for other effects."""
    if effect.get("kind") != "http_post" or ledger is None:
        return ""
    attempts = [a for a in ledger.attempts if a.key == effect["key"]]
    delivered = sum(1 for d in ledger.deliveries if d.key == effect["key"])
    if not attempts:
        return "not received"
    replayed = sum(1 for a in attempts if a.outcome == "replayed")
    return f"delivered {delivered}×, {len(attempts)} attempt(s)" + (
        f", {replayed} deduplicated" if replayed else ""
    )


PROMPT = "Click a bar in the timeline to inspect a step."


class StepDetailView(QWidget):
    def __init__(
        self, loader: StepDetailLoader, watcher: OutboxWatcher, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._watcher = watcher
        self._detail: StepDetail | None = None
        self.header = QLabel(PROMPT)
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.decision = QPlainTextEdit()
        self.decision.setReadOnly(True)
        self.decision.setPlaceholderText("decision (the model's recorded output)")
        self.result = QPlainTextEdit()
        self.result.setReadOnly(True)
        self.result.setPlaceholderText("result or error")
        self.effects = RecordsModel(
            [
                ("Idempotency key", "key"),
                ("Kind", "kind"),
                ("Target", "target"),
                ("Log status", "status"),
                ("Attempts", "attempts"),
                ("Outbox ledger", "ledger"),
            ],
            self,
        )
        table = records_table(self.effects)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.header)
        layout.addWidget(QLabel("Decision"))
        layout.addWidget(self.decision, 3)
        layout.addWidget(QLabel("Effects"))
        layout.addWidget(table, 1)
        layout.addWidget(QLabel("Result / error"))
        layout.addWidget(self.result, 2)
        loader.detail_loaded.connect(self.show_detail)
        loader.load_failed.connect(
            lambda text: self.header.setText(f"cannot read the step: {text}")
        )
        watcher.ledger_changed.connect(lambda _l: self._show_effects())

    def clear(self) -> None:
        """Back to no step shown (the selected run changed: its steps are not the last run's)."""
        self._detail = None
        self.header.setText(PROMPT)
        self.decision.setPlainText("")
        self.result.setPlainText("")
        self.effects.set_records([])

    def show_detail(self, d: StepDetail | None) -> None:
        self._detail = d
        if d is None:
            self.header.setText("That step is not in the log (yet).")
            self.decision.setPlainText("")
            self.result.setPlainText("")
            self.effects.set_records([])
            return
        took = (d.finished_at - d.started_at) if d.finished_at else None
        tokens = d.tokens_in + d.tokens_out
        self.header.setText(
            f"#{d.seq} {d.name}  ({d.kind})  status {d.status}, phase {d.phase}\n"
            f"attempts {d.attempts}, recoveries {d.recoveries}, incarnation {d.incarnation}, "
            f"started {time.strftime('%H:%M:%S', time.localtime(d.started_at))}"
            + (f", took {took:.3f} s" if took is not None else "")
            + (
                f"\ntokens {tokens} (in {d.tokens_in}, out {d.tokens_out})"
                + (" estimated" if d.tokens_estimated else "")
                + f", cost ${d.cost_usd:.6f}"
                if tokens
                else ""
            )
        )
        self.decision.setPlainText(decision_text(d.decision))
        result = decision_text(d.result) if d.kind == "chat" else _pretty(d.result)
        self.result.setPlainText(("ERROR: " + d.error + "\n\n" if d.error else "") + result)
        self._show_effects()

    def _show_effects(self) -> None:
        d = self._detail
        if d is None:
            return
        shown = self._watcher.shown
        self.effects.set_records([{**e, "ledger": ledger_status(e, shown)} for e in d.effects])
