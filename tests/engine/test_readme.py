"""The README's agent example runs as written (and so does resuming it)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from conftest import Engine
from steplog.outbox import start_outbox

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_agent_example_runs_as_written(engine: Engine, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "@steplog.agent" in b)
    agent_file = tmp_path / "triage.py"
    agent_file.write_text(example)
    with start_outbox(tmp_path / "outbox.db") as outbox:
        args = ["run", f"{agent_file}:triage", "--run-id", "readme", "--db", str(engine.db),
                "--param", "source=demo", "--outbox", outbox.url]
        done = engine.run(*args)
        assert done.returncode == 0, done.stderr
        assert 'succeeded: {"answered": 2}' in done.stdout
        assert [d.body["ticket_id"] for d in outbox.ledger().deliveries] == ["T-1", "T-2"]
        again = engine.run(*args)  # a finished run is reported, nothing is sent again
        assert again.returncode == 0 and len(outbox.ledger().attempts) == 2
    workdir = Path(engine.status("readme")["workdir"])
    assert sorted(p.name for p in (workdir / "replies").iterdir()) == ["T-1.md", "T-2.md"]
    conn = sqlite3.connect(workdir / "helpdesk.db")
    assert conn.execute("SELECT id, status FROM tickets ORDER BY id").fetchall() == [("T-1", "answered"), ("T-2", "answered")]
    conn.close()
