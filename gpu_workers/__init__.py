"""The evaluator: compile, check and time candidate kernels; a library first, knows nothing of the log."""
