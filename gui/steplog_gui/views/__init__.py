"""Widgets, dialogs and Qt item models of the monitor: each gets its model or feed in its
constructor and subscribes to it; none reads the log itself."""
