"""What keeps the monitor's state current: tailers and watchers that read the log (through
``steplog.log.reader``) and the outbox, on timers and the log's file events or commit
announcements, and hand what is new to the model."""
