"""The interpreter, its memory planner and graph partitioning."""
