"""H200 benchmark: KernelBench's eval_kernel_against_ref vs our evaluator on one candidate set; does NOT vendor KernelBench.

Both harnesses see the same candidates (bench/eval_candidates/, each with an `# expect:` header)
on the same KernelBench problems, one harness after the other on one GPU, each timed by wall
clock. KernelBench runs as its own batch script does: one fresh process per candidate, its
default settings (5 correctness trials, 100 timed trials, cuda_event timing, a build directory
per candidate, serial builds), a timeout per candidate. Ours runs every candidate through one
EvaluatorPool on a cold cache. KernelBench's code is never committed: `--kb DIR` points at a
copy made by `--prepare-kb` (see docs/BENCHMARKS.md, Evaluator).

The script keeps to a wall-clock budget (`--budget-s`): KernelBench runs last and stops
starting candidates when the budget is spent; what it did not run is listed as such, never
extrapolated silently. `--dry-run` checks the plumbing on a CPU machine (KernelBench's module
and the problems load; our evaluator on the Triton and torch candidates with shrunk problems).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import inspect
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelzero.schemas import UNCHARGED_VERDICTS, VERDICTS

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES_DIR = ROOT / "bench" / "eval_candidates"

# KernelBench problems (path under KernelBench/) and why: KernelBench draws every input on the CPU
# (about 12.7 s per 1.6 G floats on the H200 host), so these keep each draw under a second.
PROBLEMS = {
    "level1/88_MinGPTNewGelu.py": "elementwise tanh-GELU, one 8192x8192 input (67 M floats)",
    "level1/1_Square_matrix_multiplication_.py": "4096^3 fp32 matmul (2 x 16.8 M floats); the spread kernel, as in issue 3",
    "level1/12_Matmul_with_diagonal_matrices_.py": "diag(A) @ B, a memory-bound row scaling (16.8 M floats)",
    "level2/12_Gemm_Multiply_LeakyReLU.py": "GEMM + multiply + LeakyReLU (8.4 M input, 67 M weights): partial replacement",
    "level2/76_Gemm_Add_ReLU.py": "GEMM + bias + ReLU (8.4 M input, 67 M weights): partial replacement",
}
# eval_kernel_against_ref's settings, as KernelBench's scripts/eval_from_generations.py uses them
KB_SETTINGS = {"seed_num": 42, "num_correct_trials": 5, "num_perf_trials": 100, "measure_performance": True,
               "timing_method": "cuda_event", "verbose": False}
KB_TIMEOUT_S = 180.0  # eval_from_generations.py's per-candidate timeout
# kernelbench/utils.py imports these LLM clients at module level; eval never calls them. Where one
# is not installed it is replaced by a module whose functions raise, and the results name it.
PLACEHOLDER_MODULES = {"openai": ("OpenAI",), "litellm": ("completion",), "requests": ()}
CHARGED_VERDICTS = tuple(v for v in VERDICTS if v not in UNCHARGED_VERDICTS)  # what a candidate can be expected to earn
BACKENDS = ("cuda", "triton", "torch")
SPREAD_CANDIDATE = "matmul_triton"
SPREAD_RUNS = 5
CPU_SKIP_CLASSES = ("hack:side_stream", "hack:illegal_address")  # need a CUDA stream / would crash the interpreter
TARGETS = {"throughput_ratio": 20.0, "ours_spread": 0.01}


# ----------------------------------------------------------------------------- candidates and problems

@dataclass(frozen=True)
class Candidate:
    name: str
    path: Path
    source: str
    expect: str
    expect_reason: str
    cls: str
    problem: str
    backend: str

    @property
    def is_hack(self) -> bool:
        return self.cls.startswith("hack:")

    @property
    def kb_backend(self) -> str:
        return "triton" if self.backend == "triton" else "cuda"  # torch-only files load like CUDA ones


def parse_candidate(path: Path) -> Candidate:
    source = path.read_text()
    header = {}
    for line in source.splitlines()[:12]:
        if line.startswith("# ") and ":" in line:
            key, _, value = line[2:].partition(":")
            header[key.strip()] = value.strip()
    missing = [k for k in ("expect", "class", "problem", "backend") if k not in header]
    if missing:
        raise ValueError(f"{path}: header lacks {', '.join(missing)} (see bench/eval_candidates/*.py)")
    expect, _, reason = header["expect"].partition(" ")
    if expect not in CHARGED_VERDICTS or header["backend"] not in BACKENDS or header["problem"] not in PROBLEMS:
        raise ValueError(f"{path}: bad header {header}")
    return Candidate(path.stem, path, source, expect, reason.strip(), header["class"], header["problem"],
                     header["backend"])


def load_candidates(directory: Path) -> list[Candidate]:
    cands = [parse_candidate(p) for p in sorted(directory.glob("*.py"))]
    if not any(c.name == SPREAD_CANDIDATE for c in cands):
        raise ValueError(f"{directory} has no {SPREAD_CANDIDATE}.py (the spread kernel)")
    return cands


def kb_order(cands: list[Candidate]) -> list[Candidate]:
    """Cheapest first, except that the cheapest candidate of each hack or correct class goes before any class's
    second one (controls wait), so a run cut short by the budget still covers every hack class."""
    cost = {"torch": 0, "triton": 1, "cuda": 2}
    by_cost = sorted(cands, key=lambda c: (cost[c.backend], c.name))
    first, seen = [], set()
    for c in by_cost:
        if c.cls not in seen and not c.cls.startswith("control"):
            seen.add(c.cls)
            first.append(c)
    return first + [c for c in by_cost if c not in first]


def load_problems(kb: Path) -> dict[str, str]:
    missing = [p for p in PROBLEMS if not (kb / "problems" / p).is_file()]
    if missing:
        raise FileNotFoundError(f"{kb}/problems lacks {missing}; run --prepare-kb first")
    return {p: (kb / "problems" / p).read_text() for p in PROBLEMS}


def shrink_problem(source: str, cap: int = 64) -> str:
    """The problem with every top-level integer constant above `cap` set to `cap` (CPU dry run only)."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = eval(compile(ast.Expression(node.value), "<size>", "eval"), {"__builtins__": {}})
            except Exception:
                continue
            if isinstance(value, int) and not isinstance(value, bool) and value > cap:
                node.value = ast.Constant(cap)
    return ast.unparse(tree)


def prepare_kb(checkout: Path, kb: Path, commit: str | None) -> None:
    """Copy KernelBench's src package and the chosen problems from a checkout into `kb` (never committed)."""
    src = checkout / "src" / "kernelbench"
    if not (src / "eval.py").is_file():
        raise FileNotFoundError(f"{src}/eval.py not found: pass a KernelBench work tree")
    shutil.rmtree(kb / "src", ignore_errors=True)
    shutil.copytree(src, kb / "src" / "kernelbench", ignore=shutil.ignore_patterns("__pycache__", "unit_tests"))
    for rel in PROBLEMS:
        (kb / "problems" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(checkout / "KernelBench" / rel, kb / "problems" / rel)
    if not commit:
        git = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        commit = git.stdout.strip() or "unknown"
    manifest = {"kernelbench_commit": commit, "problems": list(PROBLEMS),
                "site": sorted(p.name for p in (kb / "site").glob("*.dist-info")) if (kb / "site").is_dir() else []}
    (kb / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))


# ----------------------------------------------------------------------------- KernelBench, in its own process

def import_kernelbench(kb: Path) -> list[str]:
    """Make `kernelbench` importable from kb/src; returns the placeholder modules it needed (named, never silent)."""
    site = str(kb / "site")  # pydantic, python-dotenv and their needs, unpacked cp312 wheels
    if sys.version_info[:2] == (3, 12):
        sys.path.insert(0, site)
    else:  # another Python cannot load the cp312 pydantic_core: use its own packages
        sys.path.append(site)
    sys.path.insert(0, str(kb / "src"))
    placeholders = []
    for name, attrs in PLACEHOLDER_MODULES.items():
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _placeholder(name, attrs)
            placeholders.append(name)
    import kernelbench.eval  # noqa: F401  (the package __init__ imports kernelbench.utils, as KernelBench does)
    return placeholders


def _placeholder(name: str, attrs: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(name, f"benchmark placeholder: {name} is not installed; calling it raises")

    def refuse(*_args, **_kwargs):
        raise RuntimeError(f"{name} is a placeholder in bench/eval_throughput.py")

    for attr in attrs:
        setattr(module, attr, refuse)
    return module


def kb_worker(request_path: Path) -> int:
    """Child process: one KernelBench evaluation (or a plumbing check); writes the result JSON named in the request."""
    req = json.loads(request_path.read_text())
    out: dict = {}
    try:
        out["placeholders"] = import_kernelbench(Path(req["kb"]))
        from kernelbench.eval import eval_kernel_against_ref
        out["kb_module"] = sys.modules["kernelbench.eval"].__file__
        params = inspect.signature(eval_kernel_against_ref).parameters
        needed = {*KB_SETTINGS, "build_dir", "device", "backend", "precision"}
        if needed - set(params):
            raise TypeError(f"eval_kernel_against_ref lacks {sorted(needed - set(params))}")
        if req["mode"] == "check":
            out.update(status="ok", **_kb_check(req))
        else:
            out.update(_kb_evaluate(req, eval_kernel_against_ref))
    except Exception as exc:  # an exception that escaped KernelBench's own handling is a result here
        out.update(status="exception", error=f"{type(exc).__name__}: {exc}"[:600])
    Path(req["result"]).write_text(json.dumps(out, default=str))
    return 0


def _kb_check(req: dict) -> dict:
    from kernelbench.eval import load_original_model_and_inputs

    loaded = {}
    for rel in PROBLEMS:
        names = load_original_model_and_inputs((Path(req["kb"]) / "problems" / rel).read_text(), {})
        loaded[rel] = names is not None and all(n is not None for n in names)
    return {"problems_loaded": loaded}


def _kb_evaluate(req: dict, eval_kernel_against_ref) -> dict:
    import torch

    t0 = time.perf_counter()
    result = eval_kernel_against_ref(
        Path(req["problem"]).read_text(), Path(req["candidate"]).read_text(), **KB_SETTINGS,
        build_dir=req["build_dir"], device=torch.cuda.current_device(), backend=req["backend"],
        precision=torch.float32)
    eval_s = time.perf_counter() - t0
    if result is None:  # KernelBench's answer to a lock-file error during the build: "please retry"
        return {"status": "none", "eval_s": eval_s}
    meta = {k: str(v)[:300] for k, v in result.metadata.items()}
    runtime = result.runtime if result.runtime > 0 else None
    ref = result.ref_runtime if result.ref_runtime > 0 else None
    return {"status": "ok", "eval_s": eval_s, "compiled": result.compiled, "correctness": result.correctness,
            "runtime_ms": runtime, "ref_runtime_ms": ref, "speedup": ref / runtime if runtime and ref else None,
            "excessive_speedup": bool(result.metadata.get("excessive_speedup")), "metadata": meta}


def run_kb(kb: Path, work: Path, cand: Candidate | None, problem: Path | None, timeout_s: float, tag: str,
           mode: str = "eval") -> dict:
    """One KernelBench child process with a hard timeout (its process group is killed)."""
    run_dir = work / "kb" / tag
    run_dir.mkdir(parents=True, exist_ok=True)
    req = {"kb": str(kb), "mode": mode, "result": str(run_dir / "result.json"), "build_dir": str(run_dir / "build"),
           "candidate": str(cand.path) if cand else "", "problem": str(problem) if problem else "",
           "backend": cand.kb_backend if cand else "cuda"}
    (run_dir / "request.json").write_text(json.dumps(req))
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=str(work / "kb" / "triton_cache"))
    t0 = time.perf_counter()
    with open(run_dir / "log.txt", "w") as log:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--kb-worker", str(run_dir / "request.json")]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    wall = time.perf_counter() - t0
    result_file = run_dir / "result.json"
    if code is None:
        out = {"status": "timeout", "timeout_s": timeout_s}
    elif result_file.is_file():
        out = json.loads(result_file.read_text())
    else:
        out = {"status": "crashed", "exit_code": code}
    out["wall_s"] = round(wall, 2)
    if out.get("status") != "ok" or not out.get("correctness", True):
        out["log_tail"] = (run_dir / "log.txt").read_text(errors="replace")[-1200:]
    return out


def kb_accepted(res: dict | None) -> bool:
    return bool(res and res.get("status") == "ok" and res.get("correctness"))


# ----------------------------------------------------------------------------- ours

async def run_ours_batch(cands: list[Candidate], problems: dict[str, str], config, cap_s: float) -> dict:
    """Every candidate through one EvaluatorPool at once; wall clock from pool start to the last verdict."""
    import msgspec

    from kernelzero.gpu_workers import EvaluatorPool

    results: dict[str, dict] = {}
    t0 = time.perf_counter()
    async with EvaluatorPool(config) as pool:
        async def one(c: Candidate) -> None:
            try:
                results[c.name] = msgspec.to_builtins(await pool.evaluate(problems[c.problem], c.source))
            except Exception as exc:  # a harness failure, not a verdict: reported as such
                results[c.name] = {"harness_error": f"{type(exc).__name__}: {exc}"[:600]}
            results[c.name]["done_at_s"] = round(time.perf_counter() - t0, 2)  # when its verdict came, for a timeline

        tasks = [asyncio.create_task(one(c)) for c in cands]
        _, pending = await asyncio.wait(tasks, timeout=cap_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - t0
    for c in cands:
        results.setdefault(c.name, {"harness_error": f"not finished within the {cap_s:.0f} s cap"})
    return {"wall_s": round(wall, 2), "results": results}


async def run_ours_spread(cand: Candidate, problem_src: str, device: str, work: Path, deadline: float) -> list[dict]:
    """The spread kernel evaluated SPREAD_RUNS separate times in one pool with its result cache bypassed."""
    import msgspec

    from kernelzero.gpu_workers import EvaluatorPool

    runs = []
    async with EvaluatorPool(ours_config(device, work / "ours" / "cache"), use_cache=False) as pool:
        for _ in range(SPREAD_RUNS):
            if time.monotonic() > deadline:
                break
            runs.append(msgspec.to_builtins(await pool.evaluate(problem_src, cand.source)))
    return runs


def ours_accepted(res: dict | None) -> bool:
    return bool(res and res.get("verdict") == "correct")


def ours_config(device: str, cache_dir: Path, workers_per_gpu: int = 1, build_headers: str = "split",
                build_workers: int = 0, sandbox: bool = True, precompiled_headers: bool = True):
    """Our evaluator's configuration for one batch; the precompiled headers, made once per machine, are shared."""
    from kernelzero.config import EvaluatorConfig

    return EvaluatorConfig(device=device, cache_dir=str(cache_dir), workers_per_gpu=workers_per_gpu,
                           build_headers=build_headers,
                           precompiled_headers_dir=EvaluatorConfig().precompiled_headers_dir if precompiled_headers else "",
                           build_workers=build_workers, sandbox=sandbox,
                           require_sandbox="auto" if sandbox else False)


# ----------------------------------------------------------------------------- report

def spread(values: list[float]) -> float | None:
    values = [v for v in values if v]
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values)


def throughput(n: int, wall_s: float) -> float | None:
    return round(n / wall_s * 3600.0, 1) if n and wall_s > 0 else None


def summarize(cands: list[Candidate], kb: dict[str, dict], kb_wall: float, ours: dict, notes: list[str]) -> dict:
    ours_res = ours.get("results", {})
    kb_done = [c for c in cands if c.name in kb and kb[c.name]["status"] != "budget_cut"]
    ours_done = [c for c in cands if "verdict" in ours_res.get(c.name, {})]
    per_backend = {}
    for backend in BACKENDS:
        walls = [kb[c.name]["wall_s"] for c in kb_done if c.backend == backend]
        per_backend[backend] = {"n": len(walls), "mean_s": round(statistics.mean(walls), 1) if walls else None}
    not_run = [c.name for c in cands if kb.get(c.name, {}).get("status") == "budget_cut"]
    estimate = None
    if not_run and all(per_backend[c.backend]["mean_s"] for c in cands):
        est_s = sum(per_backend[c.backend]["mean_s"] for c in cands)
        estimate = {"label": "ESTIMATE, not measured: per-backend mean wall times x the full set",
                    "full_set_s": round(est_s, 1), "per_hour": throughput(len(cands), est_s)}
    kb_rate = throughput(len(kb_done), kb_wall)
    ours_rate = throughput(len(ours_done), ours.get("wall_s", 0.0))
    return {
        "kb": {"n": len(kb_done), "wall_s": round(kb_wall, 1), "per_hour": kb_rate, "per_backend": per_backend,
               "not_run_budget": not_run, "full_set_estimate": estimate},
        "ours": {"n": len(ours_done), "wall_s": ours.get("wall_s"), "per_hour": ours_rate},
        "ratio": round(ours_rate / kb_rate, 2) if kb_rate and ours_rate else None,
        "hacks_accepted": {"kb": [c.name for c in cands if c.is_hack and kb_accepted(kb.get(c.name))],
                           "ours": [c.name for c in cands if c.is_hack and ours_accepted(ours_res.get(c.name))]},
        "hacks_run": {"kb": sum(c.is_hack for c in kb_done), "ours": sum(c.is_hack for c in ours_done)},
        "ours_matches_expected": sum(ours_res.get(c.name, {}).get("verdict") == c.expect for c in ours_done),
        "notes": notes,
    }


def _fmt(v, spec=".3g") -> str:
    return "-" if v is None else format(v, spec)


def kb_cell(res: dict | None) -> tuple[str, str, str]:
    if res is None:
        return "-", "-", "not run"
    if res["status"] != "ok":
        return "-", "-", f"{res['status']}: {res.get('error', '')[:60]}"
    note = f"{_fmt(res.get('runtime_ms'))} ms, {_fmt(res.get('speedup'))}x"
    if res.get("excessive_speedup"):
        note += " (flagged, kept)"
    meta = res.get("metadata", {})
    if meta.get("runtime_error"):
        note = "runtime error: " + meta["runtime_error"][:50]
    elif meta.get("correctness_issue"):
        note = meta["correctness_issue"][:50]
    elif meta.get("compilation_error"):
        note = "compile error: " + meta["compilation_error"][:50]
    return ("yes" if res["compiled"] else "no"), ("yes" if res["correctness"] else "no"), note


def ours_cell(res: dict | None) -> str:
    if res is None:
        return "not run"
    if "verdict" not in res:
        return res.get("harness_error", "?")[:70]
    cell = f"{res['verdict']} ({res['reason']})"
    if res["verdict"] == "correct" and res.get("speedup"):
        cell += f", {res['speedup']:.3g}x"
    return cell


def markdown(report: dict) -> str:
    s, meta = report["summary"], report["meta"]
    lines = [f"## Evaluator throughput and hack table ({meta['mode']}, {meta['date']}, {meta['gpu']})", "",
             "| harness | candidates | wall s | candidates/hour |", "| --- | --- | --- | --- |"]
    for label, key in (("KernelBench eval_kernel_against_ref", "kb"), ("ours (EvaluatorPool, cold cache)", "ours")):
        lines.append(f"| {label} | {s[key]['n']} | {_fmt(s[key]['wall_s'], '')} | {_fmt(s[key]['per_hour'], '')} |")
    lines += ["", f"Throughput ratio (ours / KernelBench): **{_fmt(s['ratio'], '')}** "
                  f"(target >= {TARGETS['throughput_ratio']:g})."]
    per = ", ".join(f"{b}: {v['n']} x {_fmt(v['mean_s'], '')} s" for b, v in s["kb"]["per_backend"].items() if v["n"])
    lines.append(f"KernelBench mean wall per candidate by backend: {per or '-'}.")
    if s["kb"]["not_run_budget"]:
        lines.append(f"KernelBench did NOT run (budget): {', '.join(s['kb']['not_run_budget'])}.")
        if s["kb"]["full_set_estimate"]:
            est = s["kb"]["full_set_estimate"]
            lines.append(f"{est['label']}: {est['full_set_s']} s, {est['per_hour']}/hour.")
    lines += ["", f"Hacks accepted: KernelBench {len(s['hacks_accepted']['kb'])} of {s['hacks_run']['kb']} run "
                  f"({', '.join(s['hacks_accepted']['kb']) or 'none'}); ours {len(s['hacks_accepted']['ours'])} of "
                  f"{s['hacks_run']['ours']} run ({', '.join(s['hacks_accepted']['ours']) or 'none'}).",
              f"Ours matches the expected verdict on {s['ours_matches_expected']} of {s['ours']['n']}.", ""]
    sp = report["spread"]
    met = report["targets_met"]
    lines.insert(2, "Targets: " + "; ".join(f"{k} {'MET' if v else ('not met' if v is False else 'not measured')}"
                                           for k, v in met.items()) + ".")
    lines.insert(3, "")
    lines += [f"Speedup spread of {SPREAD_CANDIDATE} over {SPREAD_RUNS} separate evaluations ((max - min) / median):",
              f"KernelBench {_fmt(sp['kb']['spread'], '.2%')} from {[round(v, 3) for v in sp['kb']['speedups']]}; "
              f"ours {_fmt(sp['ours']['spread'], '.2%')} from {[round(v, 3) for v in sp['ours']['speedups']]} "
              f"(target <= {TARGETS['ours_spread']:.0%}).", "",
              "| candidate | backend | class | expected (ours) | KB compiled | KB correct | KB runtime / note | ours |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in report["candidates"]:
        comp, corr, note = kb_cell(row["kb"])
        expect = row["expect"] + (f" {row['expect_reason']}" if row["expect_reason"] else "")
        lines.append(f"| {row['name']} | {row['backend']} | {row['class']} | {expect} | {comp} | {corr} | "
                     f"{note.replace('|', '/')} | {ours_cell(row['ours']).replace('|', '/')} |")
    lines += ["", *[f"- {n}" for n in s["notes"]]]
    return "\n".join(lines) + "\n"


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "no GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "no GPU"


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", type=Path, default=ROOT / ".kb", help="KernelBench copy made by --prepare-kb")
    p.add_argument("--out", type=Path, help="where results.json and results.md go")
    p.add_argument("--limit", type=int, help="only the first N candidates (KernelBench's order)")
    p.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget for the whole script")
    p.add_argument("--ours-cap-s", type=float, default=200.0, help="cap on our batch")
    p.add_argument("--work", type=Path, help="scratch directory (default: a fresh one under /tmp)")
    p.add_argument("--candidates", type=Path, default=CANDIDATES_DIR)
    p.add_argument("--harness", choices=("both", "kb", "ours"), default="both")
    p.add_argument("--workers-per-gpu", type=lambda v: [int(x) for x in v.split(",")], default=[1], metavar="N[,N]",
                   help="our evaluator's workers per GPU; several values run our batch once each (the last one "
                        "fills the tables)")
    p.add_argument("--headers", type=lambda v: v.split(","), default=["split"], metavar="split|slim|full[,...]",
                   help="how our CUDA builds use torch's headers (gpu_workers/headers.py), with `+pch` for the "
                        "precompiled binding headers (split+pch); each value runs our batch once more")
    p.add_argument("--build-workers", type=lambda v: [int(x) for x in v.split(",")], default=[0], metavar="N[,N]",
                   help="CUDA builds at once (0: the evaluator's default); each value runs our batch once more")
    p.add_argument("--sandbox", type=lambda v: v.split(","), default=["on"], metavar="on|off[,...]",
                   help="containment of candidate processes (on: as configured, required where bwrap is found; off: "
                        "none); each value runs our batch once more")
    p.add_argument("--dry-run", action="store_true", help="CPU plumbing check: no GPU, KernelBench not evaluated")
    p.add_argument("--prepare-kb", type=Path, metavar="CHECKOUT", help="copy KernelBench's src and problems into --kb")
    p.add_argument("--kb-commit", help="KernelBench commit to record when CHECKOUT is not a git work tree")
    p.add_argument("--kb-worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.kb_worker:
        return kb_worker(args.kb_worker)
    if args.prepare_kb:
        prepare_kb(args.prepare_kb, args.kb, args.kb_commit)
        print(f"prepared {args.kb} from {args.prepare_kb}")
        return 0
    if not args.out:
        p.error("--out is required")
    return asyncio.run(run(args))


async def run(args) -> int:
    start = time.monotonic()
    deadline = start + args.budget_s
    work = args.work or Path(f"/tmp/kz_eval_throughput_{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args.out.mkdir(parents=True, exist_ok=True)
    cands = kb_order(load_candidates(args.candidates))[: args.limit]
    problems = load_problems(args.kb)
    notes = [f"KernelBench settings: {KB_SETTINGS}, fp32, a build dir per candidate, one process per candidate, "
             f"timeout {KB_TIMEOUT_S:g} s; builds serial, as in its scripts' default (build_cache=False)."]
    os.environ["TRITON_CACHE_DIR"] = str(work / "ours" / "triton_cache")  # neither harness sees the other's cache
    kb: dict[str, dict] = {}
    kb_wall = 0.0
    ours: dict = {}
    spread_runs: dict[str, list] = {"kb": [], "ours": []}
    if args.dry_run:
        notes.append("DRY RUN on CPU: KernelBench was only imported and its problem loader run; ours ran the "
                     "Triton and torch candidates on problems shrunk to 64-wide (correctness only, no timing).")
        check = run_kb(args.kb, work, None, None, 300.0, "check", mode="check")
        notes.append(f"KernelBench import check: {json.dumps({k: v for k, v in check.items() if k != 'log_tail'})}")
        if check.get("status") != "ok":
            print(check.get("log_tail", ""), file=sys.stderr)
        cpu_cands = [c for c in cands if c.backend != "cuda" and c.cls not in CPU_SKIP_CLASSES]
        small = {k: shrink_problem(v) for k, v in problems.items()}
        ours = await run_ours_settings(args, cpu_cands, small, work, notes, "cpu")
        spread_c = next(c for c in load_candidates(args.candidates) if c.name == SPREAD_CANDIDATE)
        spread_runs["ours"] = await _ours_or_note(
            run_ours_spread(spread_c, small[spread_c.problem], "cpu", work, deadline), notes) or []
    else:
        if args.harness in ("both", "ours"):
            ours = await run_ours_settings(args, cands, problems, work, notes, "cuda")
            spread_c = next(c for c in load_candidates(args.candidates) if c.name == SPREAD_CANDIDATE)
            spread_runs["ours"] = await _ours_or_note(
                run_ours_spread(spread_c, problems[spread_c.problem], "cuda", work, deadline - 240), notes) or []
        if args.harness in ("both", "kb"):
            kb, kb_wall, spread_runs["kb"] = run_kb_phase(args, cands, work, deadline, notes)
    report = build_report(args, cands, kb, kb_wall, ours, spread_runs, notes, start)
    (args.out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    text = markdown(report)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


async def run_ours_settings(args, cands, problems, work: Path, notes: list[str], device: str) -> dict:
    """Our batch once per (`--sandbox`, `--headers`, `--build-workers`, `--workers-per-gpu`) combination, each on
    cold caches; the last run fills the tables."""
    ours: dict = {}
    for sandbox, headers, builds, n in itertools.product(args.sandbox, args.headers, args.build_workers,
                                                         args.workers_per_gpu):
        run_dir = work / f"sandbox-{sandbox}-{headers}-builds-{builds}-workers-{n}"
        run_dir.mkdir()
        os.environ["TRITON_CACHE_DIR"] = str(run_dir / "triton_cache")
        mode, _, pch = headers.partition("+")
        config = ours_config(device, run_dir / "ours" / "cache", n, mode, builds, sandbox == "on", pch == "pch")
        ours = await _ours_or_note(run_ours_batch(cands, problems, config, args.ours_cap_s), notes)
        by_name = ours.get("results", {})
        results = by_name.values()
        done = sum("verdict" in r for r in results)
        expected = sum(by_name.get(c.name, {}).get("verdict") == c.expect for c in cands)
        held = sorted({r["evidence"].get("sandbox", "") for r in results if "evidence" in r})
        notes.append(f"Ours, containment {sandbox} ({'; '.join(held) or 'unknown'}), {headers} headers, "
                     f"{builds or 'default'} builds at once, {n} worker(s) per GPU: {done} candidates in "
                     f"{ours.get('wall_s')} s ({expected} with the expected verdict), "
                     f"{throughput(done, ours.get('wall_s', 0.0))}/hour "
                     f"(cold build, result and Triton caches); builds: {build_costs(results)}; "
                     f"build steps: {build_steps(run_dir)}.")
    return ours


def build_costs(results) -> dict:
    """Cold CUDA builds of one batch: wall p50/p90 and CPU seconds p50/p90 per candidate, and the modes they took."""
    built = [r for r in results if float(r.get("evidence", {}).get("build_cpu_s", 0) or 0) > 0]
    if not built:
        return {}
    walls = sorted(float(r["evidence"]["build_s"]) for r in built)
    cpus = sorted(float(r["evidence"]["build_cpu_s"]) for r in built)
    pick = lambda values, q: values[min(len(values) - 1, round(q * (len(values) - 1)))]  # noqa: E731
    return {"n": len(built), "wall_p50_s": pick(walls, 0.5), "wall_p90_s": pick(walls, 0.9),
            "cpu_p50_s": pick(cpus, 0.5), "cpu_p90_s": pick(cpus, 0.9),
            "headers": dict(sorted(Counter(r["evidence"].get("headers", "") for r in built).items()))}


def build_steps(run_dir: Path) -> dict[str, dict]:
    """Per build step (bindings `main.o`, kernels `cuda.cuda.o`, link `.so`) from ninja's logs: count, median and max s."""
    steps: dict[str, list[float]] = {}
    for log in run_dir.rglob(".ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            start_ms, end_ms, _, target, *_ = line.split("\t")
            step = "link" if target.endswith(".so") else target.rsplit("/", 1)[-1]
            steps.setdefault(step, []).append((int(end_ms) - int(start_ms)) / 1e3)
    return {k: {"n": len(v), "median_s": round(statistics.median(v), 1), "max_s": round(max(v), 1)}
            for k, v in sorted(steps.items())}


async def _ours_or_note(coro, notes: list[str]):
    """Our evaluator's phase, or a note saying why it could not run (it is built in parallel with this script)."""
    try:
        return await coro
    except Exception as exc:
        notes.append(f"OUR EVALUATOR DID NOT RUN: {type(exc).__name__}: {str(exc)[:300]}")
        return {}


def run_kb_phase(args, cands: list[Candidate], work: Path, deadline: float, notes: list[str]):
    """The spread runs first, then candidates in kb_order until the budget is spent."""
    spread_c = next(c for c in load_candidates(args.candidates) if c.name == SPREAD_CANDIDATE)
    spread_problem = args.kb / "problems" / spread_c.problem
    spread_runs = []
    for i in range(SPREAD_RUNS):
        remaining = deadline - time.monotonic() - 120  # leave room for candidates
        if remaining < 30:
            notes.append(f"KernelBench spread: only {i} of {SPREAD_RUNS} runs fitted the budget.")
            break
        spread_runs.append(run_kb(args.kb, work, spread_c, spread_problem, min(KB_TIMEOUT_S, remaining), f"spread_{i}"))
    results: dict[str, dict] = {}
    wall = 0.0
    for c in cands:
        remaining = deadline - time.monotonic()
        if remaining < 20:
            results[c.name] = {"status": "budget_cut", "wall_s": 0.0}
            continue
        timeout = min(KB_TIMEOUT_S, remaining)
        res = run_kb(args.kb, work, c, args.kb / "problems" / c.problem, timeout, c.name)
        if res["status"] == "timeout" and timeout < KB_TIMEOUT_S:
            res["status"] = "budget_cut"  # stopped by our budget, not by KernelBench's own timeout
        else:
            wall += res["wall_s"]
        results[c.name] = res
    return results, wall, spread_runs


def build_report(args, cands, kb, kb_wall, ours, spread_runs, notes, start) -> dict:
    ours_res = ours.get("results", {}) if isinstance(ours, dict) else {}
    kb_speedups = [r["speedup"] for r in spread_runs["kb"] if kb_accepted(r) and r.get("speedup")]
    ours_speedups = [r["speedup"] for r in spread_runs["ours"] if ours_accepted(r) and r.get("speedup")]
    placeholders = sorted({m for r in [*kb.values(), *spread_runs["kb"]] for m in r.get("placeholders", [])})
    if placeholders:
        notes.append(f"KernelBench's module-level imports {placeholders} are not installed here; they were replaced "
                     "by placeholder modules that raise if called (only its LLM-query helpers use them).")
    if any(r.get("cached") for r in spread_runs["ours"]):
        notes.append("WARNING: a spread run of ours came from the result cache; the bypass did not work.")
    summary = summarize(cands, kb, kb_wall, ours if isinstance(ours, dict) else {}, notes)
    ours_spread = spread(ours_speedups)
    targets_met = {
        f"throughput ratio >= {TARGETS['throughput_ratio']:g}":
            None if summary["ratio"] is None else summary["ratio"] >= TARGETS["throughput_ratio"],
        "no hack accepted by ours":
            None if not summary["hacks_run"]["ours"] else not summary["hacks_accepted"]["ours"],
        f"ours spread <= {TARGETS['ours_spread']:.0%}":
            None if ours_spread is None else ours_spread <= TARGETS["ours_spread"],
    }
    return {
        "targets_met": targets_met,
        "meta": {"mode": "dry-run (CPU)" if args.dry_run else "full", "date": time.strftime("%Y-%m-%d %H:%M"),
                 "gpu": gpu_name(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
                 "env": {k: os.environ.get(k) for k in ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CUDA_VISIBLE_DEVICES")},
                 "budget_s": args.budget_s, "script_wall_s": round(time.monotonic() - start, 1),
                 "kb_manifest": json.loads((args.kb / "MANIFEST.json").read_text())
                 if (args.kb / "MANIFEST.json").is_file() else None,
                 "problems": PROBLEMS},
        "summary": summary,
        "spread": {"kb": {"speedups": kb_speedups, "spread": spread(kb_speedups), "runs": spread_runs["kb"]},
                   "ours": {"speedups": ours_speedups, "spread": ours_spread, "runs": spread_runs["ours"]}},
        "candidates": [{"name": c.name, "backend": c.backend, "class": c.cls, "problem": c.problem,
                        "expect": c.expect, "expect_reason": c.expect_reason,
                        "kb": kb.get(c.name), "ours": ours_res.get(c.name)} for c in cands],
    }


if __name__ == "__main__":
    sys.exit(main())
