"""``python -m steplog.outbox``: ``steplog outbox`` under another name. The command is declared
once, in the command line; this entry point only gives it the name it was started by."""

from steplog.cli.commands import outbox

if __name__ == "__main__":
    outbox(prog_name="python -m steplog.outbox")
