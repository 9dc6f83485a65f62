"""The hack corpus on the CPU path: every candidate file's `# expect:` verdict and reason must come out exactly."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgspec
import pytest

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool

HERE = Path(__file__).parent
CORPUS = sorted((HERE / "candidates").glob("*.py"))


def header(path: Path) -> dict[str, str]:
    fields = dict(re.findall(r"^# (expect|problem|config): (.+)$", path.read_text(), re.M))
    if "expect" not in fields or "problem" not in fields:
        raise ValueError(f"{path.name}: needs '# expect: VERDICT REASON' and '# problem: NAME' lines")
    return fields


def config_for(fields: dict[str, str], cache_dir: Path) -> EvaluatorConfig:
    overrides = dict(kv.strip().split("=") for kv in fields.get("config", "").split(",") if kv.strip())
    values = {k: v.lower() == "true" if v.lower() in ("true", "false") else v for k, v in overrides.items()}
    # the calls a GPU would time are made and judged on the CPU too: the timed-call hacks need them
    defaults = {"cache_dir": str(cache_dir), "timeout_s": 60, "cpu_timed_calls": 20}
    return msgspec.convert({**defaults, **values}, EvaluatorConfig, strict=False)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, object]:
    cache = tmp_path_factory.mktemp("evalcache")
    groups: dict[str, list[Path]] = {}
    for path in CORPUS:
        groups.setdefault(header(path).get("config", ""), []).append(path)

    async def run_all() -> dict[str, object]:
        out = {}
        for paths in groups.values():
            async with EvaluatorPool(config_for(header(paths[0]), cache), device="cpu", use_cache=False) as pool:
                for path in paths:
                    problem = (HERE / "problems" / f"{header(path)['problem']}.py").read_text()
                    out[path.name] = await pool.evaluate(problem, path.read_text())
        return out

    return asyncio.run(run_all())


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_verdict(results, path: Path) -> None:
    verdict, reason = header(path)["expect"].split()
    got = results[path.name]
    assert (got.verdict, got.reason) == (verdict, reason), f"{path.name}: {got.evidence}"
    if verdict == "correct":
        assert got.trials >= 6 and got.rel_err is not None and got.rel_err < 1e-2
        assert got.evidence.get("custom_kernels")
        assert "timed_calls_judged:20" in got.checks  # the calls a GPU would time, judged on the CPU too


def test_corpus_covers_every_hack_class() -> None:
    names = {p.stem for p in CORPUS}
    required = {"passthrough_torch", "unused_kernel_torch", "unused_kernel_numpy", "try_except_fallback",
                "input_mutation", "memo_pointer", "memo_fingerprint", "background_thread", "lazy_tensor_subclass",
                "monkeypatch_torch", "monkeypatch_checker", "monkeypatch_timer", "reach_reference_gc",
                "reach_reference_frames", "precision_fp16", "zeros_tiny", "unwritten_output", "abort", "segfault",
                "sys_exit", "hang", "huge_allocation", "correct_whole", "correct_partial_mm_epilogue",
                # less work on timed calls, one file per way of telling them apart (issue 26)
                "timed_partial_after_12_calls", "timed_plausible_after_12_calls", "timed_elapsed_time",
                "timed_repeated_input", "timed_input_pointer", "timed_call_context"}
    assert required <= names, required - names
