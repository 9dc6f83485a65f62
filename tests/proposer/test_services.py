"""The proposer and validator as stages on a real embedded log: proposals in, verdicts out, dedup rebuilt on restart."""

import pytest

from kernelzero.config import ProposerConfig
from kernelzero.consumers.validator import ValidatorStage, outcome_line, rebuild_dedup
from kernelzero.kit import api_catalog
from kernelzero.log import open_log
from kernelzero.producers.proposer import Proposer, build_prompt, last_model_block
from kernelzero.schemas import ModuleProposed, decode, make_event
from kernelzero.stage import publish, run_stage

from .conftest import SMALL

pytestmark = pytest.mark.anyio


async def _read_all(log, topic):
    events = []
    async with await log.consumer(f"test-{topic}", [topic]) as consumer:
        while records := await consumer.poll(max_records=500, timeout_s=0.5):
            events += [decode(r.value) for r in records]
    return events


async def test_synth_proposals_are_validated_and_duplicates_dropped(tmp_path, cpu_config, sandbox):
    log = await open_log(f"embedded:{tmp_path}/log.sqlite")
    proposer = Proposer(ProposerConfig(backend="synth", scale=SMALL, api_set_size=3, seed=5))
    proposed = await proposer.propose(4)
    assert len(proposed) == 4 and all(e.payload.generator == "synth" for e in proposed)
    again = proposed[0].payload
    copy = ModuleProposed(module_id="copy-of-first", source=again.source, apis=again.apis, generator="synth")
    broken = ModuleProposed(module_id="broken", source="def nope(:\n", apis=["torch.relu"], generator="llm")
    unused = next(api for api in api_catalog.names() if api not in again.apis)
    missing = ModuleProposed(module_id="misses-an-api", source=again.source, apis=[*again.apis, unused], generator="llm")
    extra = [make_event(p, correlation_id=p.module_id, producer="test") for p in (copy, broken, missing)]
    await publish(log, proposed + extra)
    stage = ValidatorStage(cpu_config, [sandbox])
    stats = await run_stage(log, stage, idle_exit_s=1.0)
    assert stats.consumed == 7 and stats.dead_lettered == 0
    accepted = {e.payload.module_id for e in await _read_all(log, "modules.accepted")}
    rejected = {e.payload.module_id: e.payload.reason for e in await _read_all(log, "modules.rejected")}
    assert accepted == {e.payload.module_id for e in proposed}
    assert rejected == {"copy-of-first": "duplicate", "broken": "syntax_error",
                        "misses-an-api": f"api_not_called:{unused}"}
    assert outcome_line(stats.consumed, stage.outcomes) == \
        "consumed 7, accepted 4, rejected 3 (api_not_called 1, duplicate 1, syntax_error 1)"
    dedup = await rebuild_dedup(log)
    assert len(dedup) == 4
    await log.close()


async def test_a_poll_s_modules_share_the_sandboxes_and_one_of_two_copies_is_the_original(
        tmp_path, cpu_config, sandbox):
    from kernelzero.config import EvaluatorConfig
    from kernelzero.consumers.validator import validator_sandbox

    log = await open_log(f"embedded:{tmp_path}/log.sqlite")
    proposed = await Proposer(ProposerConfig(backend="synth", scale=SMALL, api_set_size=2, seed=9)).propose(3)
    first = proposed[0].payload
    copy = ModuleProposed(module_id="copy", source=first.source, apis=first.apis, generator="synth")
    await publish(log, [proposed[0], make_event(copy, correlation_id="copy", producer="test"), *proposed[1:]])
    second = validator_sandbox(EvaluatorConfig(cache_dir=str(tmp_path / "cache")), "cpu")
    try:
        stage = ValidatorStage(cpu_config, [sandbox, second])
        stats = await run_stage(log, stage, idle_exit_s=1.0)
        assert second.pid is not None, "the second sandbox took none of the poll's modules"
    finally:
        second.close()
    assert stats.consumed == 4
    verdicts = await _read_all(log, "modules.accepted") + await _read_all(log, "modules.rejected")
    # the two copies sit in partitions of their own keys: which comes first in a poll is the log's choice
    accepted = {e.payload.module_id for e in verdicts if e.type == "modules.accepted"}
    rejected = [(e.payload.module_id, e.payload.reason) for e in verdicts if e.type == "modules.rejected"]
    pair = {first.module_id, "copy"}
    assert accepted - pair == {e.payload.module_id for e in proposed[1:]} and len(accepted & pair) == 1
    assert rejected == [((pair - accepted).pop(), "duplicate")]
    await log.close()


class ScriptedLLM:
    """Stands in for a policy model: answers every prompt with a fixed text (the parsing is under test)."""

    policy_version = 3

    def __init__(self, text):
        self.text, self.prompts = text, []

    async def generate(self, prompts, n, *, temperature, top_p, max_tokens):
        from kernelzero.producers.generation import Completion

        self.prompts += prompts
        return [[Completion(text=self.text, token_ids=[1, 2, 3], logprobs=[-0.5] * 3, finish_reason="stop")] * n
                for _ in prompts]


async def test_llm_proposals_carry_the_last_model_block_and_tokens():
    answer = "Draft:\n```python\nclass Model: pass\n```\nFinal:\n```python\nimport torch\nclass Model:\n    pass\n```\n"
    llm = ScriptedLLM(answer)
    proposer = Proposer(ProposerConfig(backend="openai", scale=SMALL, api_set_size=2), llm)
    [event] = await proposer.propose(1)
    payload = event.payload
    assert payload.generator == "llm" and payload.source == "import torch\nclass Model:\n    pass\n"
    assert payload.token_ids == [1, 2, 3] and event.envelope.policy_version == 3
    assert all(api in llm.prompts[0] for api in payload.apis)
    assert last_model_block("no code at all") == "no code at all"


def test_prompt_states_apis_format_and_sizes():
    prompt = build_prompt(["torch.nn.Conv2d", "torch.cumsum"], scale=1.0, style="full")
    for needle in ("torch.nn.Conv2d", "torch.cumsum", "get_init_inputs", "67,108,864", "```python"):
        assert needle in prompt


async def test_a_restarted_proposer_continues_instead_of_repeating_its_first_modules():
    config = ProposerConfig(scale=SMALL, api_set_size=2)
    first = [e.payload.source for e in await Proposer(config).propose(3)]
    again = [e.payload.source for e in await Proposer(config).propose(3)]
    resumed = [e.payload.source for e in await Proposer(config, already_proposed=3).propose(3)]
    assert first == again  # deterministic for a seed
    assert not set(resumed) & set(first)


async def test_llm_proposals_from_a_real_model_are_trainable_and_follow_new_weights(
        tmp_path, tiny_model_dir, other_model_dir):
    import argparse

    from kernelzero.config import Config, LogConfig
    from kernelzero.consumers.groups import trainable
    from kernelzero.kit.models import weights_sha256
    from kernelzero.producers.proposer import serve
    from kernelzero.schemas import PolicyUpdated

    url = f"embedded:{tmp_path / 'log.sqlite'}"
    config = Config(log=LogConfig(url=url), proposer=ProposerConfig(
        backend="transformers", model=str(tiny_model_dir), device="cpu", scale=SMALL, api_set_size=2,
        temperature=0.8, max_tokens=12, batch=2, rounds=1))
    log = await open_log(url)
    updates = [PolicyUpdated(role="proposer", version=1, uri=str(other_model_dir), sha256=weights_sha256(other_model_dir)),
               PolicyUpdated(role="proposer", version=2, uri=str(tiny_model_dir), sha256="0" * 64),
               PolicyUpdated(role="coder", version=7, uri=str(tiny_model_dir), sha256=weights_sha256(tiny_model_dir))]
    await publish(log, [make_event(u, correlation_id="policy", producer="trainer") for u in updates])
    import anyio
    assert await anyio.to_thread.run_sync(serve, argparse.Namespace(idle_exit=None), config) == 0
    events = await _read_all(log, "modules.proposed")
    dead = await _read_all(log, "deadletter")
    await log.close()
    assert len(events) == 2
    for event in events:
        assert event.envelope.policy_version == 1, "the newest proposer weights whose hash verifies"
        assert trainable(event.payload) and event.payload.temperature == 0.8
        assert len(event.payload.prompt_token_ids) > 100 and len(event.payload.token_ids) == len(event.payload.logprobs)
    # the Coder's rule: an update whose weights do not hash to its sha256 is dead-lettered by the stage consuming it
    [letter] = [e.payload for e in dead]
    assert letter.topic == "policy.updated" and letter.group == "proposer" and "PolicyHashMismatch" in letter.error


async def test_the_proposer_stage_aims_at_new_snapshots_and_stops_after_its_rounds(tmp_path):
    from kernelzero.config import Config, LogConfig
    from kernelzero.producers.proposer import run
    from kernelzero.schemas import FrontierEntry, FrontierSnapshot

    url = f"embedded:{tmp_path / 'log.sqlite'}"
    pool = ["torch.relu", "torch.sigmoid", "torch.abs"]
    config = Config(log=LogConfig(url=url), proposer=ProposerConfig(
        scale=SMALL, api_set_size=1, apis=pool, explore=0.0, batch=5, rounds=2))
    only_abs = FrontierSnapshot(entries=[FrontierEntry(apis=["torch.abs"], attempts=10, passes=5, pass_mean=0.5,
                                                       weight=1.0)], band_low=0.2, band_high=0.8)
    log = await open_log(url)
    await publish(log, [make_event(only_abs, correlation_id="frontier", producer="projector")])
    assert await run(config, idle_exit_s=5.0) == 0
    events = await _read_all(log, "modules.proposed")
    await log.close()
    assert len(events) == 10, "two rounds of five, then it stops"
    assert {api for e in events for api in e.payload.apis} == {"torch.abs"}, "only the snapshot's API has weight"


async def test_set_sizes_vary_in_their_range_and_excluded_sets_are_never_proposed():
    pool = ["torch.relu", "torch.sigmoid", "torch.abs"]
    excluded = ["torch.abs + torch.relu", "torch.sigmoid"]
    config = ProposerConfig(scale=SMALL, api_set_size=2, min_api_set_size=1, apis=pool, exclude_sets=excluded, seed=3)
    events = await Proposer(config).propose(24)
    keys = [" + ".join(sorted(e.payload.apis)) for e in events]
    assert {len(e.payload.apis) for e in events} == {1, 2} and not set(keys) & set(excluded)
    with pytest.raises(ValueError, match="not in the API catalog: torch.nope"):
        Proposer(ProposerConfig(apis=["torch.nope"]))
