"""Built-in agents: ``demo`` (ticket triage), ``flaky`` (retries until the budget says stop),
``naive`` (the demo's task written without steplog's discipline, to fail the kill test)."""
