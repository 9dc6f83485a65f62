"""One CA-GRPO step driven by real evaluator verdicts (CPU, Triton interpreter) on the examples/ problem."""

from pathlib import Path

import msgspec
import pytest
import torch

from kernelzero.config import EvaluatorConfig, TrainerConfig
from kernelzero.consumers.groups import GroupAssembler
from kernelzero.consumers.policy_update import Batch, PolicyLearner, token_logprobs
from kernelzero.gpu_workers import EvaluatorPool
from kernelzero.kit.models import build_random_model, load_model
from kernelzero.schemas import SampleEvaluated, SampleGenerated, make_event

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROBLEM = (EXAMPLES / "problems" / "relu_matmul.py").read_text()
GOOD = (EXAMPLES / "candidates" / "relu_matmul_triton.py").read_text()
CANDIDATES = {
    "good": GOOD,
    "no_relu": GOOD.replace("acc = tl.maximum(acc + bias[None, :], 0.0)", "acc = acc + bias[None, :]"),
    "syntax": GOOD + "\ndef broken(:\n    pass\n",
    "torch_only": PROBLEM.split("def get_inputs")[0].replace("class Model(", "class ModelNew("),
}


async def real_results():
    async with EvaluatorPool(EvaluatorConfig(), device="cpu", use_cache=False) as pool:
        return {name: await pool.evaluate(PROBLEM, source) for name, source in CANDIDATES.items()}


@pytest.mark.slow
@pytest.mark.anyio
async def test_one_step_from_real_verdicts(tmp_path):
    results = await real_results()
    assert {n: r.verdict for n, r in results.items()} == {
        "good": "correct", "no_relu": "incorrect", "syntax": "compile_error", "torch_only": "rejected",
    }
    model, tokenizer = load_model(str(build_random_model(tmp_path / "tiny", seed=0)), device="cpu")
    config = TrainerConfig(lora_rank=0, learning_rate=1e-3, micro_batch_size=4)
    learner = PolicyLearner(model, config)
    prompt = tokenizer("Write a faster version with a custom kernel.")["input_ids"]
    assembler = GroupAssembler(config)
    events = []
    for index, (name, source) in enumerate(CANDIDATES.items()):
        tokens = tokenizer(source)["input_ids"][:48]
        generated = SampleGenerated(sample_id=name, module_id="relu_matmul", backend="triton", source=source,
                                    problem_source=PROBLEM, group_size=len(CANDIDATES), group_index=index,
                                    prompt_token_ids=prompt, token_ids=tokens, logprobs=[0.0] * len(tokens))
        fields = msgspec.structs.asdict(results[name])  # as the evaluator service copies an Evaluation
        evaluated = SampleEvaluated(sample_id=name, module_id="relu_matmul", backend="triton", **fields)
        events += [make_event(generated, correlation_id="relu_matmul", producer="coder", policy_version=0),
                   make_event(evaluated, correlation_id="relu_matmul", producer="evaluator")]
    scored = [group for event in events for group in assembler.add(event, 0.0)]
    assert len(scored) == 1
    group = scored[0].event.payload
    assert group.pass_rate == 0.25 and not group.gate_open  # 1 of 4 correct: below tau = 0.5
    assert {s.sample_id: s.reward for s in group.samples} == {
        "good": 1.0, "no_relu": 0.0, "syntax": 0.0, "torch_only": -0.5,
    }
    advantages = {s.sample_id: s.advantage for s in group.samples}
    assert advantages["good"] > 0 > advantages["torch_only"]
    # the behaviour log-probabilities are the current policy's (an on-policy step)
    rows = scored[0].training
    with torch.no_grad():
        before = token_logprobs(learner.model, Batch(rows, learner.device, 0, config))
    rows = [msgspec.structs.replace(r, logprobs=before[i, :len(r.token_ids)].tolist()) for i, r in enumerate(rows)]
    metrics = learner.step(rows)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and learner.version == 1
    with torch.no_grad():
        after = token_logprobs(learner.model, Batch(rows, learner.device, 1, config))
    change = {r.sample_id: (after[i] - before[i])[:len(r.token_ids)].mean().item() for i, r in enumerate(rows)}
    assert change["good"] > 0 > change["torch_only"], change  # the step moved the policy as the verdicts ask
