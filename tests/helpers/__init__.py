"""Helpers shared by test modules (no test module imports another, none imports a conftest).

``tests/`` is on pytest's ``pythonpath`` (pyproject), so a test writes ``from helpers.engine
import Engine``. Fixtures live in the ``conftest.py`` files and are built from these helpers:

- ``paths``: where the repository, the tests and the test agents file are.
- ``engine``: ``Engine``, a ``steplog`` command run as a real process group; ``kill_group`` and
  ``storm`` (SIGKILL at random moments, relaunch until the run ends).
- ``logs``: reading a log the way a test checks it (``query_log``, ``log_bytes``) and building
  one (``synthetic_events``).
- ``synthetic_log``: a big log written fast with the rows a real engine writes (``write_log``).
- ``witness``: the far side the test agents' effects go to (``witness_args``, ``applied``).
- ``waiting``: ``wait_until`` a condition holds, or fail saying what never happened.
- ``gui``: the real main window offscreen, modal dialogs answered, two run states compared.
- ``layout_probe`` and ``screenshots``: scripts that open the window in a process of their own.
- ``openai_server``: a real OpenAI-compatible HTTP server on loopback (the fake model server).
- ``anthropic_server``: a real Anthropic Messages API server on loopback, streaming included.
- ``postgres_server``: a real PostgreSQL server for the session (never a mock).
- ``docs_pages``: the README and ``docs/`` as a reader meets them: their blocks, run as printed.
- ``agents_for_tests``: the agents the tests run by file path (``AGENTS``), as a user would.
"""
