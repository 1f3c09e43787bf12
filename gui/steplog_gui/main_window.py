"""The monitor's main window: runs list, timeline, budget charts, step detail, outbox, kill
panel."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QItemSelection, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHeaderView,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStyle,
    QTableView,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from steplog.log.follow import FILE_FILTER, KINDS, notifier
from steplog.log.location import LogLocation
from steplog.log.location import parse as parse_location
from steplog.log.reader import LogRepository
from steplog.log.runstatus import RunStatus
from steplog_gui import jobs, resources, startup_trace, theme
from steplog_gui.feeds.monitor import Monitor
from steplog_gui.feeds.outbox_watcher import OutboxWatcher
from steplog_gui.feeds.verdict_watcher import VerdictWatcher
from steplog_gui.processes.demo import DEMO_AGENTS, DEMO_PACE, DemoConfig, DemoLauncher
from steplog_gui.processes.engine_process import EngineProcess, LaunchSpec
from steplog_gui.processes.kill_switch import KillSwitch
from steplog_gui.settings import Settings
from steplog_gui.views.approvals import ApprovalsPanel
from steplog_gui.views.kill_controls import auto_kill_controls, kill_now_button
from steplog_gui.views.outbox_panel import OutboxPanel
from steplog_gui.views.problem_banner import ProblemBanner
from steplog_gui.views.prune_action import Pruner, ask_and_prune
from steplog_gui.views.run_control import RunControl
from steplog_gui.views.runs_filter import RunsFilterBar
from steplog_gui.views.runs_model import RUN_ID_ROLE, RunsModel
from steplog_gui.views.step_detail import StepDetailLoader, StepDetailView
from steplog_gui.views.step_output import StepOutputFeed, StepOutputView
from steplog_gui.views.verdict_strip import VerdictStrip

if TYPE_CHECKING:  # pyqtgraph's views, imported once the window is up (``build_views``)
    from steplog_gui.compare.window import CompareWindow
    from steplog_gui.timeline.view import TimelineView
    from steplog_gui.views.budget_charts import BudgetCharts


def _read_run_row(path: LogLocation, run_id: str) -> dict[str, Any] | None:
    repo = LogRepository(path)
    try:
        return repo.run_row(run_id)
    finally:
        repo.close()


def _ready_text(path: LogLocation) -> str:
    """The status bar's first words: how this log is followed, when there is something to say
    (the log says it: ``steplog.log.follow``; a URL is shown without its password)."""
    live = notifier(path).live
    return f"ready: {live}" if live else "ready"


def _remote_why(run_id: str, host: str) -> str:
    """Why Kill now cannot act on a run whose engine is on another machine, and what can."""
    return (
        f"the engine of {run_id} runs on {host}, not on this machine: Kill now reaches only "
        "engines this monitor started here. Use Run ▸ Cancel run… instead (it ends at its next "
        "step)"
    )


SAMPLE_RUN_ID = "demo-20261201-120000"
"""A typical run id: the runs list is sized for it (longer ones are cut in the middle)."""


def about_text(version: str, path: LogLocation) -> str:
    """Help → About: what steplog is, and what this window does to runs (it is no mere viewer)."""
    return (
        f"steplog {version}\n\nCrash-safe AI agents on {KINDS}: checkpointed "
        "steps, idempotent effects, budgets, leases, and the kill test that proves it.\n\n"
        f"This monitor follows the log {path} live. It also acts on runs: it starts engines "
        "(New run, Resume run, the demo), kills them (Kill now and auto-kill: SIGKILL to the "
        "engine's process group, then a relaunch), stops them, and cancels, retries, forks, "
        "signals and prunes runs by running the steplog commands that do it. It never writes "
        "the log itself: the engines and those commands do."
    )


class MainWindow(QMainWindow):
    """The monitor's window. ``defer_views``: the timeline and budget charts (pyqtgraph, numpy
    drawing) are left out until ``build_views`` is called, so the window can be painted before
    pyqtgraph is imported (``app.main`` does, issue 29); otherwise they are built here."""

    first_painted = Signal()
    """The window was painted for the first time (``app.main`` builds the views then)."""

    timeline: TimelineView
    """The step timeline (from ``build_views`` on)."""
    charts: BudgetCharts
    """The budget charts (from ``build_views`` on)."""

    def __init__(
        self,
        monitor: Monitor,
        settings: Settings,
        *,
        engine_env: dict[str, str] | None = None,
        defer_views: bool = False,
    ) -> None:
        super().__init__()
        theme.choose(settings.theme)  # before any view reads the palette
        self.monitor = monitor
        self.settings = settings
        self.close_policy: str | None = None
        """'stop' or 'leave' answers the close question without asking (tests, scripts)."""
        self.setWindowTitle(f"steplog monitor — {monitor.path}")
        self.setWindowIcon(resources.app_icon())
        self.engine = EngineProcess(self, env=engine_env)
        self.kill_switch = KillSwitch(monitor, (self.engine,), self)
        self.watcher = OutboxWatcher(self, log=lambda: self.monitor.path)  # a stopped one: its file
        self.demo: DemoLauncher | None = None
        self.compare: CompareWindow | None = None
        self._engine_env = engine_env
        self._run_id: str | None = None
        self._run_outbox: dict[str, str | None] = {}

        self.banner = ProblemBanner()
        self.judge = VerdictWatcher(monitor, self.watcher, self)
        self.verdict = VerdictStrip(self.judge)
        self.views_ready = False
        """Whether the timeline is built (``build_views``)."""
        self.charts_ready = False
        """Whether the budget charts are (``build_views``, with the timeline or just after)."""
        self._painted = False
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(QWidget())  # the timeline's place until it is built
        split.addWidget(QWidget())  # the charts'
        split.setSizes([400, 300])
        self._split = split
        central = QWidget()
        box = QVBoxLayout(central)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.banner)
        self.control = RunControl(monitor, self, env=engine_env, engine_busy=self._engine_busy)
        box.addWidget(self.control.banner)
        box.addWidget(self.control.blocked_banner)
        box.addWidget(self.verdict)
        box.addWidget(split, 1)
        self.setCentralWidget(central)

        self.runs_model = RunsModel(monitor, self)
        self.runs_view = QTableView()
        self.runs_view.setModel(self.runs_model)
        self.runs_view.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.runs_view.setSelectionMode(QTableView.SelectionMode.SingleSelection)
        self.runs_view.verticalHeader().hide()
        self.runs_view.horizontalHeader().setStretchLastSection(True)
        self.runs_view.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        # A column fits its contents up to the width of a typical run id: a longer one (a fork of
        # a fork) is cut in the middle, both ends kept, whole in its tooltip; it no longer pushes
        # Status and Steps out of the dock.
        self.runs_view.horizontalHeader().setMaximumSectionSize(self._column_cap())
        self.runs_view.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.runs_view.setWordWrap(False)  # cut on one line, not wrapped into a taller row
        self.runs_view.selectionModel().selectionChanged.connect(self._on_run_selected)
        # A header click sorts the runs read. The arrow shows once the person sorts: shown from
        # the start, every header would keep room for it and Status and Steps leave the dock.
        header = self.runs_view.horizontalHeader()
        self.runs_view.setSortingEnabled(True)
        header.setSortIndicator(-1, Qt.SortOrder.DescendingOrder)
        header.setSortIndicatorShown(False)
        header.sortIndicatorChanged.connect(
            lambda column, _order: header.setSortIndicatorShown(column >= 0)
        )
        self.runs_filter = RunsFilterBar()
        self.runs_filter.query_changed.connect(self.runs_model.set_query)
        runs_box = QWidget()
        runs_layout = QVBoxLayout(runs_box)
        runs_layout.setContentsMargins(0, 0, 0, 0)
        runs_layout.setSpacing(2)
        runs_layout.addWidget(self.runs_filter)
        runs_layout.addWidget(self.runs_view, 1)
        self.loader = StepDetailLoader(lambda: self.monitor.path, self)
        self.detail = StepDetailView(self.loader, self.watcher)
        self.output_feed = StepOutputFeed(
            lambda: self.monitor.path,
            lambda run_id: (r := self.monitor.run(run_id)) is not None and r.terminal,
            self,
        )
        self.output = StepOutputView(self.output_feed)
        self.outbox_panel = OutboxPanel(self.watcher)
        self._runs_dock = self._dock("Runs", "runs", runs_box, Qt.DockWidgetArea.LeftDockWidgetArea)
        self._detail_dock = self._dock(
            "Step detail", "detail", self.detail, Qt.DockWidgetArea.RightDockWidgetArea
        )
        self._outbox_dock = self._dock(
            "Outbox", "outbox", self.outbox_panel, Qt.DockWidgetArea.RightDockWidgetArea
        )
        # The output shares the detail's place, in front: what the model writes, as it writes.
        self._output_dock = self._dock(
            "Output", "output", self.output, Qt.DockWidgetArea.RightDockWidgetArea
        )
        self.tabifyDockWidget(self._detail_dock, self._output_dock)
        self._output_dock.raise_()
        # The approvals inbox shares the outbox's place, behind it; its title counts the waiting.
        self.approvals = ApprovalsPanel(monitor.path)
        self._approvals_dock = self._dock(
            "Approvals", "approvals", self.approvals, Qt.DockWidgetArea.RightDockWidgetArea
        )
        self.tabifyDockWidget(self._outbox_dock, self._approvals_dock)
        self._outbox_dock.raise_()
        self.approvals.loaded.connect(
            lambda: self._approvals_dock.setWindowTitle(
                f"Approvals ({len(self.approvals.waiting)})"
                if self.approvals.waiting
                else "Approvals"
            )
        )
        self.approvals.notice.connect(self.statusBar().showMessage)
        monitor.runs_changed.connect(lambda _ids: self.approvals.log_changed())
        monitor.runs_added.connect(lambda *_a: self.approvals.log_changed())
        self.approvals.refresh()
        self.pruner = Pruner(lambda: self.monitor.path, self, env=engine_env)
        self.pruner.estimated.connect(
            lambda found: ask_and_prune(self, self.pruner, [c.run_id for c in found], found)
        )
        self.pruner.refused.connect(
            lambda why: self.statusBar().showMessage(f"cannot prune: {why}")
        )
        self.pruner.finished.connect(lambda _code, text: self.statusBar().showMessage(text))
        self._build_actions()
        self.statusBar().showMessage(_ready_text(monitor.path))

        self.control.notice.connect(self.statusBar().showMessage)
        self.control.problem.connect(self._show_problem)
        self.control.launch.connect(self.launch_run)
        monitor.problem_changed.connect(self._show_problem)
        monitor.runs_added.connect(self._on_runs_added)
        monitor.runs_changed.connect(
            lambda ids: self._update_actions() if self._run_id in ids else None
        )
        monitor.runs_changed.connect(
            lambda ids: self.control.update() if self._run_id in ids else None
        )
        self.engine.engine_started.connect(self._on_engine_started)
        self.engine.engine_exited.connect(
            lambda _rid, _code, msg: self.statusBar().showMessage(msg)
        )
        self.engine.engine_killed.connect(
            lambda rid, _ts: self.statusBar().showMessage(
                f"killed the engine of {rid} (SIGKILL to its group); relaunching"
            )
        )
        self.engine.state_changed.connect(self._update_actions)
        self.engine.state_changed.connect(self.watcher.poke)
        self.kill_switch.state_changed.connect(self._update_actions)
        theme_relay = theme.Theme(self)
        theme_relay.changed.connect(self._apply_palette)
        if settings.geometry is not None:
            self.restoreGeometry(settings.geometry)
        else:
            area = self.screen().availableGeometry()
            self.resize(min(1680, int(area.width() * 0.94)), min(1050, int(area.height() * 0.94)))
        self._first_launch = settings.window_state is None
        if settings.window_state is not None:
            self.restoreState(settings.window_state)
        settings.add_recent(f"{monitor.path}")  # formatted: a URL without its password
        self._rebuild_recent()
        self._update_actions()
        if not defer_views:
            self.build_views()

    def build_views(self, *, charts_later: bool = False) -> None:
        """Import pyqtgraph and put the timeline and the budget charts in their places, showing
        the selected run; ``charts_later``: the charts on the next turn of the event loop, so the
        timeline draws its first steps before they are built. A second call does nothing."""
        if self.views_ready:
            return
        from steplog_gui.timeline.view import TimelineView

        self.timeline = TimelineView(self.monitor)
        placeholder = self._split.replaceWidget(0, self.timeline)
        if placeholder is not None:
            placeholder.deleteLater()
        self.timeline.step_selected.connect(lambda rid, seq: self._step_selected(rid, seq))
        self.timeline.step_selected.connect(self.control.set_step)
        self.output_feed.writing_changed.connect(self.timeline.set_writing)
        self.views_ready = True
        if self._run_id is not None:
            self.timeline.set_run(self._run_id)
        startup_trace.mark("views_ready")
        if charts_later:
            QTimer.singleShot(0, self._build_charts)
        else:
            self._build_charts()

    def _build_charts(self) -> None:
        from steplog_gui.views.budget_charts import BudgetCharts

        self.charts = BudgetCharts(self.monitor)
        placeholder = self._split.replaceWidget(1, self.charts)
        if placeholder is not None:
            placeholder.deleteLater()
        self._split.setSizes([400, 300])
        self.charts_ready = True
        if self._run_id is not None:
            self.charts.set_run(self._run_id)

    def paintEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)
        if not self._painted:
            self._painted = True
            startup_trace.mark("window_painted")
            if startup_trace.enabled():
                import sys

                startup_trace.mark_loaded(sys.modules)
            self.first_painted.emit()

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self._first_launch:  # sized to the window it got, once; afterwards restored as left
            self._first_launch = False
            QTimer.singleShot(0, self.size_docks)

    def size_docks(self) -> None:
        """Docks sized to their content and the window: the runs list shows run, status and
        steps; the step detail and outbox get a readable width; the timeline keeps the rest.

        Widths come from the font and typical content, not from the rows loaded so far: the
        first launch lays out the same whether the log has been read yet or not."""
        width = self.width()
        runs = self.runs_view
        fm = runs.fontMetrics()
        pad = 2 * runs.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin) + 4
        samples = (
            ("Run", SAMPLE_RUN_ID),
            ("Status", RunStatus.SUCCEEDED),
            ("Steps", "1000 / 2000"),
        )
        key_columns = sum(
            max(fm.horizontalAdvance(a), fm.horizontalAdvance(b)) + pad for a, b in samples
        )
        key_columns += runs.verticalScrollBar().sizeHint().width() + 4
        left = max(200, min(int(width * 0.24), key_columns))
        # At 1280 px the centre needs ~650 px for the verdict strip's figures on one line.
        right = max(300, min(int(width * 0.235), 560))
        # The output and the step detail share one place (tabs): size the one in front.
        place = (
            self._output_dock if self._detail_dock.visibleRegion().isEmpty() else self._detail_dock
        )
        self.resizeDocks([self._runs_dock, place], [left, right], Qt.Orientation.Horizontal)
        self.resizeDocks(
            [place, self._outbox_dock],
            [int(self.height() * 0.55), int(self.height() * 0.4)],
            Qt.Orientation.Vertical,
        )

    def _column_cap(self) -> int:
        """The widest a runs list column gets: a typical run id, a little more than a timestamp."""
        runs = self.runs_view
        pad = 2 * runs.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin) + 12
        return runs.fontMetrics().horizontalAdvance(SAMPLE_RUN_ID + "-00") + pad

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock_{name}")
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _action(
        self,
        text: str,
        slot: Any,
        shortcut: str | QKeySequence | QKeySequence.StandardKey | None = None,
        tip: str = "",
    ) -> QAction:
        action = QAction(text, self)
        action.triggered.connect(slot)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.setToolTip(tip or text)
        action.setStatusTip(tip or text)
        return action

    def _build_actions(self) -> None:
        self.act_new = self._action("&New run…", self.new_run, QKeySequence.StandardKey.New)
        self.act_resume = self._action(
            "&Resume run", self.resume_selected, "Ctrl+R", "relaunch the selected run's engine"
        )
        self.act_open = self._action("&Open log…", self.open_log, QKeySequence.StandardKey.Open)
        self.act_quit = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.act_kill_window = self._action(
            "Kill at next act→record &window",
            self.kill_switch.arm_window,
            "Ctrl+Shift+K",
            "kill the moment the next effect starts",
        )
        self.act_stop = self._action(
            "&Stop engine", self.engine.stop, None, "SIGTERM: the engine releases its lease"
        )
        self.act_demo = self._action(
            "Run the &demo again",
            lambda: self.start_demo(),
            "Ctrl+D",
            "a new demo run on the same outbox: about a minute, ready for Kill now",
        )
        self.act_about = self._action("&About steplog", self.about)
        self.act_costs = self._action(
            "&Costs…", self.show_costs, "Ctrl+Shift+C", "what the runs spent, by model or agent"
        )
        self.costs_view: Any = None
        self.act_prune = self._action(
            "&Prune selected runs…",
            self.prune_selected,
            None,
            "remove the selected finished runs from the log (steplog prune), archived first if "
            "you like",
        )
        self.act_compare = self._action(
            "&Compare naive vs durable",
            self._compare_toggled,
            "Ctrl+Shift+D",
            "the naive agent and the durable demo side by side, one Kill now for both",
        )
        self.act_compare.setCheckable(True)

        bar = QToolBar("Engine")
        bar.setObjectName("toolbar_engine")
        self.addToolBar(bar)
        for a in (self.act_demo, self.act_new, self.act_resume, self.act_stop):
            bar.addAction(a)
        bar.addAction(self.act_compare)
        bar.addSeparator()
        self.act_kill = kill_now_button(
            bar,
            "&Kill now",
            "SIGKILL the engine's process group, then relaunch it with the same run id",
            self.kill_now,
            name="kill_now",
        )
        bar.addAction(self.act_kill_window)
        self.auto_kill, self.auto_seconds = auto_kill_controls(
            bar,
            "Auto-kill every",
            minimum=0.2,
            seconds=self.settings.auto_kill_seconds,
            changed=self._auto_kill_toggled,
        )

        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        file_menu.addAction(self.act_open)
        self.recent_menu = file_menu.addMenu("Open &recent")
        file_menu.addSeparator()
        file_menu.addAction(self.act_quit)
        run_menu = menu.addMenu("&Run")
        for a in (self.act_demo, self.act_new, self.act_resume, self.act_stop, self.act_compare):
            run_menu.addAction(a)
        run_menu.addSeparator()
        for a in self.control.actions:
            run_menu.addAction(a)
        run_menu.addSeparator()
        run_menu.addAction(self.act_prune)
        kill_menu = menu.addMenu("&Kill")
        kill_menu.addAction(self.act_kill)
        kill_menu.addAction(self.act_kill_window)
        view_menu = menu.addMenu("&View")
        for dock in self.findChildren(QDockWidget):
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
        view_menu.addAction(self.act_costs)
        view_menu.addSeparator()
        theme_menu = view_menu.addMenu("&Theme")
        group = QActionGroup(self)
        self.theme_actions: dict[str, QAction] = {}
        for name, label in (("system", "&System"), ("light", "&Light"), ("dark", "&Dark")):
            action = theme_menu.addAction(label)
            action.setCheckable(True)
            action.setChecked(self.settings.theme == name)
            action.triggered.connect(lambda _checked=False, n=name: self.set_theme(n))
            group.addAction(action)
            self.theme_actions[name] = action
        help_menu = menu.addMenu("&Help")
        help_menu.addAction(self.act_about)

    def _rebuild_recent(self) -> None:
        self.recent_menu.clear()
        for path in self.settings.recent_files:
            self.recent_menu.addAction(
                path, functools.partial(self.switch_log, parse_location(path))
            )

    # -- runs -------------------------------------------------------------------------------

    def show_costs(self) -> None:
        """The Costs window over this log (one per main window; raised if open)."""
        from steplog_gui.views.costs_view import CostsView

        if self.costs_view is None or self.costs_view.location != self.monitor.path:
            if self.costs_view is not None:
                self.costs_view.close()
            first = self.costs_view is None
            self.costs_view = CostsView(self.monitor.path, self)
            self.costs_view.run_chosen.connect(self.select_run)
            if first:  # once: the monitor stays, the window follows whichever log it shows
                self.monitor.runs_changed.connect(lambda _ids: self.costs_view.log_changed())
                self.monitor.runs_added.connect(lambda *_a: self.costs_view.log_changed())
        self.costs_view.show()
        self.costs_view.raise_()
        self.costs_view.activateWindow()

    def select_run(self, run_id: str) -> None:
        row = self.runs_model.row_of(run_id)
        if row >= 0:
            self.runs_view.selectRow(row)

    def _on_runs_added(self, run_ids: list[str]) -> None:
        wanted = self.engine.spec.run_id if self.engine.spec else None
        if wanted in run_ids or (self._run_id is None and not wanted):
            # nothing chosen yet: the newest run the list shows (the top row)
            top = self.runs_model.run_id(0) if self.runs_model.rowCount() else run_ids[-1]
            self.select_run(wanted or top)
        elif (
            self._run_id is not None
        ):  # inserting rows at the top moved the selection: keep the run
            self.select_run(self._run_id)

    def _step_selected(self, run_id: str, seq: int) -> None:
        """A bar clicked: its detail, and its output in the tab behind."""
        self.loader.load(run_id, seq)
        self.output_feed.show(run_id, seq)

    def _on_run_selected(self, _sel: QItemSelection, _desel: QItemSelection) -> None:
        rows = self.runs_view.selectionModel().selectedRows()
        run_id = rows[0].data(RUN_ID_ROLE) if rows else None
        if run_id is not None:
            self.monitor.want(run_id)  # an old run of a big log is loaded when it is selected
        if run_id == self._run_id:
            return
        self._run_id = run_id
        self.loader.forget()  # the step shown was the last run's
        self.detail.clear()
        self.output_feed.show(run_id)  # whichever of its steps writes
        self.watcher.set_run(
            run_id
        )  # its own deliveries: another run's equal message is no duplicate
        if self.views_ready:
            self.timeline.set_run(run_id)
        if self.charts_ready:
            self.charts.set_run(run_id)
        self.judge.set_run(run_id)
        self.control.set_run(run_id)
        self._update_actions()
        if run_id is None:
            return
        if self.demo is not None and self.demo.outbox is not None and run_id in self.demo.run_ids:
            self.watcher.set_url(self.demo.outbox.url)
            return
        path = self.monitor.path
        jobs.submit(
            lambda: _read_run_row(path, run_id),
            lambda row: self._on_run_row(run_id, row),
            lambda _e: None,
            owner=self,
        )

    def _on_run_row(self, run_id: str, row: dict[str, Any] | None) -> None:
        self._run_outbox[run_id] = row.get("outbox") if row else None
        if run_id == self._run_id:
            self.watcher.set_url(self._run_outbox[run_id])

    def _on_engine_started(self, run_id: str, pid: int) -> None:
        self.statusBar().showMessage(f"engine pid {pid} working on {run_id}")
        if self._run_id != run_id:
            self.select_run(run_id)

    # -- actions ----------------------------------------------------------------------------

    def demo_launcher(self, config: DemoConfig | None = None) -> DemoLauncher:
        """The demo's launcher (and its outbox), made on first use."""
        if self.demo is None:
            self.demo = DemoLauncher(self.engine, self.monitor.path, config, self)
            self.demo.outbox_ready.connect(self.watcher.set_url)
            self.demo.demo_failed.connect(self._show_problem)
        elif config is not None:
            self.demo.config = config
        return self.demo

    def start_demo(self, config: DemoConfig | None = None) -> DemoLauncher:
        """Start a demo run (again): a new run id, the same outbox and data directory."""
        if self._engine_busy():
            return self.demo_launcher(config)
        demo = self.demo_launcher(config)
        self._show_problem("")
        demo.start()
        self.statusBar().showMessage("starting the demo agent (and its outbox)…")
        return demo

    def _engine_busy(self) -> bool:
        """One engine at a time: say so and refuse while one runs."""
        if self.engine.running:
            QMessageBox.information(
                self, "steplog", "An engine is already running; stop it or let it finish first."
            )
        return self.engine.running

    def start_run(self, spec: LaunchSpec) -> None:
        if self._engine_busy():
            return
        try:
            self.engine.start(spec)
        except OSError as exc:
            self._show_problem(f"the engine did not start: {exc}")

    def new_run(self) -> None:
        outbox = (
            self.demo.outbox.url if self.demo is not None and self.demo.outbox is not None else None
        )
        from steplog_gui.views.new_run_dialog import NewRunDialog

        dialog = NewRunDialog(self, outbox=outbox, settings=self.settings)
        if dialog.exec():
            self.start_spec(dialog.spec(self.monitor.path))

    def start_spec(self, spec: LaunchSpec) -> None:
        """Start a run; a demo agent without an outbox URL gets the demo outbox (started if need
        be)."""
        if spec.agent in DEMO_AGENTS and not spec.outbox:
            if self._engine_busy():
                return
            self.demo_launcher().resume(spec, None)
            return
        self.start_run(spec)

    def resume_selected(self) -> None:
        run = self.monitor.run(self._run_id) if self._run_id else None
        if run is None:
            return
        self.launch_run(run.run_id, run.agent)

    def launch_run(self, run_id: str, agent: str) -> None:
        """Start an engine on an existing run (resumed, retried or just forked) and show it."""
        if self._engine_busy():
            return
        recorded = self._run_outbox.get(run_id)
        if run_id not in self._run_outbox:  # a run just forked: one small read of its row
            row = _read_run_row(self.monitor.path, run_id)
            recorded = row.get("outbox") if row else None
        spec = LaunchSpec(
            agent=agent,
            run_id=run_id,
            db=self.monitor.path,
            outbox=recorded,
            pace=DEMO_PACE if agent in DEMO_AGENTS else 0.0,
            python=self.settings.interpreter_for(agent),
        )  # the one its agent was started with
        if agent in DEMO_AGENTS:
            # The demo's own helper: bring its outbox back rather than let the run fail on a dead
            # URL.
            self.statusBar().showMessage(
                f"resuming {run_id}: starting the demo outbox if it is not running…"
            )
            self.demo_launcher().resume(spec, recorded)
            return
        if recorded:
            self._resume_when_reachable(spec, recorded)
        else:
            self.start_run(spec)

    def _resume_when_reachable(self, spec: LaunchSpec, url: str) -> None:
        """Relaunch only if the run's outbox answers: a run must not fail because a helper is
        down."""

        def probe() -> None:
            from steplog.outbox import fetch_ledger

            fetch_ledger(url, timeout=2.0)

        def refused(_exc: BaseException) -> None:
            self._show_problem(
                f"{spec.run_id} posts to the outbox at {url}, which is not answering: start it "
                "(steplog outbox --port N), then Resume run again. Nothing was launched."
            )

        jobs.submit(probe, lambda _ok: self.start_run(spec), refused, owner=self)

    def prune_selected(self) -> None:
        """Offer to prune the selected runs, saying first what it frees (``prune_action``)."""
        run_ids = [i.data(RUN_ID_ROLE) for i in self.runs_view.selectionModel().selectedRows()]
        if run_ids and not self.pruner.busy:
            self.pruner.estimate(run_ids)

    def open_compare(self, config: DemoConfig | None = None) -> CompareWindow:
        """Compare mode (its own window): start a comparison unless one is shown already."""
        if self.compare is None:
            from steplog_gui.compare.window import CompareWindow

            self.compare = CompareWindow(
                self.monitor, self.demo_launcher(), engine_env=self._engine_env
            )
            self.compare.closed.connect(self._compare_closed)
            self.compare.start(config)
        self.act_compare.setChecked(True)
        self.compare.show()
        self.compare.raise_()
        return self.compare

    def _compare_toggled(self, on: bool) -> None:
        if on:
            self.open_compare()
        elif self.compare is not None:
            self.compare.close()

    def _compare_closed(self) -> None:
        if self.compare is not None:
            self.compare.deleteLater()
        self.compare = None
        self.act_compare.setChecked(False)

    def kill_now(self) -> None:
        if not self.kill_switch.kill_now():
            self.statusBar().showMessage("no engine is running")

    def _auto_kill_toggled(self) -> None:
        self.settings.auto_kill_seconds = self.auto_seconds.value()
        on = self.auto_kill.isChecked()
        self.kill_switch.set_auto_kill(self.auto_seconds.value() if on else 0.0)

    def open_log(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Open a steplog log",
            str(self.monitor.path.parent),
            FILE_FILTER,
        )
        if path:
            self.switch_log(Path(path))

    def switch_log(self, path: LogLocation) -> None:
        self._run_id = None
        self.watcher.set_url(None)
        self.monitor.switch_to(path)
        self.approvals.set_location(path)
        self.setWindowTitle(f"steplog monitor — {path}")
        self.statusBar().showMessage(_ready_text(path))
        self.settings.add_recent(f"{path}")
        self._rebuild_recent()

    def about(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("steplog")
        except PackageNotFoundError:
            v = "development"
        QMessageBox.about(self, "About steplog", about_text(v, self.monitor.path))

    def _update_actions(self) -> None:
        running = self.engine.running
        run = self.monitor.run(self._run_id) if self._run_id else None
        engine_run = self.engine.spec.run_id if self.engine.spec else None
        # Kill now acts on the run shown: with another run selected it would kill out of sight.
        ours = running and engine_run == self._run_id
        elsewhere = run.engine_elsewhere if run is not None and not ours else None
        self.act_kill.setEnabled(ours)
        self.act_kill.setToolTip(
            f"SIGKILL the engine of {engine_run} (its whole process group), then relaunch it"
            if ours
            else _remote_why(run.run_id, elsewhere)
            if run is not None and elsewhere
            else f"the engine works on {engine_run}: select that run to kill it"
            if running
            else "no engine is running"
        )
        self.auto_kill.setEnabled(elsewhere is None)
        self.auto_kill.setToolTip(
            _remote_why(run.run_id, elsewhere)
            if run is not None and elsewhere
            else "kill the engine this monitor started every N seconds (it relaunches each time)"
        )
        armed = self.kill_switch.window_armed
        self.act_kill_window.setEnabled(running and not armed)
        self.act_kill_window.setText(
            "Armed: kills at the next effect" if armed else "Kill at next act→record window"
        )
        self.act_stop.setEnabled(running)
        self.act_resume.setEnabled(
            not running
            and run is not None
            and run.status
            in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.GAVE_UP)
        )
        self.act_demo.setEnabled(not running)
        if self.auto_kill.isChecked() and not self.kill_switch.auto_kill_seconds:
            self.auto_kill.setChecked(False)  # the switch stopped it: the engine or its run ended

    def set_theme(self, name: str) -> None:
        """View → Theme: System / Light / Dark, remembered."""
        self.settings.theme = name
        theme.choose(name)
        self.theme_actions[name].setChecked(True)
        self._apply_palette(theme.current())

    def _show_problem(self, text: str) -> None:
        self.banner.show_problem(text)

    def _apply_palette(self, pal: theme.Palette) -> None:
        if self.compare is not None:
            self.compare.apply_palette(pal)
        if self.views_ready:
            self.timeline.apply_palette(pal)
        if self.charts_ready:
            self.charts.apply_palette(pal)
        # The strip colours its figures from its own palette, which the application's new one
        # reaches only once this event is handled: shown again after that, or "Duplicates: 0"
        # kept the old theme's text colour (black on the dark theme's grey).
        QTimer.singleShot(0, lambda: self.verdict.show_verdict(self.judge.verdict))

    # -- closing ----------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        policy = self.close_policy
        if self.engine.running and policy is None:
            box = QMessageBox(
                QMessageBox.Icon.Question,
                "An engine is running",
                "An engine is still working on a run. What should happen to it?",
                parent=self,
            )
            leave = box.addButton("Leave it running", QMessageBox.ButtonRole.AcceptRole)
            stop = box.addButton("Stop it", QMessageBox.ButtonRole.DestructiveRole)
            box.addButton(QMessageBox.StandardButton.Cancel)
            box.exec()
            clicked = box.clickedButton()
            policy = "leave" if clicked is leave else "stop" if clicked is stop else None
            if policy is None:
                event.ignore()
                return
        self.shutdown(stop_engine=policy != "leave")
        event.accept()

    def shutdown(self, *, stop_engine: bool = True) -> None:
        """Save settings and let go of everything: the engine (stopped or left running), outbox,
        tail."""
        self.settings.geometry = self.saveGeometry()
        self.settings.window_state = self.saveState()
        self.settings.sync()
        if self.compare is not None:  # its engines are demo engines: stopped whatever the policy
            self.compare.shutdown()
            self.compare.hide()
        self.kill_switch.stop()
        if stop_engine:
            self.engine.terminate_now()
            if self.demo is not None:
                self.demo.stop_outbox()
        else:
            engine_pid = self.engine.pid if self.engine.running else None
            self.engine.detach()
            if self.demo is not None and self.demo.outbox is not None:
                if engine_pid is None:
                    self.demo.stop_outbox()  # nothing left to serve
                else:  # the outbox serves the engine left running, then goes with it
                    from steplog.control.procs import spawn_stop_after

                    spawn_stop_after(engine_pid, self.demo.outbox.pid)
        self.watcher.stop()
        self.monitor.stop()
        jobs.wait_idle(3000)
