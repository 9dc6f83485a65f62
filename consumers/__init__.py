"""Consumers: the trainers, their update rules and the module validator."""
