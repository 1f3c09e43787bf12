"""The log: the only package that knows SQL, SQLite or PostgreSQL.

Everything a run is lives here as rows: the run, its steps, the idempotency ledger and the
append-only ``event`` table, written in one transaction per state change, each with its event
(``journal.append_event``, the one event writer). Which database a log is on is one object, the
backend (``backend``: ``sqlite`` or ``pg``), chosen once from where the log is (``location``) and
asked, never tested, by everything else. How a log is opened and checked (``db``, ``connection``,
``schema``, ``pgschema``, ``integrity``, ``failures``), who holds a run (``lease``, ``claim``), the
rows run control and the queue write (``runs``, ``queue``), and the read side that the verdict,
the command line and the monitor share (``steps``, ``ledger``, ``logread``, ``reader``,
``history``, ``status``). Retention (``prune``, ``archive``) rewrites rows and so lives here too.
Nothing in this package imports the runtime.
"""
