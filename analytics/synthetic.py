"""Synthetic, seeded event streams shaped like a real run (for tests, benchmarks and demos); not a model of real pass rates.

Each module draws one to three APIs; its samples pass with a probability set by the APIs'
hidden difficulties and rising with the Coder's policy version; verdicts, reasons, evidence
texts, speedups and CA-GRPO groups follow from that.
"""

from __future__ import annotations

import random
from typing import Iterator

from kernelzero.schemas import (
    Event, GroupScored, ModuleAccepted, ModuleProposed, ModuleRejected, PolicyUpdated, SampleEvaluated,
    SampleGenerated, ScoredSample, make_event,
)

APIS = (
    "torch.matmul", "torch.nn.functional.relu", "torch.nn.functional.gelu", "torch.softmax", "torch.sum",
    "torch.nn.functional.conv2d", "torch.nn.functional.layer_norm", "torch.nn.functional.max_pool2d",
    "torch.cumsum", "torch.sigmoid", "torch.transpose", "torch.nn.functional.cross_entropy",
)

FAILURES = (
    ("compile_error", "nvcc_error", {"log": 'kernel.cu(12): error: identifier "blockDimx" is undefined'}),
    ("compile_error", "triton_error",
     {"log": "triton.compiler.errors.CompilationError: arange's range must be a power of 2"}),
    ("runtime_error", "cuda_error",
     {"traceback": "RuntimeError: CUDA error: an illegal memory access was encountered"}),
    ("incorrect", "mismatch", {}),
    ("rejected", "no_custom_kernel", {"detail": "no launch of the candidate's own kernels"}),
    ("timeout", "timeout", {}),
)


def _module_events(rng: random.Random, index: int, group_size: int, coder_version: int,
                   proposer_version: int, difficulty: dict[str, float]) -> Iterator[Event]:
    module_id = f"m{index:07d}"
    apis = sorted(rng.sample(APIS, rng.randint(1, 3)))
    source = f"class Model:  # uses {', '.join(apis)}\n    pass\n"
    yield make_event(ModuleProposed(module_id=module_id, source=source, apis=apis), correlation_id=module_id,
                     producer="proposer", policy_version=proposer_version)
    if rng.random() < 0.1:
        yield make_event(ModuleRejected(module_id=module_id, reason="non_deterministic", apis=apis),
                         correlation_id=module_id, producer="validator")
        return
    fingerprint = f"fp{rng.randrange(index + 1):07d}"
    yield make_event(ModuleAccepted(module_id=module_id, source=source, apis=apis, fingerprint=fingerprint,
                                    ref_runtime_ms=1.0), correlation_id=module_id, producer="validator")
    p_pass = min(0.95, min(difficulty[a] for a in apis) * (1 + 0.1 * coder_version))
    scored = []
    for g in range(group_size):
        sample_id = f"{module_id}-s{g}"
        backend = rng.choice(("cuda", "triton"))
        gen = make_event(SampleGenerated(sample_id=sample_id, module_id=module_id, backend=backend,
                                         source=f"# kernel {sample_id}\n", problem_source=source,
                                         group_size=group_size, group_index=g, apis=apis,
                                         token_ids=[1, 2, 3], logprobs=[-0.5, -0.25, -0.25]),
                         correlation_id=module_id, producer="coder", policy_version=coder_version)
        yield gen
        if rng.random() < p_pass:
            speedup = round(rng.lognormvariate(0.0, 0.5), 4)
            evaluated = SampleEvaluated(sample_id=sample_id, module_id=module_id, backend=backend,
                                        verdict="correct", reason="ok", runtime_ms=round(1.0 / speedup, 6),
                                        ref_eager_ms=1.0, speedup=speedup, apis=apis, group_size=group_size)
        else:
            verdict, reason, evidence = rng.choice(FAILURES)
            rel_err = 10 ** rng.uniform(-4, 1) if verdict == "incorrect" else None
            evaluated = SampleEvaluated(sample_id=sample_id, module_id=module_id, backend=backend, verdict=verdict,
                                        reason=reason, evidence=evidence, rel_err=rel_err, apis=apis,
                                        group_size=group_size)
        yield make_event(evaluated, correlation_id=module_id, producer="evaluator",
                         causation_id=gen.event_id, policy_version=coder_version)
        reward = 1.0 if evaluated.verdict == "correct" else 0.0
        scored.append(ScoredSample(sample_id=sample_id, verdict=evaluated.verdict, reward=reward, advantage=0.0,
                                   speedup=evaluated.speedup, policy_version=coder_version))
    pass_rate = sum(s.reward for s in scored) / len(scored)
    yield make_event(GroupScored(module_id=module_id, policy_version=coder_version, samples=scored,
                                 pass_rate=pass_rate, gate_open=pass_rate >= 0.5),
                     correlation_id=module_id, producer="trainer")


def synthetic_run(modules: int, *, group_size: int = 4, versions: int = 3, seed: int = 0) -> Iterator[Event]:
    """Events of `modules` modules spread evenly over `versions` Coder (and Proposer) policy versions."""
    rng = random.Random(seed)
    difficulty = {api: rng.uniform(0.05, 0.9) for api in APIS}
    per_version = max(1, -(-modules // versions))
    for index in range(modules):
        version = index // per_version
        if index % per_version == 0 and version > 0:
            for role in ("coder", "proposer"):
                yield make_event(PolicyUpdated(role=role, version=version, uri=f"runs/ckpt/{role}-v{version}",
                                               sha256="0" * 64), correlation_id=f"policy-{role}", producer="trainer")
        yield from _module_events(rng, index, group_size, version, version, difficulty)
