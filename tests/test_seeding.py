"""kernelzero/kit/seeding.py: the CPU's draws after seed_generators are torch.manual_seed's, and no stack is formatted for devices not started."""

from __future__ import annotations

import traceback

import torch

from kernelzero.kit.seeding import seed_generators


def test_the_cpu_draws_after_seeding_are_those_after_torch_manual_seed():
    torch.manual_seed(1234)
    expected = torch.rand(64), torch.randn(8, 8), torch.randint(0, 1000, (16,))
    torch.manual_seed(99)  # another state first, so a no-op seeding would fail
    torch.rand(5)
    seed_generators(1234)
    got = torch.rand(64), torch.randn(8, 8), torch.randint(0, 1000, (16,))
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


def test_seeding_formats_no_stack(monkeypatch):
    formatted = []
    real = traceback.format_stack
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: formatted.append(1) or real(*a, **k))
    seed_generators(7)
    assert not formatted
    if not torch.cuda.is_initialized():  # what it saves: torch.manual_seed queues a seeding with a stack per device
        torch.manual_seed(7)
        assert formatted
