"""One measured cell, inside its own process: the worker that drives a framework plugin through warm-up and timed windows, and the planner of those windows."""
