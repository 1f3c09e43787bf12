import sys

from steplog_gui.startup_trace import mark

mark("main")

from steplog_gui.app import main  # noqa: E402 (after the mark: its imports are measured)

sys.exit(main())
