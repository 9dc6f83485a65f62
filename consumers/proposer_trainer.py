"""The Proposer's reward: validity, the Coder's measured pass rate against the frontier target, novelty; in memory only.

Rule, per proposed module (knobs: [analytics] target, band_low, band_high; [trainer]
novelty_bonus, scale_std, eps):
- modules.rejected -> reward 0 (invalid modules earn nothing), scored at once;
- modules.accepted, then the Coder's first-turn groups.scored for it -> reward
      frontier(p) + novelty_bonus * novel,
  p the group's pass rate (repair groups say how well the Coder repairs, not how hard the module is); frontier(p) = the frontier weight's closeness to the target
  (kernelzero/kit/frontier_band.py: 1 - |p - target| / the half-width on p's side inside [band_low, band_high], 0 outside); novel = 1 when
  the module's fingerprint was not accepted before (first accepted wins), else 0. A valid
  module thus always beats an invalid one when it is novel, and ties with it otherwise.
- Only modules that carry token ids, prompt token ids, matching log-probabilities and their
  sampling temperature (an LLM Proposer) become training samples; synthetic modules are scored
  for the record only.
- Advantages: modules that share a prompt_hash form a group; proposals alone with their prompt
  in a batch are pooled into one group. Group-relative as in CA-GRPO (ca_grpo.group_advantages).
A groups.scored seen before its modules.proposed waits for it (across topics order is not
guaranteed). It does not persist state: a restart forgets modules still waiting for results.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import msgspec

from kernelzero.config import AnalyticsConfig, TrainerConfig
from kernelzero.consumers.ca_grpo import group_advantages
from kernelzero.consumers.groups import trainable as is_trainable
from kernelzero.kit.frontier_band import closeness
from kernelzero.schemas import Event, GroupScored, ModuleAccepted, ModuleProposed, ModuleRejected
from kernelzero.schemas.messages import TrainingSample


def frontier_score(pass_rate: float, config: AnalyticsConfig) -> float:
    """The frontier weight's own closeness to the target (kit/frontier_band.py), with [analytics]' band."""
    return closeness(pass_rate, config.band_low, config.target, config.band_high)


class ScoredProposal(msgspec.Struct, frozen=True, kw_only=True):
    module_id: str
    reward: float
    valid: bool
    novel: bool = False
    pass_rate: float | None = None
    trainable: bool = False


class _Proposal(msgspec.Struct, kw_only=True):
    payload: ModuleProposed | None = None
    policy_version: int = 0
    accepted: bool = False
    novel: bool = False
    rejected: bool = False
    pass_rate: float | None = None
    scored: bool = False


class ProposerRewards:
    """Feed it the Proposer's and the Coder's events; `take_batch` hands out training samples."""

    def __init__(self, analytics: AnalyticsConfig, trainer: TrainerConfig) -> None:
        self.analytics = analytics
        self.trainer = trainer
        self._proposals: dict[str, _Proposal] = defaultdict(_Proposal)
        self._fingerprints: set[str] = set()
        self._ready: list[tuple[_Proposal, ScoredProposal]] = []

    def add(self, event: Event) -> list[ScoredProposal]:
        payload = event.payload
        if isinstance(payload, ModuleProposed):
            entry = self._proposals[payload.module_id]
            if entry.payload is None:
                entry.payload, entry.policy_version = payload, event.envelope.policy_version or 0
            return self._score(payload.module_id)
        if isinstance(payload, ModuleRejected):
            self._proposals[payload.module_id].rejected = True
            return self._score(payload.module_id)
        if isinstance(payload, ModuleAccepted):
            entry = self._proposals[payload.module_id]
            if not entry.accepted:
                entry.accepted, entry.novel = True, payload.fingerprint not in self._fingerprints
                self._fingerprints.add(payload.fingerprint)
            return self._score(payload.module_id)
        if isinstance(payload, GroupScored) and payload.turn == 0:
            entry = self._proposals[payload.module_id]
            if entry.pass_rate is None:
                entry.pass_rate = payload.pass_rate
            return self._score(payload.module_id)
        return []

    def _score(self, module_id: str) -> list[ScoredProposal]:
        entry = self._proposals[module_id]
        if entry.scored or entry.payload is None or not (entry.rejected or entry.pass_rate is not None):
            return []
        if not entry.rejected and not entry.accepted:
            return []  # a pass rate arrived before the validator's verdict
        trainable = is_trainable(entry.payload)
        if entry.rejected:
            result = ScoredProposal(module_id=module_id, reward=0.0, valid=False, trainable=trainable)
        else:
            reward = frontier_score(entry.pass_rate, self.analytics) + self.trainer.novelty_bonus * entry.novel
            result = ScoredProposal(module_id=module_id, reward=reward, valid=True, novel=entry.novel,
                                    pass_rate=entry.pass_rate, trainable=trainable)
        entry.scored = True
        if trainable:
            self._ready.append((entry, result))
        else:
            entry.payload = None  # keep only the "already scored" mark
        return [result]

    def ready(self) -> int:
        return len(self._ready)

    def take_batch(self, size: int) -> list[TrainingSample]:
        """Up to `size` scored, trainable proposals with group-relative advantages (oldest first)."""
        taken, self._ready = self._ready[:size], self._ready[size:]
        samples = training_samples(taken, self.trainer)
        for entry, _ in taken:
            entry.payload = None  # keep only the "already scored" mark
        return samples


def training_samples(scored: Sequence[tuple[_Proposal, ScoredProposal]], config: TrainerConfig) -> list[TrainingSample]:
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for index, (entry, _) in enumerate(scored):
        by_prompt[entry.payload.prompt_hash].append(index)
    groups = [members for members in by_prompt.values() if len(members) > 1]
    pooled = [members[0] for members in by_prompt.values() if len(members) == 1]
    if pooled:
        groups.append(pooled)
    advantages: dict[int, float] = {}
    for members in groups:
        values = group_advantages([scored[i][1].reward for i in members], config.scale_std, config.eps)
        advantages.update(zip(members, values))
    return [
        TrainingSample(
            sample_id=entry.payload.module_id, prompt_token_ids=entry.payload.prompt_token_ids,
            token_ids=entry.payload.token_ids, logprobs=entry.payload.logprobs, advantage=advantages[i],
            reward=result.reward, policy_version=entry.policy_version, temperature=entry.payload.temperature,
        )
        for i, (entry, result) in enumerate(scored)
    ]
