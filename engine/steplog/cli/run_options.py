"""The options of ``steplog run`` (and the engine options ``retry``, ``fork`` and ``submit`` share),
declared once and without click.

``commands`` builds its click options from these declarations; ``quick`` reads a plain ``steplog
run`` command line with the same ones, so a relaunched engine reaches its first step without
importing click and building every command (issue 29). Order matters: it is the order of
``steplog run --help``.
"""

from __future__ import annotations

from typing import Any, Literal

Kind = Literal["text", "int", "float", "flag", "choice", "log", "dir", "model"]
"""How an option's value is read: as text, a whole number, a number, present or not, one of
``choices``, a log location (``--db``), a folder that need not exist (``--workdir``), a model name
(checked as ``llm.check_model`` checks it)."""


class Option:
    """One ``--flag`` of the command line: how it is read, and what its help says. A plain class,
    not a ``NamedTuple``: building that class costs a relaunch ~0.3 ms."""

    __slots__ = (
        "choices",
        "default",
        "dest",
        "flag",
        "help",
        "kind",
        "limit",
        "metavar",
        "multiple",
        "show_default",
    )

    def __init__(
        self,
        flag: str,
        dest: str,
        kind: Kind = "text",
        *,
        default: Any = None,
        help: str | None = None,
        metavar: str | None = None,
        multiple: bool = False,
        show_default: bool = False,
        choices: tuple[str, ...] = (),
        limit: str | None = None,
    ) -> None:
        self.flag = flag
        """The option as typed: ``--max-steps``."""
        self.dest = dest
        """The keyword the command function receives: ``max_steps``."""
        self.kind = kind
        self.default = default
        self.help = help
        self.metavar = metavar
        self.multiple = multiple
        """Repeatable; the command receives a tuple, in the order given."""
        self.show_default = show_default
        self.choices = choices
        self.limit = limit
        """The ``Budget`` field the option sets: its value is checked while parsing, as
        ``Budget`` checks the field (``policies.limit_problem``)."""

    def __repr__(self) -> str:
        return f"Option({self.flag!r}, {self.dest!r}, {self.kind!r})"


DB = Option(
    "--db",
    "db",
    "log",
    help="The log: a SQLite file or a postgresql://USER@HOST:PORT/DBNAME URL (default: "
    "$STEPLOG_DB, else steplog.db in the user data directory).",
)
WORKDIR = Option(
    "--workdir",
    "workdir",
    "dir",
    help="Where the agent's file effects go (default: runs/RUN_ID beside the log).",
)
OUTBOX = Option(
    "--outbox", "outbox", help="Base URL of the messages service built-in agents post to."
)
PARAM = Option(
    "--param",
    "params",
    multiple=True,
    default=(),
    metavar="KEY=VALUE",
    help="An agent parameter (repeatable).",
)
TAG = Option(
    "--tag",
    "tags",
    multiple=True,
    default=(),
    metavar="KEY=VALUE",
    help="A tag of the new run, to find it by (`steplog runs --tag`) and group costs by "
    "(repeatable).",
)

RUN_OPTIONS = (
    Option(
        "--run-id",
        "run_id",
        help="Start this run, or resume it if it exists and is not finished.",
    ),
    DB,
    WORKDIR,
    OUTBOX,
    PARAM,
    TAG,
    Option(
        "--killed-at",
        "killed_at",
        "float",
        metavar="UNIX_TIME",
        help="When you killed this run's previous engine: recorded with the takeover, so the kill "
        "and its resume latency read the same everywhere (Kill now and killtest pass it).",
    ),
)
"""``steplog run AGENT``'s own options; the engine options follow them."""

ENGINE_OPTIONS = (
    Option(
        "--pace",
        "pace",
        "float",
        default=0.0,
        show_default=True,
        help="Seconds of simulated thinking added to each model call.",
    ),
    Option("--max-steps", "max_steps", "int", limit="max_steps"),
    Option("--max-tokens", "max_tokens", "int", limit="max_tokens"),
    Option("--max-seconds", "max_seconds", "float", limit="max_seconds"),
    Option("--max-cost", "max_cost", "float", limit="max_cost_usd"),
    Option(
        "--max-retries",
        "max_retries",
        "int",
        limit="max_retries",
        help="Retries of all steps together.",
    ),
    Option(
        "--model",
        "model",
        "model",
        help="Chat model: 'offline' (default), a model name at --base-url, or anthropic:MODEL.",
    ),
    Option(
        "--base-url",
        "base_url",
        help="The model's endpoint (default: $OPENAI_BASE_URL or OpenAI; for anthropic:MODEL, "
        "$ANTHROPIC_BASE_URL or Anthropic).",
    ),
    Option(
        "--lease-seconds",
        "lease_seconds",
        "float",
        help="How long a silent engine keeps the run (default 15).",
    ),
    Option(
        "--sync",
        "synchronous",
        "choice",
        default="full",
        show_default=True,
        choices=("full", "normal"),
        help="full: a checkpoint survives power loss; normal: survives crashes only, faster.",
    ),
    Option(
        "--exit-when-waiting",
        "exit_when_waiting",
        "flag",
        default=False,
        help="When the run waits for a signal, let it go and exit 6 instead of waiting "
        "(batch use).",
    ),
)
"""The options of every command that drives an engine (run, retry, fork, submit)."""


__all__ = [
    "DB",
    "ENGINE_OPTIONS",
    "OUTBOX",
    "PARAM",
    "RUN_OPTIONS",
    "TAG",
    "WORKDIR",
    "Kind",
    "Option",
]
