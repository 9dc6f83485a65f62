"""Input sets derived in place exactly as the reference got them and refilled into the same buffers; inputs checked unchanged by a keyed checksum."""

from __future__ import annotations

import types

import pytest
import torch

from kernelzero.gpu_workers import compare, input_sets
from kernelzero.gpu_workers.input_sets import BrokenBuffer, InputSets

CPU = torch.device("cpu")


def sets(timing: int = 2) -> InputSets:
    problem = types.SimpleNamespace(get_inputs=lambda: [torch.randn(40, 50), 3, torch.randint(0, 9, (64,))])
    return InputSets(problem, seed=0, device=CPU, natives=3, timing=timing)


def same(a: list, b: list) -> bool:
    """Bit for bit (NaN payloads and -0.0 included), Python values by equality."""
    return all(torch.equal(x.view(torch.int32 if x.element_size() == 4 else torch.int64),
                           y.view(torch.int32 if y.element_size() == 4 else torch.int64))
               if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_every_set_refilled_in_place_is_what_the_reference_got() -> None:
    s = sets()
    buffers = s.values(0)
    addresses = [b.data_ptr() for b in buffers if isinstance(b, torch.Tensor)]
    assert s.names == ["seed0", "seed1", "seed2", "permuted", "scaled_up", "scaled_down", "negated", "timing0", "timing1"]
    for k in range(len(s.names)):
        s.refill(buffers, k)
        assert same(buffers, s.values(k))
    assert [b.data_ptr() for b in buffers if isinstance(b, torch.Tensor)] == addresses  # same buffers, new contents


def test_derived_sets_keep_what_fingerprints_read_and_change_the_rest() -> None:
    s = sets()
    native, shuffled = s.values(0)[0].view(-1), s.values(3)[0].view(-1)
    assert not torch.equal(native, shuffled)
    assert (native.sum(), native.min(), native.max(), native[0], native[-1]) == \
        (shuffled.sum(), shuffled.min(), shuffled.max(), shuffled[0], shuffled[-1])
    assert torch.equal(s.values(4)[0], s.values(1)[0] * 1e5) and torch.equal(s.values(4)[2], s.values(1)[2])


def test_the_shuffle_stays_small_on_huge_inputs(monkeypatch) -> None:
    monkeypatch.setattr(input_sets, "SHUFFLE_MAX", 16)
    s = sets()
    native, shuffled = s.values(0)[0].view(-1), s.values(3)[0].view(-1)
    assert 0 < int((native != shuffled).sum()) <= 16
    buffers = s.values(0)
    s.refill(buffers, 3)
    assert same(buffers, s.values(3))


def test_a_buffer_the_candidate_broke_cannot_be_refilled() -> None:
    s = sets()
    buffers = s.values(0)
    buffers[0].untyped_storage().resize_(0)
    with pytest.raises(BrokenBuffer) as broken:
        s.refill(buffers, 1)
    assert broken.value.index == 0


def test_the_random_state_does_not_tell_which_set_was_drawn() -> None:
    s = sets()
    states = []
    for k in range(len(s.names)):
        s.values(k)
        states.append((torch.initial_seed(), torch.get_rng_state()))
    assert all(seed == states[0][0] and torch.equal(state, states[0][1]) for seed, state in states)


@pytest.mark.parametrize("chunk", [compare.CHUNK, 7])
def test_a_changed_input_is_found_wherever_it_is(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(compare, "CHUNK", chunk)
    weights = compare.position_weights(min(chunk, 4000), key=12345, device=CPU)
    x = torch.randn(40, 100)
    before = compare.fingerprint(x, weights)
    assert compare.fingerprint(x.clone(), weights) == before
    for where in (0, 1999, 3999):  # one element anywhere, in every chunk
        changed = x.clone()
        changed.view(-1)[where] = torch.nextafter(changed.view(-1)[where], torch.tensor(9.0))  # its lowest bit
        assert compare.fingerprint(changed, weights) != before
    other = 5 + min(chunk, 3000)  # in the next chunk where chunks are small: the same weight, another factor
    swapped = x.clone()
    swapped.view(-1)[[5, other]] = swapped.view(-1)[[other, 5]]
    assert compare.fingerprint(swapped, weights) != before
    assert compare.fingerprint(x.view(100, 40), weights) != before  # the same bits in another form
    assert compare.fingerprint(x, compare.position_weights(min(chunk, 4000), key=54321, device=CPU)) != before


def test_the_checksum_reads_every_kind_of_input_and_refuses_a_shrunk_one() -> None:
    weights = compare.position_weights(64, key=7, device=CPU)
    for t in (torch.randn(8, 8).half(), torch.randint(0, 5, (64,)), torch.rand(64) > 0.5,
              torch.randn(4, 4, dtype=torch.cfloat)):
        flipped = t.clone()
        flipped.view(-1)[3] = ~flipped.view(-1)[3] if t.dtype == torch.bool else flipped.view(-1)[3] + 1
        assert compare.fingerprint(t.clone(), weights) == compare.fingerprint(t, weights) != \
            compare.fingerprint(flipped, weights)
    shrunk = torch.randn(64)
    shrunk.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError):
        compare.fingerprint(shrunk, weights)
