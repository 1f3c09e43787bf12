"""The verdict strip: PASS / FAIL / UNTESTED / RUNNING for the selected run, with its evidence.

A view over ``steplog.verdict.Verdict`` (delivered by ``VerdictWatcher``): it shows the engine's
one verdict, the same one ``steplog verdict`` prints, and decides nothing itself. The evidence is
one compact line under the figures, readable without hovering; the tooltip lists every check at
the normal tooltip size.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QWidget

from steplog.log.runstatus import RunStatus
from steplog_gui import theme
from steplog_gui.feeds.verdict_watcher import VerdictWatcher

LABEL_TEXT = {"PASS": "PASS", "FAIL": "FAIL", "UNTESTED": "not kill-tested", "RUNNING": "running…"}


def decision(verdict: Any) -> str:
    """What the strip's big label says for a ``steplog.verdict.Verdict`` (``''`` for none): a
    run no engine has started yet is not "running", nor is one that no engine works on."""
    if verdict is None:
        return ""
    if verdict.label == "RUNNING":
        if verdict.status in (RunStatus.QUEUED, RunStatus.WAITING):
            return f"{verdict.status}…"
        if verdict.engine in ("none", "gone"):
            return "stopped"
    if verdict.label == "UNTESTED" and verdict.kills:
        return "not proven"  # killed, but some evidence could not be read (the strip says which)
    return LABEL_TEXT[verdict.label]


def outcome(verdict: Any) -> str:
    """The run's outcome, shown beside the verdict and never folded into it."""
    if verdict.status not in (
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.GAVE_UP,
        RunStatus.CANCELLED,
    ):
        return ""
    words = {RunStatus.GAVE_UP: "gave up"}.get(verdict.status, verdict.status)
    return f"Outcome: {words}"


def _plain(label: QLabel) -> QLabel:
    label.setTextFormat(Qt.TextFormat.PlainText)  # run names and reasons are never markup
    return label


class VerdictStrip(QFrame):
    def __init__(self, watcher: VerdictWatcher, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.labels: dict[str, QLabel] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(8, 4, 8, 4)
        grid.setHorizontalSpacing(14)
        verdict = _plain(QLabel(""))
        verdict.setObjectName("verdict_verdict")
        font = verdict.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.45)
        verdict.setFont(font)  # a font, not a style sheet: style sheets cascade into the tooltip
        verdict.setMinimumWidth(verdict.fontMetrics().horizontalAdvance("not kill-tested") + 8)
        self.labels["verdict"] = verdict
        grid.addWidget(verdict, 0, 0, Qt.AlignmentFlag.AlignVCenter)
        # The outcome under the verdict, beside it and never folded into it; it takes no room
        # from the figures' row.
        outcome_label = _plain(QLabel(""))
        outcome_label.setObjectName("verdict_outcome")
        self.labels["outcome"] = outcome_label
        grid.addWidget(outcome_label, 1, 0, Qt.AlignmentFlag.AlignTop)
        figures = QHBoxLayout()
        figures.setSpacing(12)
        for key in ("kills", "redone", "duplicates", "latency", "deliveries"):
            label = _plain(QLabel(""))
            label.setObjectName(f"verdict_{key}")
            label.setMinimumWidth(
                40
            )  # below its text's width when space is short: never widens the window
            self.labels[key] = label
            figures.addWidget(label, 0 if key != "deliveries" else 1)
        figures.addStretch(1)
        grid.addLayout(figures, 0, 1)
        self.evidence = _plain(QLabel(""))
        self.evidence.setObjectName("verdict_evidence")
        self.evidence.setWordWrap(False)
        # Long evidence must not widen the window's centre and crush the docks: it is cut at the
        # strip's edge instead (the full text is in its tooltip).
        self.evidence.setMinimumWidth(50)
        self.evidence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        grid.addWidget(self.evidence, 1, 1)
        grid.setColumnStretch(1, 1)
        self.hint = _plain(
            QLabel(
                "No run selected: pick one under Runs, or start one with New run "
                "(the demo: steplog demo)."
            )
        )
        self.hint.setMinimumWidth(50)
        grid.addWidget(self.hint, 0, 1)
        self._watcher = watcher
        watcher.verdict_changed.connect(self.show_verdict)
        self.show_verdict(None)

    def _colour(self, label: QLabel, colour: str | None) -> None:
        pal = label.palette()
        pal.setColor(
            QPalette.ColorRole.WindowText,
            theme.qcolor(colour) if colour else self.palette().color(QPalette.ColorRole.WindowText),
        )
        label.setPalette(pal)

    def show_verdict(self, v: Any) -> None:
        pal = theme.current()
        self.hint.setVisible(v is None and self._watcher.run_id is None)
        if v is None:
            for label in self.labels.values():
                label.setText("")
            self.evidence.setText("")
            self.labels["verdict"].setToolTip("")
            return
        self.labels["outcome"].setText(outcome(v))
        self.labels["outcome"].setToolTip(
            f"how the run ended{': ' + v.reason if v.reason else ''} "
            "(the verdict judges its kills, not its outcome)"
            if outcome(v)
            else ""
        )
        self._colour(self.labels["outcome"], pal.status.get(v.status) if outcome(v) else None)
        self.labels["kills"].setText(f"Kills: {len(v.kills)}")
        self.labels["redone"].setText(f"Redone: {v.redone_steps}")
        self.labels["redone"].setToolTip(
            "steps run again because an engine was killed (at most one per kill "
            "passes); retries after errors, stops and waits are not redone work"
        )
        dup = (
            "not checked"
            if v.deliveries is None
            and any(c.name == "no duplicate effects" and c.ok is None for c in v.checks)
            else str(len(v.duplicates))
        )
        self.labels["duplicates"].setText(f"Duplicates: {dup}")
        self._colour(self.labels["duplicates"], pal.duplicate if v.duplicates else None)
        latencies = v.latencies
        self.labels["latency"].setText(
            "Resume: " + (f"{latencies[-1] * 1000:.0f} ms" if latencies else "—")
        )
        self.labels["latency"].setToolTip(
            "the last kill → the first step committed by the relaunched engine"
            if latencies
            else "no kill yet"
        )
        self.labels["deliveries"].setText(
            "" if v.deliveries is None else f"Outbox: {v.deliveries}/{v.attempts}"
        )
        self.labels["deliveries"].setToolTip(
            ""
            if v.deliveries is None
            else f"{v.deliveries} messages delivered for {v.attempts} attempts "
            "(this run's own, in its outbox's ledger)"
        )
        label = v.label
        self.labels["verdict"].setText(decision(v))
        self._colour(
            self.labels["verdict"],
            {
                "PASS": pal.status[RunStatus.SUCCEEDED],
                "FAIL": pal.status[RunStatus.FAILED],
                "UNTESTED": pal.status["stopped"],
            }.get(label),
        )
        self.evidence.setText(v.explanation)
        self.evidence.setToolTip(v.explanation)
        checks = "\n".join(
            f"{'✔' if c.ok else '✘' if c.ok is False else '·'} {c.name}: {c.detail}  [{c.source}]"
            for c in v.checks
        )
        self.labels["verdict"].setToolTip(f"{label}: {v.explanation}\n\n{checks}")
