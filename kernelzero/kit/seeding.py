"""torch's random generators seeded as torch.manual_seed seeds them, for code that draws on the CPU, or on CUDA after CUDA started; it does NOT seed a device not yet initialised (a first draw on CUDA afterwards gets CUDA's default seed).

torch.manual_seed also queues a seeding, with a formatted stack, for every device type not initialised:
on a machine without a GPU that was a quarter of the distillation's time (a 2-core CPU, 2,000 modules, four
seedings a module), and under cProfile on an H100 0.49 s of a 6.9 s evaluation job, two stacks per timed
call, for generators nothing here draws from.
"""

from __future__ import annotations

import torch

# bound at import, before any candidate code loads in an evaluator's process (gpu_workers/trial.py)
_cpu_generator, _seed_cuda, _cuda_initialized = torch.random.default_generator, torch.cuda.manual_seed_all, \
    torch.cuda.is_initialized


def seed_generators(seed: int) -> None:
    """Seed the CPU's generator, and CUDA's where CUDA is initialised."""
    _cpu_generator.manual_seed(seed)
    if _cuda_initialized():
        _seed_cuda(seed)
