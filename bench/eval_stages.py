"""Where one evaluation's time goes on a GPU, and what judging a group of G samples of one module costs against one sample.

Usage: python bench/eval_stages.py --problem PROBLEM.py --candidate CANDIDATE.py --out DIR [--reps 3] [--group 8]
       [--workers 0,8] [--rel-se 0.002,0.01] [--profile]

Two parts, on one problem and one Triton candidate:
- stages: jobs run as a worker runs them (a fork of a process that imported torch and Triton, CUDA not yet
  initialised), uncontained, each stage of gpu_workers/trial.py's TrialRun timed: the problem's reference-only
  job once, then `--reps` candidate jobs that bring its times, as the pool runs them;
- group: the contained pool (workers per GPU as configured, the result cache bypassed) judges one sample alone,
  then `--group` variants of it at once, each against a new module (the problem with a comment added: its
  reference is timed again, as a new module's is); each variant's kernel carries a different comment, so Triton
  compiles it again as it would a different sample's. Wall of each and their ratio (issue 27's target: at most 3x),
  and per sample the seconds it waited for the GPU alone and timed on it (they add up across one GPU's samples).
  `--workers` lists the workers per GPU to try, one pool each (0: the default, from the GPU's memory and cores),
  and `--rel-se` the timing stops to try (`timing_rel_se`, every pair of the two lists in turn, side by side); the
  group's speedups (one kernel, so their spread is between jobs) and clocks against the reference's are reported.
With --profile the candidate jobs run under cProfile (slower: read its shares, not its seconds): DIR/profile.txt
holds the first one's functions by own time, then the evaluator's own by cumulative time; `--group 0` skips the
group.
It changes no verdict and is not a test: a verdict other than `correct` is reported, not asserted.
Writes DIR/stages.json and prints a table last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from eval_gpu_corpus import spread  # a sibling script (bench/ leads sys.path when either is run)

STAGES = ("_start_gpu", "prepare_reference", "time_reference", "count_ref_flops", "import_candidate", "run_trials",
          "proof_of_work", "time_it")


def timed_job(problem_src: str, candidate_src: str, reference: bytes, profile: bool, queue) -> None:
    """One job in this fork (reference-only when `reference` is empty, else bringing those times as msgpack):
    every stage's seconds, the verdict and the reference's times (and its profile, when asked), put on `queue`."""
    import cProfile
    import io
    import pstats

    import msgspec
    import torch
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import trial
    from kernelzero.schemas.messages import Job, ReferenceTiming

    seconds: dict[str, float] = {}

    class TimedRun(trial.TrialRun):
        def __getattribute__(self, name):
            attr = super().__getattribute__(name)
            if name not in STAGES:
                return attr

            def timed(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return attr(*args, **kwargs)
                finally:
                    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
            return timed

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        torch.cuda.set_device(0)
        job = Job(problem_src=problem_src, candidate_src=candidate_src, device="cuda:0", scratch_dir=scratch,
                  config=EvaluatorConfig(), gpu=torch.cuda.get_device_name(0), reference_only=not reference,
                  reference=msgspec.msgpack.decode(reference, type=ReferenceTiming) if reference else None)
        run = TimedRun(job)
        profiler = cProfile.Profile() if profile else None
        result = run.run() if profiler is None else profiler.runcall(run.run)
    seconds["total"] = time.perf_counter() - start
    text = io.StringIO()
    if profiler is not None:
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats("gpu_workers", 60)
    queue.put({"verdict": f"{result.verdict} {result.reason}", "seconds": seconds,
               "reference": msgspec.msgpack.encode(run.reference_timing) if run.reference_timing else b"",
               "speedup": result.speedup, "runtime_ms": result.runtime_ms, "timing_n": result.timing_n,
               "profile": text.getvalue()})


def stages(problem_src: str, candidate_src: str, reps: int, profile: bool = False) -> list[dict]:
    """The reference-only job's stages, then `reps` candidate jobs' that bring its times."""
    import msgspec
    from kernelzero.gpu_workers import trial
    from kernelzero.gpu_workers.zygote import EvaluationJobs
    # a stage renamed in trial.py would otherwise be timed as 0 s without a word
    if missing := [name for name in STAGES if not hasattr(trial.TrialRun, name)]:
        raise SystemExit(f"eval_stages.py: TrialRun has no stage {', '.join(missing)}")
    EvaluationJobs().preload()
    context = multiprocessing.get_context("fork")

    def forked(reference: bytes) -> dict:
        queue = context.Queue()
        child = context.Process(target=timed_job, args=(problem_src, candidate_src, reference,
                                                        profile and bool(reference), queue))
        child.start()
        answer = queue.get()
        child.join()
        return answer

    reference_job = forked(b"")
    if not reference_job["reference"]:
        raise SystemExit(f"eval_stages.py: the reference could not be timed: {reference_job['verdict']}")
    runs = [reference_job] + [forked(reference_job["reference"]) for _ in range(reps)]
    for run in runs:
        run["reference"] = str(msgspec.msgpack.decode(run["reference"])) if run["reference"] else ""
    return runs


def variant(candidate_src: str, i: int) -> str:
    """The candidate with a comment inside each jitted kernel's body: same code, a new Triton compile."""
    lines, out, pending = candidate_src.splitlines(), [], False
    for line in lines:
        out.append(line)
        if line.strip().startswith("@triton.jit"):
            pending = True
        elif pending and line.lstrip().startswith("def "):
            out.append(f"    # variant {i}")
            pending = False
    return "\n".join(out) + "\n"


def evidence_sum(results: list, key: str) -> float:
    return sum(float(r.evidence.get(key, 0.0)) for r in results)


async def group(problem_src: str, candidate_src: str, size: int, workers: int, rel_se: float | None) -> dict:
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers.pool import EvaluatorPool
    with tempfile.TemporaryDirectory() as cache:
        stop = {} if rel_se is None else {"timing_rel_se": rel_se}
        config = EvaluatorConfig(cache_dir=cache, workers_per_gpu=workers, **stop)
        async with EvaluatorPool(config, device="cuda", use_cache=False) as pool:
            start = time.perf_counter()
            one = await pool.evaluate(problem_src, variant(candidate_src, 0))
            one_s = time.perf_counter() - start
            start = time.perf_counter()
            new_module = problem_src + "\n# another module: its reference is timed again\n"
            many = await asyncio.gather(*(pool.evaluate(new_module, variant(candidate_src, i))
                                          for i in range(1, size + 1)))
            group_s = time.perf_counter() - start
            speedups = [r.speedup or 0.0 for r in many]
            return {"workers": pool.workers, "rel_se": config.timing_rel_se, "one_s": one_s, "group_s": group_s,
                    "ratio": group_s / one_s,
                    "one": f"{one.verdict} {one.reason}", "group": [f"{r.verdict} {r.reason}" for r in many],
                    "one_timing_s": evidence_sum([one], "timing_s"),
                    **{f"group_{key}": evidence_sum(many, key) for key in ("timing_s", "turn_wait_s", "warmup_s")},
                    "group_timing_n": [r.timing_n for r in many], "group_speedups": speedups,
                    "group_speedup_spread": spread(speedups),
                    "group_clock_vs_reference": [r.evidence.get("clock_vs_reference", "") for r in many]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=3, help="uncontained jobs timed by stage")
    parser.add_argument("--group", type=int, default=8, help="samples judged at once, G (0: no group)")
    parser.add_argument("--workers", default="0", help="workers per GPU to try, comma-separated (0: the default)")
    parser.add_argument("--rel-se", default="", help="timing stops to try, comma-separated (default: the config's)")
    parser.add_argument("--profile", action="store_true", help="candidate jobs under cProfile: DIR/profile.txt")
    args = parser.parse_args()
    problem_src, candidate_src = args.problem.read_text(), args.candidate.read_text()
    runs = stages(problem_src, candidate_src, args.reps, args.profile)
    stops = [float(v) for v in args.rel_se.split(",")] if args.rel_se else [None]
    judged = [asyncio.run(group(problem_src, candidate_src, args.group, int(w), rel_se))
              for rel_se in stops for w in args.workers.split(",") if args.group]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile:
        (args.out / "profile.txt").write_text(runs[1]["profile"])
        print("\n".join(runs[1]["profile"].splitlines()[:45]))
    (args.out / "stages.json").write_text(json.dumps({"stages": runs, "group": judged}, indent=1))
    reference_job, jobs = runs[0], runs[1:]
    print(f"| stage | reference-only job | candidate job, median of {len(jobs)} |\n|---|---|---|")
    for name in (*STAGES, "total"):
        print(f"| {name} | {reference_job['seconds'].get(name, 0.0):.3f} | "
              f"{statistics.median(r['seconds'].get(name, 0.0) for r in jobs):.3f} |")
    print("reference:", reference_job["reference"])
    print("candidate jobs:", [(r["verdict"], r["runtime_ms"], r["speedup"], r["timing_n"]) for r in jobs])
    for g in judged:
        group_spread = "n/a" if g["group_speedup_spread"] is None else f"{100 * g['group_speedup_spread']:.1f}%"
        print(f"contained, {g['workers']} workers, timing_rel_se {g['rel_se']}: one sample {g['one_s']:.2f} s "
              f"({g['one']}, timed "
              f"{g['one_timing_s']:.2f} s), {args.group} at once {g['group_s']:.2f} s, ratio {g['ratio']:.2f}; "
              f"group verdicts {sorted(set(g['group']))}; summed over the group: timed {g['group_timing_s']:.2f} s "
              f"(warm-up {g['group_warmup_s']:.2f} s), waited for the GPU {g['group_turn_wait_s']:.2f} s; "
              f"timed calls {g['group_timing_n']}; speedups {[round(v, 3) for v in g['group_speedups']]} (spread "
              f"{group_spread}), clocks against the reference's {g['group_clock_vs_reference']}")


if __name__ == "__main__":
    main()
