"""``steplog killtest``: SIGKILL an agent's engine again and again, and judge what survived.

``harness`` runs the reference, the storm and the sweep as real processes; ``report`` and
``junit`` print the result; the PASS/FAIL rules themselves live in ``steplog.verdict`` (shared
with the desktop monitor). Kept import-free so that ``steplog.verdict`` can use ``outputs``.
"""
