"""Faults injected into the evaluator's own code come back as signed `evaluator_error` results with the traceback.

Each case patches one of our functions in this test process, then runs the job the way a worker does
(`zygote.run_forked`: a fork of this process, so the patch is inherited, that answers over the signed
result pipe). Faults of the candidate that pass through our code are the corpus's (test_corpus.py).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import compare, zygote
from kernelzero.gpu_workers.result import EVALUATOR_VERSION
from kernelzero.schemas import Evaluation
from kernelzero.schemas.messages import Job, JobAnswer

HERE = Path(__file__).parent


def run_job(tmp_path: Path, problem: str, candidate: str) -> Evaluation:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    job = Job(problem_src=(HERE / "problems" / f"{problem}.py").read_text(),
              candidate_src=(HERE / "candidates" / f"{candidate}.py").read_text(), device="cpu",
              scratch_dir=str(scratch), config=EvaluatorConfig(device="cpu", timeout_s=60))
    return msgspec.msgpack.decode(zygote.run_forked(job), type=JobAnswer).result


def injected(*args, **kwargs):
    raise RuntimeError("injected fault in the evaluator")


@pytest.mark.parametrize("module, name, stage", [
    (compare, "compare_outputs", "reference"),  # the reference's own determinism check: before any candidate code
    (compare, "compare_or_blame", "trials"),  # comparing a candidate's output, after its forward ran cleanly
])
def test_a_fault_of_ours_is_an_evaluator_error(tmp_path: Path, monkeypatch, module, name: str, stage: str) -> None:
    monkeypatch.setattr(module, name, injected)
    result = run_job(tmp_path, "relu", "passthrough_torch")  # a torch-only forward: it runs without Triton
    assert (result.verdict, result.reason) == ("evaluator_error", "exception"), result.evidence
    assert result.evidence["stage"] == stage
    assert "injected fault in the evaluator" in result.evidence["traceback"] and "in injected" in result.evidence["traceback"]


def test_a_fault_setting_up_the_child_is_an_evaluator_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(zygote, "_prepare_job", injected)
    result = run_job(tmp_path, "relu", "passthrough_torch")
    assert (result.verdict, result.reason, result.evidence["stage"]) == ("evaluator_error", "exception", "sandbox")
    assert "injected fault in the evaluator" in result.evidence["traceback"]
    assert result.evaluator_version == EVALUATOR_VERSION  # stamped on every result, the ones the sandbox makes too


def test_without_a_fault_the_same_job_is_the_candidates(tmp_path: Path) -> None:
    result = run_job(tmp_path, "relu", "passthrough_torch")
    assert (result.verdict, result.reason) == ("rejected", "no_custom_kernel")
    assert result.evaluator_version == EVALUATOR_VERSION
