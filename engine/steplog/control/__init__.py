"""Run control: commands to runs that are not ours (cancel, retry, fork, signal), the queue of
submitted runs, the workers that take them, and the engine processes they start and stop."""
