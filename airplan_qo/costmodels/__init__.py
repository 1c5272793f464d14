"""Cost models of the planner: one module per model (see each module's docstring)."""
