"""Group assembly: the join with samples.generated, complete and partial groups, duplicates, staleness."""

import msgspec
import pytest

from kernelzero.config import TrainerConfig
from kernelzero.consumers.groups import GroupAssembler
from kernelzero.schemas import GroupScored, SampleEvaluated, SampleGenerated, decode, encode, make_event


def generated(i, module="m1", version=3, group_size=4, tokens=(5, 6, 7)):
    payload = SampleGenerated(
        sample_id=f"{module}-s{i}", module_id=module, backend="triton", source="code", problem_source="ref",
        group_size=group_size, group_index=i, prompt_token_ids=[1, 2], token_ids=list(tokens),
        logprobs=[-0.5] * len(tokens), temperature=0.8,
    )
    return make_event(payload, correlation_id=module, producer="coder", policy_version=version)


def evaluated(i, verdict, speedup=None, module="m1"):
    payload = SampleEvaluated(sample_id=f"{module}-s{i}", module_id=module, backend="triton", verdict=verdict,
                              reason="", speedup=speedup, group_size=4)
    return make_event(payload, correlation_id=module, producer="evaluator")


def feed(assembler, events, now=0.0):
    out = []
    for event in events:
        out += assembler.add(decode(encode(event)), now)  # through the wire, as the service sees them
    return out


def test_complete_group_is_scored_and_joined_with_logprobs():
    assembler = GroupAssembler(TrainerConfig(), current_version=3)
    verdicts = [("correct", 2.0), ("correct", 1.0), ("incorrect", None), ("rejected", None)]
    # results may arrive before their generated samples: the join waits
    out = feed(assembler, [evaluated(0, *verdicts[0])] + [generated(i) for i in range(4)])
    assert out == []
    out = feed(assembler, [evaluated(i, *verdicts[i]) for i in range(1, 4)])
    assert len(out) == 1 and assembler.open_groups() == 0
    event = decode(encode(out[0].event))
    payload = event.payload
    assert isinstance(payload, GroupScored)
    assert (payload.module_id, payload.policy_version, payload.partial, payload.pass_rate) == ("m1", 3, False, 0.5)
    assert payload.gate_open and event.envelope.policy_version == 3 and "tau=0.5" in payload.rule
    assert [s.reward for s in payload.samples] == [1.5, 1.0, 0.0, -0.5]
    assert sum(s.advantage for s in payload.samples) == pytest.approx(0.0, abs=1e-9)
    rows = out[0].training
    assert [r.sample_id for r in rows] == [f"m1-s{i}" for i in range(4)]
    assert rows[0].logprobs == [-0.5] * 3 and rows[0].prompt_token_ids == [1, 2] and rows[0].temperature == 0.8
    assert rows[0].policy_version == 3 and rows[0].advantage == payload.samples[0].advantage


def test_partial_group_scored_at_deadline_and_too_small_dropped():
    assembler = GroupAssembler(TrainerConfig(group_deadline_s=10.0))
    feed(assembler, [generated(i) for i in range(4)] + [generated(0, module="m2")], now=0.0)
    feed(assembler, [evaluated(0, "correct", 1.0), evaluated(1, "incorrect")], now=1.0)
    feed(assembler, [evaluated(0, "correct", module="m2")], now=2.0)
    assert assembler.expire(10.5) == []
    out = assembler.expire(11.0)
    assert len(out) == 1 and out[0].event.payload.partial and len(out[0].event.payload.samples) == 2
    assert assembler.expire(12.0) == [] and assembler.dropped["partial_group_too_small"] == 1
    assert feed(assembler, [evaluated(2, "correct")], now=13.0) == []
    assert assembler.dropped["late_result"] == 1


def test_duplicates_are_ignored():
    assembler = GroupAssembler(TrainerConfig())
    feed(assembler, [generated(i, group_size=2) for i in range(2)] + [generated(0, group_size=2)])
    out = feed(assembler, [evaluated(0, "correct"), evaluated(0, "correct"), evaluated(1, "incorrect")])
    assert len(out) == 1 and len(out[0].event.payload.samples) == 2
    assert assembler.dropped["duplicate"] == 2


def test_stale_group_is_scored_but_not_trained_when_dropping():
    assembler = GroupAssembler(TrainerConfig(staleness_k=4), current_version=10)
    feed(assembler, [generated(i, version=2, group_size=2) for i in range(2)])
    out = feed(assembler, [evaluated(0, "correct"), evaluated(1, "incorrect")])
    assert [s.weight for s in out[0].event.payload.samples] == [0.0, 0.0]
    assert out[0].training == [] and assembler.dropped["stale_dropped"] == 2


def test_samples_without_tokens_are_scored_but_untrainable():
    assembler = GroupAssembler(TrainerConfig())
    feed(assembler, [generated(0, group_size=2), generated(1, group_size=2, tokens=())])
    out = feed(assembler, [evaluated(0, "correct"), evaluated(1, "compile_error")])
    assert len(out[0].event.payload.samples) == 2 and [r.sample_id for r in out[0].training] == ["m1-s0"]
    assert assembler.dropped["untrainable"] == 1


def test_results_whose_generated_sample_never_comes_are_forgotten():
    assembler = GroupAssembler(TrainerConfig(group_deadline_s=5.0))
    feed(assembler, [evaluated(0, "correct")], now=0.0)
    assert assembler.expire(5.0) == [] and assembler.dropped["generated_missing"] == 1


def test_repair_answers_form_a_group_of_their_own_turn():
    assembler = GroupAssembler(TrainerConfig())
    first_turn = [generated(i, group_size=3) for i in range(3)]
    repair = make_event(SampleGenerated(
        sample_id="m1-r0", module_id="m1", backend="triton", source="code", problem_source="ref", group_size=2,
        group_index=0, turn=1, prompt_token_ids=[1, 2], token_ids=[5], logprobs=[-0.5], temperature=0.8,
    ), correlation_id="m1", producer="coder", policy_version=3)
    repair2 = make_event(msgspec.structs.replace(repair.payload, sample_id="m1-r1", group_index=1),
                         correlation_id="m1", producer="coder", policy_version=3)
    out = feed(assembler, first_turn + [repair, repair2, evaluated(0, "correct"), evaluated(1, "incorrect")])
    out += feed(assembler, [make_event(SampleEvaluated(sample_id="m1-r0", module_id="m1", backend="triton",
                                                       verdict="correct", reason=""), correlation_id="m1",
                                       producer="evaluator")])
    assert out == [] and assembler.open_groups() == 2, "the repair neither joins nor closes the first-turn group"
    out = feed(assembler, [evaluated(2, "incorrect"), make_event(SampleEvaluated(
        sample_id="m1-r1", module_id="m1", backend="triton", verdict="incorrect", reason=""),
        correlation_id="m1", producer="evaluator")])
    groups = sorted((g.event.payload for g in out), key=lambda g: g.turn)
    assert [(g.turn, len(g.samples), g.pass_rate) for g in groups] == [(0, 3, 1 / 3), (1, 2, 0.5)]
    assert assembler.dropped["late_result"] == 0


def test_a_group_without_variance_is_scored_but_trains_nothing():
    assembler = GroupAssembler(TrainerConfig())
    feed(assembler, [generated(i, group_size=2) for i in range(2)])
    out = feed(assembler, [evaluated(0, "incorrect"), evaluated(1, "compile_error")])
    assert len(out) == 1 and not out[0].event.payload.informative and out[0].training == []
    assert assembler.dropped["zero_variance_groups"] == 1
