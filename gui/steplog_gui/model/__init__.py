"""The monitor's state, free of Qt (an import-linter contract holds it): what a run looks like on
screen (``run_state``), the bars of its timeline (``timeline_data``), the two lanes of the compare
mode (``compare_state``), and a run loaded in bulk from the log's read API (``bulk_load``)."""
