"""The runtime: an agent run as a consumer of its own log.

``agent`` (the decorator and agent specs), ``run`` and ``arun`` (the ``Run`` handle a step body
sees, sync and async), ``effects`` (files, HTTP and merges done idempotently), ``params``,
``redact`` and ``engine`` (one engine process: take the lease, replay, run, record). It writes
through ``steplog.log`` only; it never reads another run.
"""
