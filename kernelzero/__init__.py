"""KernelZero: the foundation (configuration, the event log, the stage host, the supervisor, the sandbox) with the kit in kernelzero.kit, the stages in kernelzero.{producers,consumers,gpu_workers,analytics} and the application in kernelzero.app."""

__version__ = "0.1.0"
