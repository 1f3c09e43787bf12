"""The log's schema as an ordered registry of migrations.

Migrations are frozen SQL, applied in order inside one ``BEGIN IMMEDIATE`` transaction, and the
version lives in ``PRAGMA user_version``. The typed read models in ``tables.py`` mirror the
result; a test checks that the two agree column for column.

Why SQL and not ``SQLModel.metadata.create_all``: the engine must resume a killed run in well
under a second, and ``import sqlmodel`` alone costs ~0.6 s, so the write path never imports it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

# "STLG": marks the file as a steplog log so a foreign SQLite file is refused, not modified.
APPLICATION_ID = 0x53544C47

_V1 = """
CREATE TABLE run (
    id                TEXT PRIMARY KEY,
    agent             TEXT NOT NULL,
    model             TEXT,
    params            TEXT NOT NULL DEFAULT '{}',
    status            TEXT NOT NULL DEFAULT 'running'
                      CHECK (status IN ('running', 'succeeded', 'gave_up', 'failed')),
    reason            TEXT,
    result            TEXT,
    workdir           TEXT,
    outbox            TEXT,
    limit_steps       INTEGER,
    limit_tokens      INTEGER,
    limit_seconds     REAL,
    limit_cost_usd    REAL,
    limit_retries     INTEGER,
    limit_recoveries  INTEGER,
    used_steps        INTEGER NOT NULL DEFAULT 0,
    used_tokens       INTEGER NOT NULL DEFAULT 0,
    tokens_estimated  INTEGER NOT NULL DEFAULT 0,
    reserved_tokens   INTEGER NOT NULL DEFAULT 0,
    used_seconds      REAL    NOT NULL DEFAULT 0,
    used_cost_usd     REAL    NOT NULL DEFAULT 0,
    reserved_cost_usd REAL    NOT NULL DEFAULT 0,
    used_retries      INTEGER NOT NULL DEFAULT 0,
    step_executions   INTEGER NOT NULL DEFAULT 0,
    incarnation       INTEGER NOT NULL DEFAULT 0,
    lease_pid         INTEGER,
    lease_host        TEXT,
    lease_boot        TEXT,
    lease_proc_start  REAL,
    lease_expires     REAL,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    finished_at       REAL
);

CREATE TABLE step (
    run_id           TEXT NOT NULL REFERENCES run(id),
    seq              INTEGER NOT NULL,
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'committed', 'failed')),
    phase            TEXT NOT NULL DEFAULT 'started',
    decision         TEXT,
    result           TEXT,
    error            TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    recoveries       INTEGER NOT NULL DEFAULT 0,
    tokens_in        INTEGER NOT NULL DEFAULT 0,
    tokens_out       INTEGER NOT NULL DEFAULT 0,
    tokens_cached    INTEGER NOT NULL DEFAULT 0,
    tokens_estimated INTEGER NOT NULL DEFAULT 0,
    cost_usd         REAL    NOT NULL DEFAULT 0,
    started_at       REAL NOT NULL,
    finished_at      REAL,
    incarnation      INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE effect (
    key           TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES run(id),
    seq           INTEGER NOT NULL,
    idx           INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    target        TEXT NOT NULL,
    idempotent    INTEGER NOT NULL DEFAULT 1,
    status        TEXT NOT NULL CHECK (status IN ('started', 'completed')),
    request_hash  TEXT NOT NULL,
    response      TEXT,
    attempts      INTEGER NOT NULL DEFAULT 1,
    started_at    REAL NOT NULL,
    completed_at  REAL
);
CREATE INDEX effect_by_step ON effect (run_id, seq);

CREATE TABLE event (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    ts          REAL NOT NULL,
    incarnation INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    seq         INTEGER,
    data        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX event_by_run ON event (run_id, id);

-- The event table is append-only: a tailing reader ("since id N") must see every change.
CREATE TRIGGER event_is_append_only_update BEFORE UPDATE ON event
BEGIN SELECT RAISE(ABORT, 'the event table is append-only'); END;
CREATE TRIGGER event_is_append_only_delete BEFORE DELETE ON event
BEGIN SELECT RAISE(ABORT, 'the event table is append-only'); END;
"""

# Run control (cancel, retry, fork, signals). SQLite cannot change a CHECK constraint in place, so
# the run table is rebuilt (the documented 12-step way; foreign keys are off on the log's
# connections, so ``step`` and ``effect`` keep pointing at ``run`` by name).
_V2 = """
CREATE TABLE run_v2 (
    id                TEXT PRIMARY KEY,
    agent             TEXT NOT NULL,
    model             TEXT,
    params            TEXT NOT NULL DEFAULT '{}',
    status            TEXT NOT NULL DEFAULT 'running'
                      CHECK (status IN ('queued', 'running', 'waiting', 'succeeded', 'gave_up', 'failed',
                                        'cancelled')),
    reason            TEXT,
    result            TEXT,
    workdir           TEXT,
    outbox            TEXT,
    limit_steps       INTEGER,
    limit_tokens      INTEGER,
    limit_seconds     REAL,
    limit_cost_usd    REAL,
    limit_retries     INTEGER,
    limit_recoveries  INTEGER,
    used_steps        INTEGER NOT NULL DEFAULT 0,
    used_tokens       INTEGER NOT NULL DEFAULT 0,
    tokens_estimated  INTEGER NOT NULL DEFAULT 0,
    reserved_tokens   INTEGER NOT NULL DEFAULT 0,
    used_seconds      REAL    NOT NULL DEFAULT 0,
    used_cost_usd     REAL    NOT NULL DEFAULT 0,
    reserved_cost_usd REAL    NOT NULL DEFAULT 0,
    used_retries      INTEGER NOT NULL DEFAULT 0,
    step_executions   INTEGER NOT NULL DEFAULT 0,
    incarnation       INTEGER NOT NULL DEFAULT 0,
    lease_pid         INTEGER,
    lease_host        TEXT,
    lease_boot        TEXT,
    lease_proc_start  REAL,
    lease_expires     REAL,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    finished_at       REAL,
    parent_run_id     TEXT,
    parent_step       INTEGER,
    waiting_for       TEXT,
    waiting_since     REAL,
    cancel_requested  TEXT
);
INSERT INTO run_v2 (id, agent, model, params, status, reason, result, workdir, outbox, limit_steps,
    limit_tokens, limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, used_steps, used_tokens,
    tokens_estimated, reserved_tokens, used_seconds, used_cost_usd, reserved_cost_usd, used_retries,
    step_executions, incarnation, lease_pid, lease_host, lease_boot, lease_proc_start, lease_expires,
    created_at, updated_at, finished_at)
SELECT id, agent, model, params, status, reason, result, workdir, outbox, limit_steps,
    limit_tokens, limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, used_steps, used_tokens,
    tokens_estimated, reserved_tokens, used_seconds, used_cost_usd, reserved_cost_usd, used_retries,
    step_executions, incarnation, lease_pid, lease_host, lease_boot, lease_proc_start, lease_expires,
    created_at, updated_at, finished_at
FROM run;
DROP TABLE run;
ALTER TABLE run_v2 RENAME TO run;

-- Named signals for ``run.wait_for``: sent by anyone, consumed by exactly one wait step, in the
-- same transaction that records that step (``consumed_seq``). ``key`` makes a sender's retry
-- harmless: the same key for the same run is one signal.
CREATE TABLE signal (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT NOT NULL,
    name          TEXT NOT NULL,
    data          TEXT NOT NULL DEFAULT 'null',
    key           TEXT,
    sent_at       REAL NOT NULL,
    consumed_seq  INTEGER,
    consumed_at   REAL,
    UNIQUE (run_id, key)
);
CREATE INDEX signal_pending ON signal (run_id, name, id) WHERE consumed_seq IS NULL;
"""

# Pruning (``steplog prune``, ``steplog.log.prune``): the one way rows of a run leave the log. A
# ``pruned`` row is the audit record of one pruned run; while it is 'pruning' (inside the pruning
# transaction only) it is also the permit that lets that one run's events and run row be deleted.
# The trigger refuses a permit for a run that is not finished, so a live run can never lose a row.
_V3 = """
CREATE TABLE pruned (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    agent       TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  REAL NOT NULL,
    finished_at REAL,
    pruned_at   REAL NOT NULL,
    rows        TEXT NOT NULL DEFAULT '{}',
    archive     TEXT,
    state       TEXT NOT NULL DEFAULT 'pruning' CHECK (state IN ('pruning', 'done'))
);
CREATE INDEX pruned_by_run ON pruned (run_id, state);

CREATE TRIGGER pruned_only_finished_runs BEFORE INSERT ON pruned
WHEN NEW.state <> 'pruning'
  OR coalesce((SELECT status FROM run WHERE id = NEW.run_id), '') NOT IN ('succeeded', 'gave_up', 'failed', 'cancelled')
BEGIN SELECT RAISE(ABORT, 'only a finished run can be pruned'); END;
CREATE TRIGGER pruned_is_a_record BEFORE UPDATE ON pruned
WHEN NOT (OLD.state = 'pruning' AND NEW.state = 'done' AND NEW.run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a pruned record is never changed'); END;
CREATE TRIGGER pruned_is_kept BEFORE DELETE ON pruned
BEGIN SELECT RAISE(ABORT, 'a pruned record is never deleted'); END;

DROP TRIGGER event_is_append_only_delete;
CREATE TRIGGER event_is_append_only_delete BEFORE DELETE ON event
WHEN NOT EXISTS (SELECT 1 FROM pruned WHERE run_id = OLD.run_id AND state = 'pruning')
BEGIN SELECT RAISE(ABORT, 'the event table is append-only (only steplog prune removes a finished run''s events)'); END;
CREATE TRIGGER run_leaves_only_by_prune BEFORE DELETE ON run
WHEN NOT EXISTS (SELECT 1 FROM pruned WHERE run_id = OLD.id AND state = 'pruning')
BEGIN SELECT RAISE(ABORT, 'a run is removed only by steplog prune'); END;
"""

# The queue (``steplog submit`` / ``steplog worker``). ``launch``: the engine options a worker
# starts the run with that the row does not already hold (JSON: pace, base_url, sync,
# lease_seconds). ``worker_*``: the worker that has the run (host and pid, with boot id and
# process start time so a dead or reused pid is recognised, as for the lease), from its claim
# until its engine hands the run back; kept on a run that ended, as who ran it last.
# ``waiting_until``: the deadline of the wait a ``waiting`` run is in (NULL: none), so a worker
# takes up a run whose wait timed out with no engine, as it does one whose signal came.
_V4 = """
ALTER TABLE run ADD COLUMN launch TEXT;
ALTER TABLE run ADD COLUMN waiting_until REAL;
ALTER TABLE run ADD COLUMN worker_host TEXT;
ALTER TABLE run ADD COLUMN worker_pid INTEGER;
ALTER TABLE run ADD COLUMN worker_boot TEXT;
ALTER TABLE run ADD COLUMN worker_proc_start REAL;
ALTER TABLE run ADD COLUMN worker_claimed_at REAL;
CREATE INDEX run_by_status ON run (status, created_at);
"""

# A lease's expiry in the holder's boot clock too (``steplog.log.lease``): on its own host a wall
# clock stepped back no longer stretches the lease of a holder that stopped answering.
_V5 = """
ALTER TABLE run ADD COLUMN lease_expires_boot REAL;
"""

# A step is one row in one B-tree: ``step`` is kept in its primary key's order (``WITHOUT
# ROWID``), so a step written is one insert, not a table row plus an index entry of its key (the
# run id repeated), and a run's steps are read in order from adjacent pages. The table is rebuilt
# (the documented 12-step way, as in v2); its columns and their order are unchanged.
_V6 = """
CREATE TABLE step_v6 (
    run_id           TEXT NOT NULL REFERENCES run(id),
    seq              INTEGER NOT NULL,
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'committed', 'failed')),
    phase            TEXT NOT NULL DEFAULT 'started',
    decision         TEXT,
    result           TEXT,
    error            TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    recoveries       INTEGER NOT NULL DEFAULT 0,
    tokens_in        INTEGER NOT NULL DEFAULT 0,
    tokens_out       INTEGER NOT NULL DEFAULT 0,
    tokens_cached    INTEGER NOT NULL DEFAULT 0,
    tokens_estimated INTEGER NOT NULL DEFAULT 0,
    cost_usd         REAL    NOT NULL DEFAULT 0,
    started_at       REAL NOT NULL,
    finished_at      REAL,
    incarnation      INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
INSERT INTO step_v6 SELECT * FROM step ORDER BY run_id, seq;
DROP TABLE step;
ALTER TABLE step_v6 RENAME TO step;
"""

# Streams (``run.emit``, a model's tokens as they come): entries numbered ``pos`` from 0, strictly
# increasing per run in commit order (one writer per engine assigns them, fenced like every
# write). ``seq``/``attempt``: the step attempt that wrote it (NULL: none); whether that attempt was
# cut short is read from the step's row, never stored (a kill writes nothing). Append-only, as
# ``event`` is, but for ``steplog prune``.
_V7 = """
CREATE TABLE stream (
    run_id      TEXT NOT NULL,
    pos         INTEGER NOT NULL,
    name        TEXT NOT NULL,
    seq         INTEGER,
    attempt     INTEGER,
    incarnation INTEGER NOT NULL,
    ts          REAL NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (run_id, pos)
) WITHOUT ROWID;
CREATE INDEX stream_by_step ON stream (run_id, seq, pos);
CREATE TRIGGER stream_is_append_only_update BEFORE UPDATE ON stream
BEGIN SELECT RAISE(ABORT, 'the stream table is append-only'); END;
CREATE TRIGGER stream_is_append_only_delete BEFORE DELETE ON stream
WHEN NOT EXISTS (SELECT 1 FROM pruned WHERE run_id = OLD.run_id AND state = 'pruning')
BEGIN SELECT RAISE(ABORT, 'the stream table is append-only (only steplog prune removes a finished run''s entries)'); END;
"""

# Reserved while issues 31-33 are built side by side (filled in before any release writes them):
# v8 code versions (issue 31), v9 time and messages (issue 33), v10 finding runs: tags and the
# runs list's index (issue 32).
#
# v10, finding runs (``steplog runs`` filters, the monitor's lazy runs list, ``cost --by tag:K``):
# a run's tags are rows of ``run_tag``, one per key, not a JSON column on ``run``. A tag filter
# is then a seek in ``run_tag_by_value`` (key, value) -> run ids, on SQLite and PostgreSQL alike,
# where a JSON column would be parsed for every run (100,000 runs: every row, every query); a
# grouping by one key reads that key's rows only. Tags travel with the run as one more of its
# tables (``RUN_TABLES``: export, import, prune). ``run_by_created`` gives the newest page (ties
# broken by id, the order every runs list uses) without sorting the table; ``run_by_agent`` the
# newest of one agent. ``run_by_status`` (v4) serves a status filter.
#
# Code versions (``docs/versions.md``): ``run.version`` is the version of the code that last
# worked on the run (its start's is in ``run_created``, each change a ``version_changed`` event);
# ``run.blocked`` is the last refusal of incompatible code (JSON ``{"reason", "at_step"}``),
# cleared when compatible code resumes the run; ``step.args_hash`` is the hash of the step's
# name, kind and arguments that a resume compares its code's calls with (NULL: a step recorded
# before schema 8, checked by name and kind only).
_V8 = """
ALTER TABLE run ADD COLUMN version TEXT;
ALTER TABLE run ADD COLUMN blocked TEXT;
ALTER TABLE step ADD COLUMN args_hash TEXT;
"""

_V9 = """
-- Time and messages (issue 33). ``waiting_topic``: the topic a ``waiting`` run's ``run.recv``
-- waits on (NULL: it waits for a signal, ``waiting_for``, or sleeps until ``waiting_until``).
ALTER TABLE run ADD COLUMN waiting_topic TEXT;
-- Messages for ``run.recv``: sent by anyone (``steplog send``), consumed by exactly one recv step
-- in the same transaction that records that step (``consumed_seq``), oldest first per topic.
-- ``key`` makes a sender's retry harmless: the same key for the same run is one message.
CREATE TABLE message (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT NOT NULL,
    topic         TEXT NOT NULL,
    data          TEXT NOT NULL DEFAULT 'null',
    key           TEXT,
    sent_at       REAL NOT NULL,
    consumed_seq  INTEGER,
    consumed_at   REAL,
    UNIQUE (run_id, key)
);
CREATE INDEX message_pending ON message (run_id, topic, id) WHERE consumed_seq IS NULL;
-- A run's events (``run.set_event``): the latest value of each key, written by the step that set
-- it (``seq``), in that step's transaction.
CREATE TABLE run_event (
    run_id  TEXT NOT NULL,
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    set_at  REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);
"""

_V10 = """
CREATE TABLE run_tag (
    run_id TEXT NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_tag_by_value ON run_tag (key, value, run_id);
CREATE INDEX run_by_created ON run (created_at, id);
CREATE INDEX run_by_agent ON run (agent, created_at);
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10)
"""``MIGRATIONS[i]`` takes a log from ``user_version`` i to i + 1. Append only; never edit."""

SCHEMA_VERSION = len(MIGRATIONS)

RUN_TABLES: tuple[tuple[str, str], ...] = (
    ("run", "id"),
    ("step", "run_id"),
    ("effect", "run_id"),
    ("event", "run_id"),
    ("signal", "run_id"),
    ("stream", "run_id"),
    ("message", "run_id"),
    ("run_event", "run_id"),
    ("run_tag", "run_id"),
)
"""Every table holding rows of one run, as (table, column naming the run), the run row first.

The one list that ``steplog prune`` (deletes all of a run's rows, in reverse), ``export`` and
``import`` (copy them, in this order) go by: a new per-run table is added here and nowhere else.
``pruned`` is not in it: it is the log's memory of runs that are gone."""


def split_statements(script: str) -> Iterator[str]:
    """Split a migration into statements (``executescript`` would commit our transaction);
    whole-line ``--`` comments are dropped."""
    buf = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            yield buf.strip()
            buf = ""
    if buf.strip():
        yield buf.strip()
