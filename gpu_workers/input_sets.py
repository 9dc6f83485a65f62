"""The input sets of one evaluation: drawn on the device from seeds, derived (scaled, a chunk shuffled) and refilled into the candidate's buffers in place; it does NOT check or judge anything.

Trials come first (the problem's own draws, then a shuffled, two scaled and a negated set: other
input distributions), then the sets timing rotates through. Every set is drawn again whenever it
is needed, so the inputs live in the candidate's buffers and, while a refill copies, in one draw.
Derived sets are made in place (on a copy where the values are the reference's, since a problem's
get_inputs may return tensors it keeps). After every draw the generator is seeded the same way,
so the candidate cannot tell which set it got from torch's random state.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelzero.gpu_workers import compare
from kernelzero.gpu_workers.blame import problem_call, short
from kernelzero.kit.problems import INPUT_SCALES
from kernelzero.kit.seeding import seed_generators

SHUFFLE_MAX = 1 << 22  # elements shuffled at most: enough to change any output, its permutation stays small
TRIAL_SEED, TIMING_SEED, SHUFFLE_SEED = 1000, 5000, 7  # offsets from the configured seed


class BrokenBuffer(Exception):
    """The candidate changed an input buffer itself (its storage, shape or strides): it cannot be refilled."""

    def __init__(self, index: int, detail: str):
        super().__init__(detail)
        self.index, self.detail = index, detail


class InputSets:
    """Named input sets: `seed{i}` (natives), `permuted`, the INPUT_SCALES (kernelzero/kit/problems.py), then `timing{i}`."""

    def __init__(self, problem: Any, seed: int, device: torch.device, natives: int, timing: int):
        self.problem, self.seed, self.device = problem, seed, device
        self.natives = natives
        self.names = [f"seed{i}" for i in range(natives)] + ["permuted", *INPUT_SCALES] + [f"timing{i}" for i in range(timing)]
        self.trials = natives + 1 + len(INPUT_SCALES)  # sets before the timing ones

    def draw(self, seed: int) -> list[Any]:
        """get_inputs on the device from `seed` (problem code); the generator left as after every other draw."""
        seed_generators(seed)
        with torch.device(self.device):
            values = list(problem_call(self.problem.get_inputs))
        seed_generators(self.seed)
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def _recipe(self, s: int) -> tuple[int, str]:
        """The seed set `s` is drawn from and how it is derived ("" for none, "permuted", a INPUT_SCALES name)."""
        name = self.names[s]
        if name.startswith("seed"):
            return self.seed + TRIAL_SEED + int(name[4:]), ""
        if name.startswith("timing"):
            return self.seed + TIMING_SEED + int(name[6:]), ""
        return self._recipe(0 if name == "permuted" else 1)[0], name

    def values(self, s: int) -> list[Any]:
        """Set `s` in tensors of its own (what the reference gets; a derived set on a copy of the draw)."""
        seed, variant = self._recipe(s)
        values = self.draw(seed)
        if variant:
            values = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
            gen = self._shuffle_generator()
            for v in values:
                _derive(v, variant, gen)
        return values

    def refill(self, buffers: list[Any], s: int) -> None:
        """Copy set `s` into the candidate's buffers: same objects and addresses, new contents."""
        seed, variant = self._recipe(s)
        drawn = self.draw(seed)
        for i, (buf, src) in enumerate(zip(buffers, drawn)):
            if isinstance(buf, torch.Tensor):
                if not compare.fits_storage(buf):  # writing there would reach past the storage it left
                    raise BrokenBuffer(i, "the input buffer's storage was shrunk")
                try:
                    buf.copy_(src)
                except RuntimeError as exc:  # the candidate changed the buffer itself (its shape, its strides)
                    raise BrokenBuffer(i, short(exc)) from None
        del drawn  # before deriving: one copy of the inputs at a time
        if not variant:  # the timing sets: no generator made for nothing on every timed call
            return
        gen = self._shuffle_generator()
        for i, buf in enumerate(buffers):
            try:
                _derive(buf, variant, gen)
            except RuntimeError as exc:  # a buffer made non-contiguous where the draw is not
                raise BrokenBuffer(i, short(exc)) from None

    def _shuffle_generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(self.seed + SHUFFLE_SEED)


def _derive(v: Any, variant: str, gen: torch.Generator) -> None:
    """Make one value of a derived set in place: a chunk of a tensor shuffled, or a float tensor scaled."""
    if not isinstance(v, torch.Tensor):
        return
    if variant == "permuted":
        if (shuffle := _shuffle(v, gen)) is not None:
            start, order = shuffle
            flat = v.view(-1)
            flat[start:start + order.numel()] = flat[start:start + order.numel()][order]  # indexing copies: no overlap
    elif variant and v.is_floating_point():
        v.mul_(INPUT_SCALES[variant])


def _shuffle(t: torch.Tensor, gen: torch.Generator) -> tuple[int, torch.Tensor] | None:
    """Where the shuffled set's chunk starts and its order: inside (n/2, n-1), so sum, min, max, first and last elements keep.

    Drawn from `gen` for every contiguous tensor in order, so the reference's copy and the buffers agree.
    """
    n = t.numel()
    if n < 8 or not t.is_contiguous():
        return None
    length = min(SHUFFLE_MAX, max(2, n // 4))
    room = n - 1 - n // 2 - length  # the chunk ends before the last element
    start = n // 2 + int(torch.randint(0, max(1, room + 1), (1,), generator=gen, device=t.device))
    return start, torch.randperm(length, generator=gen, device=t.device)
