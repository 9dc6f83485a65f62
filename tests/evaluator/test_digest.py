"""Judging by a digest (a reference too large to keep whole): correct outputs pass, outputs not computed in full fail."""

from __future__ import annotations

import pytest
import torch

from kernelzero.gpu_workers import compare, digest
from kernelzero.gpu_workers.compare import POISON_BYTE, compare_outputs, compare_or_blame

R, A = 1e-2, 1e-2


@pytest.fixture(autouse=True)
def few_samples(monkeypatch):
    """Outputs of 60,000 elements with 512 samples and 1,000 blocks: the proportions of a real-size ReLU's digest."""
    monkeypatch.setattr(digest, "SAMPLES", 512)
    monkeypatch.setattr(digest, "BLOCKS", 1000)


def ref() -> torch.Tensor:
    return torch.relu(torch.randn(200, 300, generator=torch.Generator().manual_seed(0)))


def judge(expected: torch.Tensor, got: torch.Tensor) -> compare.Comparison:
    return digest.make(expected).judge(got, R, A)


def test_a_correct_output_passes_even_with_every_element_near_its_tolerance() -> None:
    e = ref()
    scale = float(e.square().mean().sqrt())
    worst = (A * scale + R * e.abs()) * 0.99  # each element as far off as the elementwise bound allows
    sign = torch.where(torch.rand(e.shape, generator=torch.Generator().manual_seed(1)) < 0.5, -1.0, 1.0)
    assert judge(e, e.clone()).ok
    assert judge(e, e + worst).ok and judge(e, e + sign * worst).ok  # the block sums never fail a correct output


def test_a_region_left_unwritten_is_unwritten_output() -> None:
    e = ref()
    got = e.clone()
    got.view(-1)[36000:].view(torch.uint8).fill_(POISON_BYTE)  # 60% computed: the rest holds the poison
    assert judge(e, got).reason == "unwritten_output"


@pytest.mark.parametrize("filler", ["input", "neighbours", "stale", "zeros"])
def test_a_region_filled_with_plausible_values_is_a_mismatch(filler: str) -> None:
    e = ref()
    got = e.clone().view(-1)
    rest = got[36000:]
    if filler == "input":
        rest.copy_(torch.randn(rest.shape, generator=torch.Generator().manual_seed(2)))
    elif filler == "neighbours":  # every other element computed, the others copied from the one before
        got[1::2] = got[0::2]
    elif filler == "stale":  # what an earlier call on other inputs left there
        rest.copy_(torch.relu(torch.randn(rest.shape, generator=torch.Generator().manual_seed(3))))
    else:
        rest.zero_()
    result = judge(e, got.view(e.shape))
    assert (result.ok, result.reason) == (False, "output_mismatch"), result


def test_non_finite_values_must_match_in_kind_and_place() -> None:
    e = ref()
    e.view(-1)[[10, 20]] = torch.tensor([float("nan"), float("inf")])
    assert judge(e, e.clone()).ok
    flipped = e.clone()
    flipped.view(-1)[20] = -float("inf")
    assert judge(e, flipped).reason == "nan_parity"
    assert judge(e, torch.nan_to_num(e)).reason == "nan_parity"


def test_the_sums_of_a_finite_output_skip_the_masks_and_agree_with_them() -> None:
    e = ref()
    flat = e.reshape(-1).to(torch.float16)
    fast, masked = digest._finite_sums(flat, 60), digest._float_sums(flat, 60)
    assert all(torch.allclose(a, b, rtol=1e-12, atol=0) and a.dtype == b.dtype for a, b in zip(fast, masked))
    assert digest._all_finite(flat) and not digest._all_finite(torch.cat([flat, torch.tensor([float("inf")])]))
    got = e.clone()
    got[7, 7] = float("nan")  # the finite reference's sums came from the fast path; this output's from the masks
    assert judge(e, got).reason == "nan_parity"


def test_form_constancy_integers_and_complex() -> None:
    e = ref()
    assert judge(e, e.double()).reason == "dtype_mismatch" and judge(e, e.t()).reason == "shape_mismatch"
    assert judge(e, torch.zeros_like(e)).reason == "constant_output"
    ints = torch.randint(0, 9, (60000,), generator=torch.Generator().manual_seed(4))
    assert judge(ints, ints.clone()).ok
    swapped = ints.clone()
    swapped[[7, 8]] = swapped[[8, 7]] + 0 if swapped[7] != swapped[8] else swapped[[8, 7]] + 1
    assert judge(ints, swapped).reason == "output_mismatch"  # position-weighted sums: moved elements show
    z = torch.complex(ref(), ref())
    assert judge(z, z.clone()).ok and not judge(z, z.conj()).ok


def test_outputs_mix_whole_references_digests_and_numbers() -> None:
    e, f = ref(), ref() * 2
    expected = [e, digest.make(f), 3]
    assert compare_outputs(expected, (e.clone(), f.clone(), 3), R, A).ok
    assert compare_outputs(expected, (e.clone(), f * 1.5, 3), R, A).detail.startswith("output 1:")


def test_a_digest_blames_the_output_only_when_it_judges_itself_cleanly(monkeypatch) -> None:
    kept = digest.make(ref())
    odd = ref()
    real = digest.Digest.judge

    def breaks_on_the_candidate(self, got, rtol, atol):
        if got is odd:
            raise RuntimeError("cannot read this output")
        return real(self, got, rtol, atol)

    monkeypatch.setattr(digest.Digest, "judge", breaks_on_the_candidate)
    assert compare_or_blame([kept], odd, R, A).reason == "output_unreadable"
    monkeypatch.setattr(digest, "_block_sums", lambda *args: 1 / 0)  # judging itself is broken: ours
    with pytest.raises(ZeroDivisionError):
        compare_or_blame([kept], odd, R, A)


def test_the_size_a_digest_is_planned_at_is_its_size() -> None:
    for t in (ref(), torch.randint(0, 9, (70001,)), torch.complex(ref(), ref()), torch.ones(3)):
        assert digest.make(t).nbytes == digest.nbytes_for(t)


@pytest.mark.parametrize("candidate, verdict", [
    ("correct_whole", ("correct", "ok")),
    ("timed_partial_after_12_calls", ("incorrect", "unwritten_output")),
    ("timed_plausible_after_12_calls", ("incorrect", "output_mismatch")),
    ("memo_fingerprint", ("rejected", "memoized_output")),  # the permuted trial's digest against trial 0's whole
])
def test_an_evaluation_that_keeps_only_trial_0_whole_judges_the_rest_by_digests(tmp_path, monkeypatch, candidate,
                                                                                verdict) -> None:
    """The plan of a problem too large for every output whole, on the CPU: a fork of this process runs the job."""
    import dataclasses
    from pathlib import Path

    import msgspec

    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import trial, zygote
    from kernelzero.schemas.messages import Job, JobAnswer

    planned = trial.TrialRun._plan
    monkeypatch.setattr(trial.TrialRun, "_plan", lambda self, fp: dataclasses.replace(planned(self, fp), whole_outputs=1))
    monkeypatch.setattr(digest, "SAMPLES", 64)  # of the 512 elements, and sums of 32: a digest, not a copy
    monkeypatch.setattr(digest, "BLOCKS", 16)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    here = Path(__file__).parent
    job = Job(problem_src=(here / "problems" / "relu.py").read_text(),
              candidate_src=(here / "candidates" / f"{candidate}.py").read_text(), device="cpu",
              scratch_dir=str(tmp_path), config=EvaluatorConfig(device="cpu", timeout_s=60, cpu_timed_calls=20))
    result = msgspec.msgpack.decode(zygote.run_forked(job), type=JobAnswer).result
    assert (result.verdict, result.reason) == verdict, result.evidence
    if verdict[0] == "incorrect":  # a timing set's output, judged by its digest
        assert result.evidence["phase"] == "timing" and "judged by a digest" in result.evidence["detail"]
