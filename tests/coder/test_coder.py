"""The Coder end to end on a tiny model: prompt -> generate -> parse -> samples.generated, weight reloads, repair turns."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from kernelzero.config import CoderConfig
from kernelzero.kit.coder_prompts import render_coder_prompt
from kernelzero.kit.templates import prompt_hash
from kernelzero.kit.models import load_model, weights_sha256
from kernelzero.log import open_log
from kernelzero.producers.backend_openai import OpenAIGenerator
from kernelzero.producers.backend_transformers import TransformersGenerator
from kernelzero.producers.coder import CoderStage, sample_events
from kernelzero.producers.policy import PolicyHashMismatch, catch_up
from kernelzero.schemas import (
    DeadLetter, ModuleAccepted, PolicyUpdated, SampleEvaluated, SampleGenerated, decode, encode, make_event,
)
from kernelzero.stage import publish, run_stage
from tests.coder.openai_server import OpenAITestServer, canned_answer
from tests.coder.test_transformers_backend import recomputed_logprobs

pytestmark = pytest.mark.anyio
MODULE = ModuleAccepted(
    module_id="m-1", fingerprint="f", apis=["torch.relu", "torch.sum"], level=2,
    source="import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x).sum(-1)\n",
)
ANSWER = "Sure.\n```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n```\n"
CONFIG = CoderConfig(group_size=3, max_tokens=16, temperature=1.0, target="triton")


def accepted_event(module: ModuleAccepted = MODULE):
    return make_event(module, correlation_id=module.module_id, producer="validator")


async def test_a_group_of_samples_from_a_real_model(tiny_generator):
    stage = CoderStage(tiny_generator, CONFIG)
    trigger = accepted_event()
    events = await stage.sample_group(MODULE, causation_id=trigger.event_id)
    assert len(events) == 3
    prompt = render_coder_prompt(MODULE.source, "triton", style="full")
    for index, event in enumerate(events):
        sample = decode(encode(event)).payload  # what a consumer of the log gets
        assert isinstance(sample, SampleGenerated)
        assert (sample.group_index, sample.group_size, sample.turn) == (index, 3, 0)
        assert sample.source is None and sample.reason == "no_code"  # random weights write no code
        assert sample.problem_source == MODULE.source and sample.apis == MODULE.apis and sample.level == 2
        assert sample.prompt_hash == prompt_hash(prompt) and sample.backend == "triton"
        assert sample.prompt_token_ids == tiny_generator.tokenizer(prompt)["input_ids"]
        assert len(sample.token_ids) == len(sample.logprobs) > 0
        assert sample.logprobs == pytest.approx(recomputed_logprobs(tiny_generator.model, sample), abs=1e-4)
        assert event.envelope.policy_version == 0 and event.envelope.causation_id == trigger.event_id
        assert event.envelope.correlation_id == "m-1"
    assert len({e.payload.sample_id for e in events}) == 3


async def test_code_in_the_answer_becomes_the_sample_source():
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        generator = OpenAIGenerator(server.base_url, "tiny")
        events = await CoderStage(generator, CONFIG).sample_group(MODULE, causation_id="e")
        await generator.close()
    assert all(e.payload.source.startswith("import torch\nclass ModelNew") and e.payload.reason == "" for e in events)
    assert len(server.requests) == 1 and server.requests[0]["n"] == 3


def test_sample_events_for_an_empty_group_is_empty():
    assert sample_events(MODULE, [], prompts=["p"], target="cuda", temperature=1.0, policy_version=0, causation_id="") == []


async def read_all(log, topics):
    """Every event of `topics` now on the log (a fresh reader group)."""
    events = []
    async with await log.consumer(f"reader-{len(topics)}-{anyio.current_time()}", topics) as consumer:
        while records := await consumer.poll(max_records=500, timeout_s=0.5):
            events += [decode(r.value) for r in records]
    return events


async def test_service_samples_groups_and_swaps_weights_between_them(tmp_path, tiny_model_dir, other_model_dir):
    log = await open_log(f"embedded:{tmp_path / 'log.sqlite'}")
    stage = CoderStage(TransformersGenerator(str(tiny_model_dir), device="cpu"), CONFIG)
    good = PolicyUpdated(role="coder", version=1, uri=str(other_model_dir), sha256=weights_sha256(other_model_dir))
    bad = PolicyUpdated(role="coder", version=2, uri=str(tiny_model_dir), sha256="0" * 64)
    trainer_of_proposer = PolicyUpdated(role="proposer", version=5, uri="/nowhere", sha256="x")
    await publish(log, [accepted_event()])
    await run_stage(log, stage, idle_exit_s=1.0, max_records=CONFIG.max_inflight_groups)
    first = await read_all(log, ["samples.generated"])
    assert len(first) == 3 and {e.envelope.policy_version for e in first} == {0}

    # topics are read in no fixed order relative to each other: the update lands before m-2 is published
    await publish(log, [make_event(p, correlation_id="policy", producer="trainer") for p in (trainer_of_proposer, good, bad)])
    stats = await run_stage(log, stage, idle_exit_s=1.0, max_records=CONFIG.max_inflight_groups)
    assert stage.generator.policy_version == 1 and stats.dead_lettered == 1
    await publish(log, [accepted_event(ModuleAccepted(module_id="m-2", source=MODULE.source, apis=[], fingerprint="g"))])
    await run_stage(log, stage, idle_exit_s=1.0, max_records=CONFIG.max_inflight_groups)

    samples = [e for e in await read_all(log, ["samples.generated"]) if e.payload.module_id == "m-2"]
    assert len(samples) == 3 and {e.envelope.policy_version for e in samples} == {1}
    old_model, _ = load_model(str(tiny_model_dir), device="cpu")
    for event in samples:  # the new weights made these: their log-probs are the new model's, not the old one's
        assert event.payload.logprobs == pytest.approx(recomputed_logprobs(stage.generator.model, event.payload), abs=1e-4)
        assert event.payload.logprobs != pytest.approx(recomputed_logprobs(old_model, event.payload), abs=1e-3)
    [dead] = await read_all(log, ["deadletter"])
    assert isinstance(dead.payload, DeadLetter) and dead.payload.topic == "policy.updated"
    assert "PolicyHashMismatch" in dead.payload.error

    restarted = TransformersGenerator(str(tiny_model_dir), device="cpu")
    assert await catch_up(restarted, log, "coder") == 1, "a restart loads the newest policy whose hash verifies"
    await log.close()


async def test_policy_updates_that_are_old_or_corrupt_are_not_loaded(tiny_model_dir, tmp_path):
    generator = TransformersGenerator(str(tiny_model_dir), device="cpu", policy_version=3)
    stage = CoderStage(generator, CONFIG)
    assert not await stage.update_policy(PolicyUpdated(role="coder", version=3, uri=str(tiny_model_dir), sha256=""))
    with pytest.raises(PolicyHashMismatch, match="do not exist"):
        await stage.update_policy(PolicyUpdated(role="coder", version=4, uri=str(tmp_path / "gone"), sha256=""))
    assert generator.policy_version == 3


def evaluated(sample, verdict, reason="output_mismatch"):
    return make_event(SampleEvaluated(
        sample_id=sample.payload.sample_id, module_id="m-1", backend="triton", verdict=verdict,
        reason=reason, evidence={"max_abs_err": "3.5"},
    ), correlation_id="m-1", producer="evaluator")


async def test_failed_samples_get_one_repair_group_once_every_result_is_in():
    config = CoderConfig(group_size=4, max_tokens=16, repair_turns=1)
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        generator = OpenAIGenerator(server.base_url, "tiny", policy_version=2)
        stage = CoderStage(generator, config)
        assert "samples.evaluated" in stage.topics
        a, b, c, d = await stage.sample_group(MODULE, causation_id="e")
        assert await stage.handle(evaluated(a, "incorrect")) == []
        assert await stage.handle(evaluated(b, "correct")) == []
        assert await stage.handle(evaluated(c, "evaluator_error", "evaluator_bug")) == [], "not the sample's fault"
        repairs = await stage.handle(evaluated(d, "compile_error", "syntax_error"))
        assert await stage.handle(evaluated(repairs[0], "incorrect")) == [], "no turn beyond repair_turns"
        await generator.close()
    assert [(r.payload.turn, r.payload.group_size, r.payload.group_index) for r in repairs] == [(1, 2, 0), (1, 2, 1)]
    assert {r.envelope.policy_version for r in repairs} == {2}
    prompts = sorted((body["prompt"] for body in server.requests[1:]), key=lambda p: "compile_error" in p)
    assert len(prompts) == 2 and all(body["n"] == 1 for body in server.requests[1:])  # requests run concurrently
    assert "Verdict: incorrect (reason: output_mismatch)" in prompts[0] and "max_abs_err: 3.5" in prompts[0]
    assert "Verdict: compile_error (reason: syntax_error)" in prompts[1] and "output_mismatch" not in prompts[1]
    assert [r.payload.prompt_hash for r in repairs] == [prompt_hash(p) for p in prompts]
    assert all("class ModelNew(torch.nn.Module)" in p for p in prompts)


async def test_repairs_chain_their_own_attempts_up_to_repair_turns():
    config = CoderConfig(group_size=1, max_tokens=16, repair_turns=2)
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        generator = OpenAIGenerator(server.base_url, "tiny")
        stage = CoderStage(generator, config)
        [first] = await stage.sample_group(MODULE, causation_id="e")
        [second] = await stage.handle(evaluated(first, "incorrect"))
        [third] = await stage.handle(evaluated(second, "timeout", "timeout"))
        assert await stage.handle(evaluated(third, "incorrect")) == []
        await generator.close()
    assert (second.payload.turn, third.payload.turn) == (1, 2)
    last_prompt = server.requests[2]["prompt"]
    assert "Verdict: incorrect" in last_prompt and "Verdict: timeout" in last_prompt


async def test_serve_entry_point_runs_the_coder_until_idle(tmp_path, tiny_model_dir):
    from kernelzero.config import Config, LogConfig
    from kernelzero.producers.coder import run

    url = f"embedded:{tmp_path / 'log.sqlite'}"
    config = Config(log=LogConfig(url=url), coder=CoderConfig(model=str(tiny_model_dir), device="cpu", group_size=2, max_tokens=8))
    log = await open_log(url)
    await publish(log, [accepted_event()])
    assert await run(config, idle_exit_s=1.0) == 0
    samples = await read_all(log, ["samples.generated"])
    assert len(samples) == 2 and all(e.envelope.producer == "coder" for e in samples)
    await log.close()


class CountingGenerator:
    """A real generator whose `generate` calls are recorded: (prompts, n, temperature)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def generate(self, prompts, n, **options):
        self.calls.append((list(prompts), n, options["temperature"]))
        return await self.inner.generate(prompts, n, **options)


async def test_a_poll_of_modules_is_sampled_in_one_generation_per_kind_and_weights_swap_between(
        tiny_model_dir, other_model_dir):
    generator = CountingGenerator(TransformersGenerator(str(tiny_model_dir), device="cpu"))
    stage = CoderStage(generator, CONFIG)
    sources = [MODULE.source.replace("sum(-1)", f"sum({d})") for d in (-1, 0, 1)]
    first = [ModuleAccepted(module_id=f"m-{i}", fingerprint=str(i), apis=[], source=s) for i, s in enumerate(sources)]
    greedy = msgspec.structs.replace(first[0], module_id="m-greedy", greedy=True)
    update = PolicyUpdated(role="coder", version=1, uri=str(other_model_dir), sha256=weights_sha256(other_model_dir))
    later = ModuleAccepted(module_id="m-later", fingerprint="l", apis=[], source=MODULE.source)
    events = [accepted_event(first[0]), accepted_event(greedy), accepted_event(first[1]), accepted_event(first[2]),
              make_event(update, correlation_id="policy", producer="trainer"), accepted_event(later)]
    outputs = await stage.handle_many(events)

    prompts = [render_coder_prompt(s, "triton", style="full") for s in sources]
    assert [(len(p), n, t) for p, n, t in generator.calls] == [(3, 3, 1.0), (1, 1, 0.0), (1, 3, 1.0)]
    assert generator.calls[0][0] == prompts
    assert [len(o) for o in outputs] == [3, 1, 3, 3, 0, 3]
    for event, out in zip(events, outputs):
        for sample in out:
            assert sample.payload.module_id == event.payload.module_id and sample.envelope.causation_id == event.event_id
            assert sample.envelope.policy_version == (1 if event.payload.module_id == "m-later" else 0)
    for prompt, out in zip(prompts, [outputs[0], outputs[2], outputs[3]]):  # each its own prompt, no padding
        assert {tuple(s.payload.prompt_token_ids) for s in out} == {tuple(generator.tokenizer(prompt)["input_ids"])}
        assert all(s.payload.prompt_hash == prompt_hash(prompt) for s in out)
    old_model, _ = load_model(str(tiny_model_dir), device="cpu")
    for sample in (*outputs[0], *outputs[3]):  # batched beside longer prompts, the log-probs are still the model's own
        assert sample.payload.logprobs == pytest.approx(recomputed_logprobs(old_model, sample.payload), abs=1e-4)


async def test_a_held_out_module_draws_the_same_samples_in_every_measurement(tiny_generator):
    from kernelzero.app.heldout import heldout_events
    from kernelzero.bootstrap.heldout_judge import HeldOutRow

    rows = [HeldOutRow(prompt="", reference=MODULE.source, apis=MODULE.apis),
            HeldOutRow(prompt="", reference=MODULE.source.replace("sum(-1)", "sum(0)"), apis=MODULE.apis)]
    first, later = heldout_events(rows, "v0", greedy=False), heldout_events(rows, "v9", greedy=False)
    assert [e.payload.sampling_seed for e in first] == [e.payload.sampling_seed for e in later]
    assert first[0].payload.sampling_seed != first[1].payload.sampling_seed
    stage = CoderStage(tiny_generator, CONFIG)
    alone = await stage.handle_many([first[0]])
    beside = await stage.handle_many([accepted_event(), later[1], later[0]])  # other modules, another order
    assert [s.payload.token_ids for s in beside[2]] == [s.payload.token_ids for s in alone[0]]
    assert [s.payload.token_ids for s in beside[0]] != [s.payload.token_ids for s in alone[0]]
