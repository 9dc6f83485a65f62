"""Three rounds of the real loop on the embedded log: both roles train and follow their new weights.

Both roles are tiny random-weight models behind the OpenAI test server, which answers with a
scripted mix (the Coder: correct Triton kernels, a wrong one, no code; the Proposer: valid
modules for the API set it is asked for, and a constant one) scored by the model itself, so the
trainer holding the same weights learns on-policy. Every stage is the real `kernelzero serve
ROLE` (the proposer, validator and evaluator included), as the demo runs them.
"""

from __future__ import annotations

import itertools

import anyio
import msgspec
import pytest

from kernelzero.analytics.projection import Projection
from kernelzero.analytics.views import install_views
from kernelzero.app.cli import main as cli_main
from kernelzero.bootstrap.heldout_judge import HeldOutRow
from kernelzero.app.serve import serve_until_idle
from kernelzero.config import Config, dump_config
from kernelzero.kit.codeblocks import answer
from kernelzero.kit.models import TINY_QWEN2, build_random_model
from kernelzero.log import open_log
from kernelzero.producers.backend_transformers import TransformersGenerator
from kernelzero.schemas import GroupScored, ModuleProposed, PolicyUpdated, SampleGenerated, decode
from tests.coder.openai_server import OpenAITestServer, follow_adapters, scripted_answer

APIS = {"torch.relu": "tl.maximum({}, 0.0)", "torch.sigmoid": "tl.sigmoid({})", "torch.abs": "tl.abs({})"}
# twelve bodies of different structure (the validator's fingerprint ignores constants, not structure)
BEFORE, AFTER = ("x", "x * 3.0", "x - 0.5"), ("{}", "{} * 2.0", "{} + 1.0", "{} * 2.0 - 1.0")


def body(n: int, call) -> str:
    return AFTER[n // 3 % 4].format(call(BEFORE[n % 3]))


KERNEL = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, EXPR, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
"""
MODULE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return BODY


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return []
"""


def write_kernel(prompt: str, index: int) -> str:
    """Samples 0 and 1 are correct, 2 is wrong (relu's threshold moved), 3 holds no code: every group has variance."""
    if index % 4 == 3:
        return "I do not know."
    for api, n in itertools.product(APIS, range(12)):
        if f"return {body(n, lambda arg: f'{api}({arg})')}\n" in prompt:
            expr = body(n, APIS[api].format) if index % 4 < 2 else "tl.maximum(x, 1.0)"
            return answer(KERNEL.replace("EXPR", expr))
    raise AssertionError(f"not one of the scripted modules: {prompt}")


def module_writer():
    """Three valid modules (a new structure each) for the API asked for, then a constant one the validator rejects."""
    count = itertools.count()

    def write(prompt: str, index: int) -> str:
        n = next(count)
        [api] = [api for api in APIS if f"- {api} (" in prompt]
        returned = "torch.zeros_like(x)" if n % 4 == 3 else body(n, lambda arg: f"{api}({arg})")
        return answer(MODULE.replace("BODY", returned))

    return write


def write_rows(tmp_path, rows) -> object:
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(msgspec.json.encode(row).decode() + "\n" for row in rows))
    return path


def loop_config(tmp_path, coder_dir, proposer_dir, coder_url, proposer_url) -> Config:
    config = Config()
    config.log.url = f"embedded:{tmp_path / 'log.sqlite'}"
    config.analytics.db = str(tmp_path / "analytics.duckdb")
    config.evaluator.device = config.validator.device = "cpu"
    config.evaluator.cache_dir = str(tmp_path / "cache")
    for section, model, url in ((config.coder, coder_dir, coder_url), (config.proposer, proposer_dir, proposer_url)):
        section.backend, section.model, section.openai_base_url = "openai", str(model), url
        section.max_tokens = 512
    config.coder.group_size, config.coder.prompt = 4, "compact"
    config.proposer.batch, config.proposer.rounds, config.proposer.api_set_size = 4, 1, 1
    config.proposer.apis, config.proposer.scale = list(APIS), 2.0 ** -13
    config.trainer.lora_rank, config.trainer.device = 4, "cpu"
    config.trainer.groups_per_step, config.trainer.proposer_batch = 2, 4
    config.trainer.checkpoint_dir = str(tmp_path / "checkpoints")
    config.trainer.group_deadline_s = 30.0
    return config


async def everything(url: str) -> list:
    log = await open_log(url)
    events = []
    async with await log.consumer("test-reader", ["policy.updated", "groups.scored", "samples.generated",
                                                   "modules.proposed"]) as consumer:
        while records := await consumer.poll(max_records=1000, timeout_s=0.5):
            events += [decode(r.value) for r in records]
    await log.close()
    return events


@pytest.mark.slow
def test_three_rounds_train_both_roles_on_their_own_samples(tmp_path):
    coder_dir = build_random_model(tmp_path / "coder-model", TINY_QWEN2, seed=0)
    proposer_dir = build_random_model(tmp_path / "proposer-model", TINY_QWEN2, seed=1)
    coder_model = TransformersGenerator(str(coder_dir), device="cpu")
    proposer_model = TransformersGenerator(str(proposer_dir), device="cpu")
    with OpenAITestServer(scripted_answer(coder_model, write_kernel)) as coder_server, \
            OpenAITestServer(scripted_answer(proposer_model, module_writer())) as proposer_server:
        coder_server.on_load = follow_adapters(coder_model)
        proposer_server.on_load = follow_adapters(proposer_model)
        config = loop_config(tmp_path, coder_dir, proposer_dir, coder_server.base_url, proposer_server.base_url)
        path = tmp_path / "kernelzero.toml"
        path.write_text(dump_config(config))
        for _ in range(3):
            for role in ("proposer", "validator", "coder", "evaluator", "trainer", "projector"):
                assert serve_until_idle(role, config) == 0, role
        held_out = [HeldOutRow(reference=MODULE.replace("BODY", body(n, lambda arg: f"torch.relu({arg})")),
                               apis=["torch.relu"]) for n in (5, 7)]
        assert cli_main(["heldout", "--config", str(path), "--rows", str(write_rows(tmp_path, held_out)),
                         "--tag", "final"]) == 0
        for role in ("coder", "evaluator", "trainer", "projector"):
            assert serve_until_idle(role, config) == 0, role
    events = anyio.run(everything, config.log.url)
    updates = [e.payload for e in events if isinstance(e.payload, PolicyUpdated)]
    versions = {role: sorted(u.version for u in updates if u.role == role) for role in ("coder", "proposer")}
    assert len(versions["coder"]) >= 2 and len(versions["proposer"]) >= 2, versions
    groups = [e.payload for e in events if isinstance(e.payload, GroupScored)]
    assert any(g.informative and any(s.advantage != 0 for s in g.samples) for g in groups)
    # the producers sampled from the new weights: later rounds carry later policy versions
    assert max(e.envelope.policy_version or 0 for e in events if isinstance(e.payload, SampleGenerated)) >= 1
    assert max(e.envelope.policy_version or 0 for e in events if isinstance(e.payload, ModuleProposed)) >= 1
    assert coder_server.adapters and proposer_server.adapters
    assert coder_model.policy_version >= 1 and proposer_model.policy_version >= 1
    # the held-out modules were answered by the newest Coder, judged, and never trained on
    assert len(versions["coder"]) == len([u for u in updates if u.role == "coder"])
    with Projection(config.analytics.db) as projection:
        install_views(projection.con, config.analytics)
        curve = projection.con.execute(
            "SELECT policy_version, modules, samples, pass_at_1, pass_at_n FROM heldout_curve "
            "WHERE decoding = 'sampled'").fetchall()
        frontier_attempts = projection.con.execute("SELECT sum(attempts) FROM frontier WHERE kind = 'api'").fetchone()[0]
    assert curve == [(versions["coder"][-1], 2, 8, 0.5, 1.0)]
    assert frontier_attempts == sum(1 for e in events if isinstance(e.payload, SampleGenerated)
                                    and e.payload.split == "train")
