"""A user's own agents, as they would live in their project (imported as ``my_agent_pkg.shop``)."""
