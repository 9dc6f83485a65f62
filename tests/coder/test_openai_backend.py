"""The openai backend against a local OpenAI-compatible test server: the generation contract, parsing, retries (429, 5xx, timeout), concurrency."""

from __future__ import annotations

import time

import pytest

from kernelzero.producers.backend_openai import OpenAIGenerator, backoff_s, retry_after_s
from kernelzero.producers.generation import GenerationError
from tests.coder.generation_contract import GenerationContract, Subject
from tests.coder.openai_server import OpenAITestServer, canned_answer, follow_adapters, model_answer
from tests.coder.test_transformers_backend import recomputed_logprobs

pytestmark = pytest.mark.anyio
ANSWER = "Here:\n```python\nclass ModelNew:\n    pass\n```\n"


def client(server: OpenAITestServer, **options) -> OpenAIGenerator:
    settings = dict(timeout_s=5.0, max_retries=3, backoff_base_s=0.01, backoff_cap_s=0.05)
    return OpenAIGenerator(server.base_url, "tiny", **(settings | options))


async def test_completions_from_a_real_model_carry_ids_and_sampling_logprobs(tiny_generator):
    with OpenAITestServer(model_answer(tiny_generator)) as server:
        generator = client(server)
        out = await generator.generate(["def f(x):", "import torch"], 2, temperature=0.8, top_p=0.95, max_tokens=10)
        await generator.close()
    assert [len(g) for g in out] == [2, 2]
    assert server.requests[0]["logprobs"] == 0 and server.requests[0]["return_token_ids"] is True
    for group in out:
        for completion in group:
            assert len(completion.token_ids) == len(completion.logprobs) > 0
            assert completion.prompt_token_ids
            assert completion.logprobs == pytest.approx(recomputed_logprobs(tiny_generator.model, completion, 0.8), abs=1e-4)


async def test_429_with_retry_after_then_success():
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        server.failures = [429, 429]
        server.retry_after = "0.2"
        generator = client(server)
        start = time.monotonic()
        [[a, b]] = await generator.generate(["p"], 2, temperature=1.0, top_p=1.0, max_tokens=8)
        waited = time.monotonic() - start
        await generator.close()
    assert len(server.requests) == 3
    assert waited >= 0.4, "Retry-After was honoured twice"
    assert a.text == ANSWER and a.token_ids[:2] == [ord("H"), ord("e")] and a.logprobs[0] == -1.0


async def test_server_errors_back_off_and_give_up_after_max_retries():
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        server.failures = [503] * 10
        generator = client(server, max_retries=2)
        with pytest.raises(GenerationError, match="gave up after 3 attempts, last: HTTP 503"):
            await generator.generate(["p"], 1, temperature=1.0, top_p=1.0, max_tokens=8)
        await generator.close()
    assert len(server.requests) == 3


async def test_a_hanging_request_times_out_and_is_retried():
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        server.hangs = 1
        generator = client(server, timeout_s=0.5)
        start = time.monotonic()
        [[completion]] = await generator.generate(["p"], 1, temperature=1.0, top_p=1.0, max_tokens=8)
        elapsed = time.monotonic() - start
        await generator.close()
    assert completion.text == ANSWER
    assert len(server.requests) == 2 and 0.5 <= elapsed < 5


async def test_a_client_error_is_not_retried():
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        server.failures = [400]
        generator = client(server)
        with pytest.raises(GenerationError, match="refused the request: HTTP 400"):
            await generator.generate(["p"], 1, temperature=1.0, top_p=1.0, max_tokens=8)
        await generator.close()
    assert len(server.requests) == 1


async def test_concurrency_is_capped():
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        server.hold_s = 0.1
        generator = client(server, concurrency=2)
        out = await generator.generate([f"p{i}" for i in range(6)], 1, temperature=1.0, top_p=1.0, max_tokens=8)
        await generator.close()
    assert len(out) == 6 and server.max_in_flight == 2


async def test_chat_endpoint_and_adapter_loading(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    with OpenAITestServer(canned_answer(ANSWER)) as server:
        generator = client(server, chat=True)
        [[completion]] = await generator.generate(["p"], 1, temperature=1.0, top_p=1.0, max_tokens=8)
        await generator.load_weights(str(tmp_path), 7)
        await generator.generate(["p"], 1, temperature=1.0, top_p=1.0, max_tokens=8)
        with pytest.raises(GenerationError, match="only load LoRA adapters"):
            await generator.load_weights(str(tmp_path / "missing"), 8)
        await generator.close()
    assert server.requests[0]["messages"] == [{"role": "user", "content": "p"}]
    assert completion.text == ANSWER and len(completion.logprobs) == len(ANSWER)
    assert server.adapters == [{"lora_name": "policy-v7", "lora_path": str(tmp_path.resolve())}]
    assert server.requests[1]["model"] == "policy-v7" and generator.policy_version == 7


def test_retry_after_and_backoff_helpers():
    assert retry_after_s("3") == 3.0 and retry_after_s(None) is None and retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: retry now
    assert all(0 <= backoff_s(k, 0.5, 4.0) <= min(4.0, 0.5 * 2 ** k) for k in range(8))


class TestOpenAIContract(GenerationContract):
    @pytest.fixture
    async def subject(self, tiny_model_dir):
        from kernelzero.producers.backend_transformers import TransformersGenerator

        reference = TransformersGenerator(str(tiny_model_dir), device="cpu", seed=0)
        server = OpenAITestServer(model_answer(reference))
        server.on_load = follow_adapters(reference)  # as vLLM's server puts a loaded adapter on its model
        with server:
            generator = OpenAIGenerator(server.base_url, "tiny")
            yield Subject(generator, reference)
            await generator.close()

