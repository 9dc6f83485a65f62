"""Group assembly for CA-GRPO: joins samples.generated with samples.evaluated and emits groups.scored; in memory only.

Rules:
- samples.evaluated does not carry the generation log-probabilities nor the policy version, so
  each result is joined by sample_id with its samples.generated event (policy version from that
  event's envelope). A result whose generated sample has not arrived yet waits for it.
- A group is keyed by (module_id, policy_version, turn) and expects the coder's `group_size`
  results; repair answers (turn > 0) thus form groups of their own (producers/coder.py).
  It closes when all have arrived, or `group_deadline_s` after its first result: then it is
  scored as `partial` when it holds at least `min_group_results` results, else dropped
  (counted under `partial_group_too_small`).
- Held-out and probe samples (split "heldout" or "probe") are evaluation only: ignored, counted under `heldout`.
- Duplicates (at-least-once delivery) are ignored by sample_id; a result for a group that
  already closed is counted under `late_result` and ignored.
- A sample that cannot be trained on (no token ids, log-probabilities that do not match the
  tokens one for one, or no sampling temperature > 0) is still scored but left out of the
  training batch (`untrainable`). A group whose advantages are all 0 is scored, marked not
  `informative` and trains nothing (`zero_variance_groups`).
- A generated sample with no result after 4 deadlines is forgotten (`evaluation_missing`); a
  result whose generated sample never came is dropped after one deadline (`generated_missing`).
Deadlines advance only when the caller passes `now` (each event, or the service's timer). State
is lost if the process dies: those groups are still in the log, for replay.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Sequence

import msgspec

from kernelzero.config import TrainerConfig
from kernelzero.consumers.ca_grpo import GateWindow, SampleOutcome, describe_rule, score_group
from kernelzero.schemas import Event, GroupScored, ModuleProposed, SampleEvaluated, SampleGenerated, make_event
from kernelzero.schemas.messages import TrainingSample

_CLOSED_MEMORY = 100_000  # closed group keys remembered to recognise late results


class Generated(msgspec.Struct, kw_only=True):
    sample: SampleGenerated
    policy_version: int
    arrived: float


class OpenGroup(msgspec.Struct, kw_only=True):
    expected: int
    first_at: float
    results: dict[str, SampleEvaluated] = {}
    last_event_id: str = ""


class ClosedGroup(msgspec.Struct, kw_only=True):
    """A group the assembler closed: its groups.scored event (a GroupScored payload) and what the Coder trains on."""

    event: Event  # groups.scored
    training: list[TrainingSample]  # the kept, trainable samples; empty when the group is not informative


GroupKey = tuple[str, int, int]  # module_id, policy version, turn


class GroupAssembler:
    """Feed it samples.generated and samples.evaluated events; it returns the groups that closed."""

    def __init__(self, config: TrainerConfig, *, current_version: int = 0, producer: str = "trainer") -> None:
        self.config = config
        self.current_version = current_version  # the trainer's policy version; the service advances it
        self.producer = producer
        self.window = GateWindow()
        self.dropped: Counter[str] = Counter()
        self._generated: dict[str, Generated] = {}
        self._waiting: dict[str, tuple[Event, float]] = {}  # results whose generated sample is missing
        self._open: dict[GroupKey, OpenGroup] = {}
        self._closed: OrderedDict[GroupKey, None] = OrderedDict()

    def open_groups(self) -> int:
        return len(self._open)

    def add(self, event: Event, now: float) -> list[ClosedGroup]:
        if isinstance(event.payload, (SampleGenerated, SampleEvaluated)) and event.payload.split != "train":
            self.dropped["heldout"] += 1  # evaluation only: never trained on
            return self.expire(now)
        if isinstance(event.payload, SampleGenerated):
            return self.add_generated(event, now)
        if isinstance(event.payload, SampleEvaluated):
            return self.add_evaluated(event, now)
        return []

    def add_generated(self, event: Event, now: float) -> list[ClosedGroup]:
        sample: SampleGenerated = event.payload
        if sample.sample_id in self._generated:
            self.dropped["duplicate"] += 1
            return self.expire(now)
        version = event.envelope.policy_version or 0
        self._generated[sample.sample_id] = Generated(sample=sample, policy_version=version, arrived=now)
        waiting = self._waiting.pop(sample.sample_id, None)
        scored = self._place(*waiting) if waiting else []
        return scored + self.expire(now)

    def add_evaluated(self, event: Event, now: float) -> list[ClosedGroup]:
        result: SampleEvaluated = event.payload
        if result.sample_id in self._generated:
            scored = self._place(event, now)
        else:
            self._waiting.setdefault(result.sample_id, (event, now))
            scored = []
        return scored + self.expire(now)

    def _place(self, event: Event, now: float) -> list[ClosedGroup]:
        result: SampleEvaluated = event.payload
        generated = self._generated[result.sample_id]
        key = (result.module_id, generated.policy_version, generated.sample.turn)
        if key in self._closed:
            self.dropped["late_result"] += 1
            return []
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = OpenGroup(expected=max(1, generated.sample.group_size), first_at=now)
        if result.sample_id in group.results:
            self.dropped["duplicate"] += 1
            return []
        group.results[result.sample_id] = result
        group.last_event_id = event.event_id
        if len(group.results) >= group.expected:
            return [self._close(key, partial=False)]
        return []

    def expire(self, now: float) -> list[ClosedGroup]:
        """Close the groups whose deadline passed and forget joins that can no longer complete."""
        deadline = self.config.group_deadline_s
        scored: list[ClosedGroup] = []
        for key in [k for k, g in self._open.items() if now - g.first_at >= deadline]:
            if len(self._open[key].results) >= self.config.min_group_results:
                scored.append(self._close(key, partial=True))
            else:
                self.dropped["partial_group_too_small"] += 1
                self._forget(key)
        for sample_id in [s for s, (_, at) in self._waiting.items() if now - at >= deadline]:
            self.dropped["generated_missing"] += 1
            del self._waiting[sample_id]
        for sample_id in [s for s, g in self._generated.items() if now - g.arrived >= 4 * deadline]:
            self.dropped["evaluation_missing"] += 1
            del self._generated[sample_id]
        return scored

    def _forget(self, key: GroupKey) -> OpenGroup:
        group = self._open.pop(key)
        for sample_id in group.results:
            self._generated.pop(sample_id, None)
        self._closed[key] = None
        while len(self._closed) > _CLOSED_MEMORY:
            self._closed.popitem(last=False)
        return group

    def _close(self, key: GroupKey, *, partial: bool) -> ClosedGroup:
        generated = {sid: self._generated[sid] for sid in self._open[key].results}
        group = self._forget(key)
        module_id, version, turn = key
        results = list(group.results.values())
        outcomes = [
            SampleOutcome(sample_id=r.sample_id, verdict=r.verdict, speedup=r.speedup, policy_version=version)
            for r in results
        ]
        result = score_group(outcomes, self.current_version, self.config, self.window)
        self.window = result.window
        self.dropped["stale_dropped"] += result.stale_dropped
        self.dropped["uncharged"] += result.uncharged
        payload = GroupScored(
            module_id=module_id, policy_version=version, samples=result.samples, pass_rate=result.pass_rate,
            gate_open=result.gate_open, partial=partial, rule=describe_rule(self.config), turn=turn,
            informative=result.informative,
        )
        event = make_event(
            payload, correlation_id=module_id, producer=self.producer, causation_id=group.last_event_id,
            policy_version=version,
        )
        if not result.informative:
            self.dropped["zero_variance_groups"] += 1
            return ClosedGroup(event=event, training=[])
        return ClosedGroup(event=event, training=self._training_rows(result.samples, generated, version))

    def _training_rows(self, scored: Sequence, generated: dict[str, Generated], version: int) -> list[TrainingSample]:
        rows = []
        for s in scored:
            if s.weight <= 0.0:
                continue
            sample = generated[s.sample_id].sample
            if not trainable(sample):
                self.dropped["untrainable"] += 1
                continue
            rows.append(TrainingSample(
                sample_id=s.sample_id, prompt_token_ids=sample.prompt_token_ids, token_ids=sample.token_ids,
                logprobs=sample.logprobs, advantage=s.advantage, reward=s.reward, weight=s.weight,
                policy_version=version, temperature=sample.temperature,
            ))
        return rows


def trainable(sample: SampleGenerated | ModuleProposed) -> bool:
    """Whether a generated sample carries what the policy update needs (prompt, tokens, log-probs, a temperature)."""
    return (bool(sample.token_ids) and bool(sample.prompt_token_ids) and len(sample.logprobs) == len(sample.token_ids)
            and sample.temperature > 0)
