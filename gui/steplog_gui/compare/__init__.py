"""The compare mode: the naive agent and the steplog agent side by side, killed together."""
