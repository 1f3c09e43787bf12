"""The step timeline: one bar per step execution, lanes per engine incarnation, kill marks."""
