"""The Proposer's reward: frontier closeness, validity, novelty, ordering across topics, group advantages."""

import pytest

from kernelzero.config import AnalyticsConfig, TrainerConfig
from kernelzero.consumers.proposer_trainer import ProposerRewards, frontier_score
from kernelzero.schemas import GroupScored, ModuleAccepted, ModuleProposed, ModuleRejected, make_event

BAND = AnalyticsConfig(band_low=0.2, band_high=0.8, target=0.5)


def test_frontier_score_peaks_at_target_and_vanishes_outside_band():
    assert frontier_score(0.5, BAND) == 1.0
    assert frontier_score(0.35, BAND) == pytest.approx(0.5)
    assert frontier_score(0.65, BAND) == pytest.approx(0.5)
    assert frontier_score(0.2, BAND) == 0.0 and frontier_score(0.1, BAND) == 0.0 and frontier_score(1.0, BAND) == 0.0
    skewed = AnalyticsConfig(band_low=0.2, band_high=0.5, target=0.4)
    assert frontier_score(0.3, skewed) == pytest.approx(0.5) and frontier_score(0.45, skewed) == pytest.approx(0.5)


def proposed(module, prompt="p1", tokens=(9, 8)):
    payload = ModuleProposed(module_id=module, source="class Model: ...", apis=["torch.relu"], prompt_hash=prompt,
                             prompt_token_ids=[1, 2, 3], token_ids=list(tokens), logprobs=[-1.0] * len(tokens))
    return make_event(payload, correlation_id=module, producer="proposer", policy_version=2)


def accepted(module, fingerprint):
    return make_event(ModuleAccepted(module_id=module, source="", apis=[], fingerprint=fingerprint),
                      correlation_id=module, producer="validator")


def rejected(module):
    return make_event(ModuleRejected(module_id=module, reason="constant_output"), correlation_id=module,
                      producer="validator")


def scored(module, pass_rate):
    return make_event(GroupScored(module_id=module, policy_version=0, samples=[], pass_rate=pass_rate,
                                  gate_open=False), correlation_id=module, producer="trainer")


def test_rewards_validity_frontier_and_novelty():
    rewards = ProposerRewards(BAND, TrainerConfig(novelty_bonus=0.2))
    out = []
    for event in [proposed("a"), proposed("b"), proposed("c"), proposed("d"),
                  rejected("a"),
                  scored("b", 0.5), accepted("b", "fp1"),  # the pass rate may arrive before the verdict
                  accepted("c", "fp1"), scored("c", 0.35),  # same fingerprint as b: not novel
                  accepted("d", "fp2"), scored("d", 1.0)]:
        out += rewards.add(event)
    by_id = {s.module_id: s for s in out}
    assert by_id["a"].reward == 0.0 and not by_id["a"].valid
    assert by_id["b"].reward == pytest.approx(1.2) and by_id["b"].novel
    assert by_id["c"].reward == pytest.approx(0.5) and not by_id["c"].novel
    assert by_id["d"].reward == pytest.approx(0.2)  # solved always: off the frontier, but valid and novel
    assert rewards.add(scored("b", 0.1)) == [] and rewards.ready() == 4  # scored once only


def test_batch_groups_by_prompt_and_pools_singletons():
    rewards = ProposerRewards(BAND, TrainerConfig(novelty_bonus=0.0))
    events = [proposed("a", "p1"), proposed("b", "p1"), proposed("c", "p2"), proposed("d", "p3"),
              proposed("e", "p4", tokens=())]  # e: no tokens (synthetic): scored, never trained
    events += [accepted(m, m) for m in "abcde"] + [scored("a", 0.5), scored("b", 0.2), scored("c", 0.5),
                                                  scored("d", 0.9), scored("e", 0.5)]
    for event in events:
        rewards.add(event)
    assert rewards.ready() == 4
    batch = rewards.take_batch(8)
    assert [s.sample_id for s in batch] == ["a", "b", "c", "d"] and rewards.ready() == 0
    advantages = {s.sample_id: s.advantage for s in batch}
    # group p1: rewards 1 and 0 -> +-0.5 / (0.5 + eps); the pooled singletons c, d likewise
    assert advantages["a"] == pytest.approx(0.5 / 0.5001) and advantages["b"] == pytest.approx(-0.5 / 0.5001)
    assert advantages["c"] == pytest.approx(0.5 / 0.5001) and advantages["d"] == pytest.approx(-0.5 / 0.5001)
    assert batch[0].prompt_token_ids == [1, 2, 3] and batch[0].policy_version == 2
