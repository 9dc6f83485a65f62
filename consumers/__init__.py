"""Consumers: trainers, the module validator, the stage runner and the pipeline."""
