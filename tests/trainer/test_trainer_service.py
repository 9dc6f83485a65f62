"""The trainer service on the embedded log: groups.scored, alternating Coder and Proposer steps, policy.updated."""

import uuid

import pytest

from kernelzero.config import Config, TrainerConfig
from kernelzero.consumers.policy_update import PolicyLearner
from kernelzero.consumers.trainer_service import Alternation, run
from kernelzero.kit.models import build_random_model, load_model, weights_sha256
from kernelzero.log import open_log
from kernelzero.schemas import (
    GroupScored, ModuleAccepted, ModuleProposed, PolicyUpdated, SampleEvaluated, SampleGenerated, decode, make_event,
)
from kernelzero.stage import publish


def test_alternation_takes_turns():
    turns = Alternation(coder_steps=2, proposer_steps=1)
    seen = []
    for _ in range(6):
        seen.append(turns.role)
        turns.advance()
    assert seen == ["coder", "coder", "proposer", "coder", "coder", "proposer"]
    only_coder = Alternation(coder_steps=1, proposer_steps=0)
    only_coder.advance()
    assert only_coder.role == "coder"


def module_events(module, verdicts):
    events = [
        make_event(ModuleProposed(module_id=module, source="src", apis=["torch.relu"], prompt_hash="p",
                                  prompt_token_ids=[1, 2], token_ids=[7, 8, 9], logprobs=[-6.0] * 3),
                   correlation_id=module, producer="proposer", policy_version=0),
        make_event(ModuleAccepted(module_id=module, source="src", apis=["torch.relu"], fingerprint=module),
                   correlation_id=module, producer="validator"),
    ]
    for i, verdict in enumerate(verdicts):
        sample_id = f"{module}-{i}"
        events.append(make_event(
            SampleGenerated(sample_id=sample_id, module_id=module, backend="triton", source="x", problem_source="src",
                            group_size=len(verdicts), group_index=i, prompt_token_ids=[1, 2, 3],
                            token_ids=[10 + i, 11, 12, 13], logprobs=[-6.0] * 4),
            correlation_id=module, producer="coder", policy_version=0))
        events.append(make_event(
            SampleEvaluated(sample_id=sample_id, module_id=module, backend="triton", verdict=verdict, reason=""),
            correlation_id=module, producer="evaluator"))
    return events


async def read_topic(log, topic):
    out = []
    async with await log.consumer(f"reader-{uuid.uuid4().hex[:6]}", [topic]) as consumer:
        while records := await consumer.poll(1000, 0.5):
            out += [decode(r.value) for r in records]
    return out


@pytest.mark.anyio
async def test_service_scores_groups_and_alternates_steps(tmp_path):
    model_dir = build_random_model(tmp_path / "tiny", seed=0)
    config = Config()
    config.log.url = f"embedded:{tmp_path / 'log.sqlite'}"
    config.trainer = TrainerConfig(groups_per_step=2, proposer_batch=2, lora_rank=4, checkpoint_dir=str(tmp_path / "ckpt"),
                                   coder_steps=1, proposer_steps=1, device="cpu")
    learners = tuple(
        PolicyLearner(load_model(str(model_dir.resolve()), device="cpu")[0], config.trainer, role=role)
        for role in ("coder", "proposer")
    )
    log = await open_log(config.log.url)
    await publish(log, module_events("m1", ["correct", "incorrect", "rejected", "correct"])
                  + module_events("m2", ["incorrect", "compile_error", "correct", "timeout"]))
    stats, stage = await run(config, idle_exit_s=1.0, learners=learners)
    assert stats.dead_lettered == 0
    groups = [e.payload for e in await read_topic(log, "groups.scored")]
    updates = [e.payload for e in await read_topic(log, "policy.updated")]
    await log.close()
    assert sorted(g.module_id for g in groups) == ["m1", "m2"] and all(isinstance(g, GroupScored) for g in groups)
    assert {g.module_id: g.pass_rate for g in groups} == {"m1": 0.5, "m2": 0.25}
    assert [(u.role, u.version) for u in updates] == [("coder", 1), ("proposer", 1)]
    for update in updates:
        assert isinstance(update, PolicyUpdated) and update.sha256 == weights_sha256(update.uri)
        assert update.metrics["samples"] == (8.0 if update.role == "coder" else 2.0)
    assert stage.groups.current_version == 1
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["coder", "proposer"]


@pytest.mark.anyio
async def test_no_version_without_signal_and_a_waiting_learner_yields_its_turn(tmp_path, tiny_model_dir):
    from kernelzero.consumers.trainer_service import TrainerStage

    config = Config()
    config.trainer = TrainerConfig(groups_per_step=1, proposer_batch=4, lora_rank=4, device="cpu",
                                   checkpoint_dir=str(tmp_path / "ckpt"), coder_steps=1, proposer_steps=1)
    learners = [PolicyLearner(load_model(str(tiny_model_dir), device="cpu")[0], config.trainer, role=role)
                for role in ("coder", "proposer")]
    stage = TrainerStage(config, *learners)

    async def feed(events):
        out = []
        for event in events:
            out += await stage.handle(event)
        return [e.payload for e in out if isinstance(e.payload, PolicyUpdated)]

    assert await feed(module_events("m1", ["incorrect", "compile_error"])) == [], "a group without variance trains nothing"
    assert [(u.role, u.version) for u in await feed(module_events("m2", ["correct", "incorrect"]))] == [("coder", 1)]
    # the Proposer is on turn with 3 of its 4 proposals scored: it yields to the Coder's full batch
    assert [(u.role, u.version) for u in await feed(module_events("m3", ["correct", "timeout"]))] == [("coder", 2)]
    assert stage.counts["yielded_turns"] == 1
    assert [(u.role, u.version) for u in await feed(module_events("m4", ["rejected", "correct"]))] == [
        ("proposer", 1), ("coder", 3)]
    assert stage.metrics[-1]["skipped_zero_variance_groups"] == 1.0 and stage.metrics[-1]["yielded_turns"] == 1.0
    assert stage.groups.dropped["zero_variance_groups"] == 1


@pytest.mark.anyio
async def test_a_group_past_its_deadline_closes_at_the_head_of_the_log_without_another_event(tmp_path):
    model_dir = build_random_model(tmp_path / "tiny", seed=0)
    config = Config()
    config.log.url = f"embedded:{tmp_path / 'log.sqlite'}"
    config.trainer = TrainerConfig(group_deadline_s=1.0, groups_per_step=5, lora_rank=4, device="cpu",
                                   checkpoint_dir=str(tmp_path / "ckpt"), coder_steps=1, proposer_steps=0)
    coder = PolicyLearner(load_model(str(model_dir.resolve()), device="cpu")[0], config.trainer, role="coder")
    events = module_events("m1", ["correct", "incorrect", "correct", "timeout"])
    log = await open_log(config.log.url)
    await publish(log, events[:-4])  # two of the four results: the group can only close by its deadline
    stats, _ = await run(config, idle_exit_s=3.0, learners=(coder, None))
    [group] = [e.payload for e in await read_topic(log, "groups.scored")]
    await log.close()
    assert group.module_id == "m1" and group.partial and len(group.samples) == 2
    assert stats.produced == 1, "published by the host, with the offsets of the poll that found the head"
