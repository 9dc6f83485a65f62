"""KernelZero: CLI, configuration and the event log; the stages live in kernelzero.{producers,consumers,gpu_workers,analytics}."""

__version__ = "0.1.0"
