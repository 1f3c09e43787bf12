"""The processes the monitor starts: the engine of a run (launch, Kill now, relaunch), the demo's
outbox and engine, and the Python interpreter they run under."""
