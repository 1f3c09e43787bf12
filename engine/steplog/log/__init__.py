"""The log: the only package that knows SQL, SQLite or PostgreSQL.

Everything a run is lives here as rows: the run, its steps, the idempotency ledger and the
append-only ``event`` table, written in one transaction per state change (``journal``). Where a
log lives (``location``), how it is opened and checked (``db``, ``schema``, ``pgschema``, ``pg``,
``integrity``), who holds a run (``lease``, ``claim``), and the read side that the verdict, the
command line and the monitor share (``logread``, ``history``, ``status``). Retention (``prune``,
``archive``) rewrites rows and so lives here too. Nothing in this package imports the runtime.
"""
