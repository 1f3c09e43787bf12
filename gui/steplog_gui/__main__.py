import sys

from steplog_gui.app import main

sys.exit(main())
