"""Compare mode: the naive agent and the durable demo side by side, one Kill now for both.

The same demo task runs twice at once on the same tickets (``CompareRuns``): the built-in
``naive`` agent (no checkpoints, a new idempotency key per send) and the durable ``demo`` agent.
Top to bottom, naive above durable each time: two verdict strips (the one verdict,
``steplog.verdict``, for each run) beside the figures (``compare_figures``), a lane per run on
one time axis (``compare_lane``), and the two charts that tell the cost (``compare_charts``).
The outbox panels on the right show each run's own deliveries; the naive one's duplicates are red.
"""

from __future__ import annotations

import math
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QColor, QFont, QKeySequence, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QGridLayout,
    QLabel,
    QMainWindow,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from steplog.log.runstatus import RunStatus
from steplog_gui import resources, theme
from steplog_gui.compare.charts import CompareCharts
from steplog_gui.compare.figures import CompareFigures, figures
from steplog_gui.compare.lane import CompareLane
from steplog_gui.compare.monitor import CompareMonitor
from steplog_gui.compare.runs import CompareRuns
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.feeds.outbox_watcher import OutboxWatcher
from steplog_gui.feeds.verdict_watcher import VerdictWatcher
from steplog_gui.processes.demo import DemoConfig, DemoLauncher
from steplog_gui.views.kill_controls import auto_kill_controls, kill_now_button
from steplog_gui.views.outbox_panel import OutboxPanel
from steplog_gui.views.problem_banner import ProblemBanner
from steplog_gui.views.verdict_strip import VerdictStrip

FOLLOW_MS = 250
DOCK_WIDTH = 420
SIDE_TITLES = {
    "naive": (
        "naive agent",
        "no checkpoints, a new idempotency key per send: every kill starts it over",
    ),
    "durable": (
        "steplog demo",
        "checkpointed steps, stable idempotency keys: every kill resumes it",
    ),
}


class CompareWindow(QMainWindow):
    """The comparison's window; the monitor's Compare toggle opens and closes it."""

    closed = Signal()
    """The window was closed (its engines are stopped by then)."""

    def __init__(
        self,
        monitor: Monitor,
        demo: DemoLauncher,
        *,
        engine_env: dict[str, str] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle(f"steplog — naive vs durable, one Kill now — {monitor.path}")
        self.setWindowIcon(resources.app_icon())
        self.monitor = monitor
        self.demo = demo
        self.config = DemoConfig()
        self.runs = CompareRuns(monitor, demo, env=engine_env, parent=self)
        self.view = CompareMonitor(monitor, self)
        self.outboxes = {"naive": OutboxWatcher(self), "durable": OutboxWatcher(self)}
        self.judges = {
            side: VerdictWatcher(self.view, watcher, self)
            for side, watcher in self.outboxes.items()
        }
        self.strips = {side: VerdictStrip(judge) for side, judge in self.judges.items()}
        self.figures = CompareFigures()
        self.lanes = {
            "naive": CompareLane(self.view, naive=True),
            "durable": CompareLane(self.view, naive=False),
        }
        self.charts = CompareCharts(self.view)
        self._follow = True

        header = QGridLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setHorizontalSpacing(6)
        self.titles: dict[str, QLabel] = {}
        for row, side in enumerate(("naive", "durable")):
            name, what = SIDE_TITLES[side]
            title = QLabel(name.replace(" ", "\n", 1))
            title.setTextFormat(Qt.TextFormat.PlainText)
            title.setToolTip(what)
            font = QFont(title.font())
            font.setBold(True)
            font.setPointSizeF(font.pointSizeF() * 1.15)
            title.setFont(font)
            self.titles[side] = title
            header.addWidget(title, row, 0)
            header.addWidget(self.strips[side], row, 1)
        header.addWidget(self.figures, 0, 2, 2, 1)
        header.setColumnStretch(1, 1)
        lanes = QSplitter(Qt.Orientation.Vertical)
        for side in ("naive", "durable"):
            lanes.addWidget(self.lanes[side])
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(lanes)
        split.addWidget(self.charts)
        split.setSizes([560, 260])
        central = QWidget()
        box = QVBoxLayout(central)
        box.setContentsMargins(4, 4, 4, 4)
        self.banner = ProblemBanner()
        box.addWidget(self.banner)
        box.addLayout(header)
        box.addWidget(split, 1)
        self.setCentralWidget(central)
        self.panels = {side: OutboxPanel(watcher) for side, watcher in self.outboxes.items()}
        for side in ("naive", "durable"):
            dock = QDockWidget(f"Outbox: {SIDE_TITLES[side][0]}", self)
            dock.setObjectName(f"dock_compare_outbox_{side}")
            dock.setWidget(self.panels[side])
            dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable)
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
        self._docks_sized = False
        self._build_toolbar()
        self._link_axes()
        self.apply_palette(theme.current())

        self.runs.runs_started.connect(self._on_runs_started)
        self.runs.state_changed.connect(self._update_actions)
        self.runs.killed.connect(self._on_killed)
        self.runs.problem.connect(self._show_problem)
        for engine in self.runs.engines:
            engine.engine_exited.connect(
                lambda rid, _code, msg: self.statusBar().showMessage(f"{rid}: {msg}")
            )
            engine.state_changed.connect(self.outboxes["naive"].poke)
            engine.state_changed.connect(self.outboxes["durable"].poke)
        demo.demo_failed.connect(self._show_problem)
        self.view.problem_changed.connect(self._show_problem)
        self.view.compared.connect(lambda _r: self._show_figures())
        for (
            judge
        ) in self.judges.values():  # connected after the strips: the naive 'Redone' is set last
            judge.verdict_changed.connect(lambda _v: self._show_figures())
        for watcher in self.outboxes.values():
            watcher.ledger_changed.connect(lambda _l: self._show_figures())
        theme.Theme(self).changed.connect(self.apply_palette)  # the OS switched light/dark
        self._timer = QTimer(self)
        self._timer.setInterval(FOLLOW_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        area = self.screen().availableGeometry()
        self.resize(min(1680, int(area.width() * 0.94)), min(1050, int(area.height() * 0.94)))
        self._update_actions()

    # -- building ---------------------------------------------------------------------------

    def _build_toolbar(self) -> None:
        def action(text: str, slot: Any, shortcut: str | None, tip: str) -> QAction:
            a = QAction(text, self)
            a.triggered.connect(slot)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            a.setToolTip(tip)
            a.setStatusTip(tip)
            return a

        self.act_start = action(
            "Start the comparison again",
            lambda: self.start(),
            "Ctrl+D",
            "both agents again on the same tickets: new run ids, the same outbox",
        )
        self.act_follow = action(
            "Follow", self.follow, "Ctrl+F", "show the whole comparison and keep up with it"
        )
        self.act_approve = action(
            "Approve both",
            lambda: self.runs.approve_both(True),
            "Ctrl+Shift+A",
            "answer both agents' approval step (started with steplog demo --compare --approve): "
            "the durable one is asked once, the naive one again after every kill",
        )
        bar = QToolBar("Compare")
        bar.setObjectName("toolbar_compare")
        self.addToolBar(bar)
        bar.addAction(self.act_start)
        bar.addSeparator()
        self.act_kill = kill_now_button(
            bar,
            "Kill both now",
            "SIGKILL both engines' process groups at the same moment, then relaunch both",
            self.kill_both,
            name="compare_kill_now",
        )
        self.auto_kill, self.auto_seconds = auto_kill_controls(
            bar, "Auto-kill both every", minimum=0.5, seconds=12.0, changed=self._auto_kill_toggled
        )
        bar.addSeparator()
        bar.addAction(self.act_approve)
        bar.addAction(self.act_follow)

    def _link_axes(self) -> None:
        """One time axis: the naive lane (linked, same screen x) and both charts follow the
        durable lane's x range."""
        anchor = self.lanes["durable"].plot
        self.lanes["naive"].plot.setXLink(anchor)
        anchor.getViewBox().sigXRangeChanged.connect(
            lambda _box, rng: self.charts.set_x_range(*rng)
        )
        for lane in self.lanes.values():
            lane.plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)

    # -- control ----------------------------------------------------------------------------

    def start(self, config: DemoConfig | None = None) -> None:
        """Start a comparison (the demo outbox first, if it is not running)."""
        if config is not None:
            self.config = config
        if self.runs.running:
            self.statusBar().showMessage("the comparison is still running: let it finish first")
            return
        self._show_problem("")
        try:
            self.runs.start(self.config)
        except RuntimeError as exc:  # still starting the last one (its outbox is coming up)
            self.statusBar().showMessage(str(exc))
            return
        self.statusBar().showMessage("starting both agents (and the demo outbox)…")

    def kill_both(self) -> None:
        if not self.runs.kill_both():
            self.statusBar().showMessage("no engine is running")

    def follow(self) -> None:
        self._follow = True
        self._tick()

    def _stop_following(self, *_args: object) -> None:
        self._follow = False

    def _auto_kill_toggled(self) -> None:
        self.runs.set_auto_kill(self.auto_seconds.value() if self.auto_kill.isChecked() else 0.0)

    # -- reacting ---------------------------------------------------------------------------

    def _on_runs_started(self, naive_id: str, durable_id: str) -> None:
        url = self.demo.outbox.url if self.demo.outbox is not None else None
        for side, run_id in (("naive", naive_id), ("durable", durable_id)):
            self.outboxes[side].set_url(url)
            self.outboxes[side].set_run(run_id)
        self.view.set_runs(naive_id, durable_id)
        for side, run_id in (("naive", naive_id), ("durable", durable_id)):
            self.lanes[side].set_run(run_id)
            self.judges[side].set_run(run_id)
        self.follow()
        self.statusBar().showMessage(f"{naive_id} (naive) and {durable_id} (durable) are starting")

    def _on_killed(self, at: float, engines: int) -> None:
        clock = time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"
        what = "both engines" if engines == 2 else "the engine still running"
        self.statusBar().showMessage(
            f"kill {self.runs.kills} at {clock}: SIGKILL to {what}' process groups; "
            "relaunching with the same run ids"
        )

    def _naive_redone(self, verdict: Any) -> None:
        """The strip's 'Redone' comes from the log, which records no naive step: say what the trace
        counts."""
        result = self.view.result
        if verdict is None or result is None:
            return
        label = self.strips["naive"].labels["redone"]
        label.setText(f"Redone: {result.trace.redone} (its trace)")
        label.setToolTip(
            "actions the naive agent started again after kills, counted from its own trace: "
            "the log records none of its steps"
        )

    def _show_figures(self) -> None:
        result = self.view.result
        if result is None:
            return
        self.figures.show_figures(
            figures(
                result,
                self.judges["naive"].verdict,
                self.judges["durable"].verdict,
                self.outboxes["naive"].ledger,
                self.outboxes["durable"].ledger,
            )
        )
        self._naive_redone(self.judges["naive"].verdict)

    def _tick(self) -> None:
        result = self.view.result
        if result is not None and self.runs.naive.running:
            self.lanes[
                "naive"
            ].refresh()  # its running bar grows with the clock (no open step in the log)
        if not self._follow or result is None:
            return
        now = time.time()
        ends = [
            r.finished if r.finished is not None else r.open_until(now)
            for r in (result.naive, result.durable)
        ]
        finite = [e for e in ends if math.isfinite(e)]
        if not finite or not math.isfinite(result.origin):
            return
        end = max(finite) - result.origin
        self.lanes["durable"].plot.setXRange(-0.02 * end, end * 1.03 + 0.5, padding=0)

    def _update_actions(self) -> None:
        running = self.runs.running
        self.act_kill.setEnabled(running)
        self.act_approve.setEnabled(running)
        self.act_start.setEnabled(not running)
        if (
            self.auto_kill.isChecked() and not self.runs.auto_kill_seconds
        ):  # stopped: the durable run is done
            self.auto_kill.setChecked(False)
            self.statusBar().showMessage(
                "the durable run is done: auto-kill stopped, the naive one runs to its end"
            )

    def _show_problem(self, text: str) -> None:
        self.banner.show_problem(text)

    def apply_palette(self, pal: theme.Palette) -> None:
        for lane in self.lanes.values():
            lane.apply_palette(pal)
        self.charts.apply_palette(pal)
        for side, colour in (
            ("naive", pal.status[RunStatus.FAILED]),
            ("durable", pal.status[RunStatus.SUCCEEDED]),
        ):
            p = self.titles[side].palette()
            p.setColor(QPalette.ColorRole.WindowText, QColor(colour))
            self.titles[side].setPalette(p)
            name, what = SIDE_TITLES[side]
            self.lanes[side].plot.setTitle(f"{name}: {what}", color=colour, size="10pt")
        # After the widgets have their new palette (delivered once this event is handled): the
        # strips colour their figures from it (see MainWindow._apply_palette).
        QTimer.singleShot(0, self._show_verdicts)

    def _show_verdicts(self) -> None:
        for side, strip in self.strips.items():
            strip.show_verdict(self.judges[side].verdict)
        self._show_figures()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self._docks_sized:  # sized once laid out: the outbox tables need room for their keys
            self._docks_sized = True
            docks = self.findChildren(QDockWidget)
            self.resizeDocks(docks, [DOCK_WIDTH] * len(docks), Qt.Orientation.Horizontal)

    # -- closing ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop both engines (no relaunch) and the polling; the demo outbox is the monitor's."""
        self._timer.stop()
        self.runs.terminate_now()
        self.view.stop()
        for watcher in self.outboxes.values():
            watcher.stop()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self.shutdown()
        event.accept()
        self.closed.emit()
