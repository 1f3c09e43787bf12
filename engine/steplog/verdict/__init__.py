"""The verdict: was this run killed, and did it come through without redone or duplicated work?

``kills`` reads deaths and the cause of every re-run from the log; ``evidence`` reads the outbox's
deliveries; ``outputs`` compares files and rows with an uninterrupted reference; ``judge`` puts
them together into the one verdict the command line, the kill test and the monitor show."""
