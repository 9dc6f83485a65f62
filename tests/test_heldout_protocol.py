"""The held-out protocol (kernelzero/kit/heldout_protocol.py): which combinations are held out, and intervals that are right at 0 and 1."""

from __future__ import annotations

import random

import pytest

from kernelzero.kit.heldout_protocol import held_out_combinations, paired_difference, wilson
from kernelzero.schemas import api_set_key

APIS = [f"torch.op{i}" for i in range(8)]


def corpus(seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    rows = [[api] for api in APIS for _ in range(5)]
    rows += [rng.sample(APIS, rng.choice((2, 3))) for _ in range(600)]
    rows += [["torch.rare", "torch.op0"]] * 3  # a pair whose rare member has no other rows
    return rows


def test_held_out_combinations_are_never_trained_on_and_their_members_are():
    rows = corpus()
    held = held_out_combinations(rows, share=0.2, seed=1, min_member_rows=20)
    train = [r for r in rows if api_set_key(r) not in held]
    assert held and all(len(key.split(" + ")) >= 2 for key in held)
    assert not {api_set_key(r) for r in train} & held  # a combination in training is never held out
    for key in held:
        for api in key.split(" + "):
            assert sum(api in r for r in train) >= 20, (key, api)
    assert "torch.op0 + torch.rare" not in held  # its rare member would have no training rows left


def test_the_split_is_a_function_of_the_rows_and_the_seed():
    assert held_out_combinations(corpus(), 0.2, seed=1) == held_out_combinations(list(reversed(corpus())), 0.2, seed=1)
    assert held_out_combinations(corpus(), 0.2, seed=1) != held_out_combinations(corpus(), 0.2, seed=2)


def test_no_single_api_is_held_out_even_when_asked_for_everything():
    held = held_out_combinations(corpus(), share=1.0, seed=0, min_member_rows=1)
    assert all(" + " in key for key in held)


@pytest.mark.parametrize("n", [1, 24, 64, 1000])
def test_wilson_is_right_at_zero_and_one(n):
    low, high = wilson(0.0, n)
    assert low == 0.0 and 0.0 < high < 1.0  # 0 of n never claims certainty
    low, high = wilson(1.0, n)
    assert 0.0 < low < 1.0 and high == 1.0
    assert wilson(0.0, n)[1] > wilson(0.0, 10 * n)[1]  # more modules, a tighter bound


def test_wilson_matches_the_textbook_and_knows_nothing_without_modules():
    assert wilson(0.5, 100) == pytest.approx((0.4038, 0.5962), abs=1e-4)
    assert wilson(0.0, 24)[1] == pytest.approx(0.1380, abs=1e-4)
    assert wilson(0.3, 0) == (0.0, 1.0)


def test_paired_difference_excludes_zero_only_when_the_arms_differ():
    rng = random.Random(0)
    control = [rng.random() for _ in range(64)]
    same = paired_difference(control, control)
    assert same == (0.0, 0.0, 0.0)
    better = [min(1.0, c + 0.15 + rng.uniform(-0.1, 0.1)) for c in control]
    mean, low, high = paired_difference(better, control)
    assert 0.0 < low < mean < high
    noise = [min(1.0, max(0.0, c + rng.uniform(-0.2, 0.2))) for c in control]
    _, low, high = paired_difference(noise, control)
    assert low < 0.0 < high
    with pytest.raises(ValueError):
        paired_difference([0.1], [0.1, 0.2])


def test_a_combination_whose_members_appear_nowhere_else_stays_in_training():
    assert held_out_combinations([["a", "b"]] * 50, share=1.0, seed=0, min_member_rows=1) == set()
