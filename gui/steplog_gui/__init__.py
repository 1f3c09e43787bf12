"""steplog_gui: the desktop monitor (PySide6 + pyqtgraph). Start it with ``python -m steplog_gui``.

The Qt-free parts (``repository``, ``run_state``, ``timeline_data``) can be
used without a display; everything else needs a ``QApplication``.
"""
