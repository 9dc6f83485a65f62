"""Evaluator scale-out: samples/hour with 1 and with all workers of one group, and a worker SIGKILLed mid-run.

Runs the real service (`kernelzero serve evaluator --workers N --no-result-cache`) against the
embedded log or a Kafka broker, feeds it samples.generated built from candidate files and their problems, and reads samples.evaluated back. It measures the service's
throughput on this machine's candidate mix, not kernel speed; on one GPU, N > 1 workers share it
(their checks overlap, their timed runs take turns: gpu_workers/device_turns.py). With --broker kafka://...
the broker must be a scratch one: the bench moves group "evaluator" past any backlog on
samples.generated before each run and leaves its events behind.

    .venv/bin/python bench/scale_out.py --out DIR [--broker URL] [--workers-list 1,2] [--samples N]
        [--device auto|cpu|cuda] [--kill-after S] [--budget-s S]

Throughput = samples / (last first-evaluation - publish time), with the workers already started and
their evaluators up (group joins count). Every sample has its own module id, the ids chosen so the
samples spread evenly over the topic's partitions; the result cache is off, so every sample runs.
CUDA C++ (load_inline) candidates are left out: their cost is the build on the CPU pool, cached by
source, which does not grow with evaluator workers.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, NamedTuple

import msgspec

from kernelzero.log import EventLog, open_log, partition_for
from kernelzero.schemas import SampleGenerated, decode, make_event
from kernelzero.stage import publish

REPO = Path(__file__).resolve().parents[1]
EVAL = REPO / "tests" / "evaluator"
# Candidates of the CPU corpus that run in a worker (static rejections never reach one) and finish
# in well under a second on the CPU; hang, huge_allocation and the static_checks=false ones are left out.
CORPUS = ["correct_whole", "correct_partial_mm_epilogue", "wrong_result", "input_mutation", "memo_pointer",
          "passthrough_torch", "unwritten_output", "precision_fp16", "unused_kernel_numpy", "segfault", "zeros_tiny"]
TOPIC = "samples.generated"
GROUP = "evaluator"


class Candidate(msgspec.Struct, frozen=True):
    name: str
    source: str
    problem: str
    backend: str
    expect: str  # the verdict the file's `# expect:` line names (CPU path)


def candidate_set(device: str) -> list[Candidate]:
    """examples/ and the CPU corpus; on a GPU also the Triton files of tests/evaluator/candidates_cuda/."""
    found = [Candidate("examples/relu_matmul_triton", (REPO / "examples/candidates/relu_matmul_triton.py").read_text(),
                       (REPO / "examples/problems/relu_matmul.py").read_text(), "triton", "correct")]
    paths = [EVAL / "candidates" / f"{name}.py" for name in CORPUS]
    if device != "cpu":
        paths += sorted((EVAL / "candidates_cuda").glob("triton_*.py"))
    for path in paths:
        source = path.read_text()
        problem = re.search(r"^# problem: (\S+)", source, re.M).group(1)
        expect = re.search(r"^# expect: (\S+)", source, re.M).group(1)
        found.append(Candidate(f"{path.parent.name}/{path.stem}", source,
                               (EVAL / "problems" / f"{problem}.py").read_text(), "triton", expect))
    return found


def spread_keys(prefix: str, count: int, partitions: int) -> list[str]:
    """`count` module ids whose partitions go round-robin over 0..partitions-1 (an even spread)."""
    free: dict[int, list[str]] = {p: [] for p in range(partitions)}
    j = 0
    while any(len(free[i % partitions]) <= i // partitions for i in range(count)):
        key = f"{prefix}-m{j}"
        free[partition_for(key.encode(), partitions)].append(key)
        j += 1
    return [free[i % partitions][i // partitions] for i in range(count)]


def make_samples(candidates: list[Candidate], count: int, partitions: int, seed: int = 0) -> list[SampleGenerated]:
    """`count` samples cycling over the candidates in a shuffled order (no worker sees only one kind)."""
    run = uuid.uuid4().hex[:8]
    chosen = [candidates[i % len(candidates)] for i in range(count)]
    random.Random(seed).shuffle(chosen)
    keys = spread_keys(run, count, partitions)
    return [SampleGenerated(sample_id=f"{run}-s{i}", module_id=key, backend=c.backend, source=c.source,
                            problem_source=c.problem, apis=[c.name]) for i, (c, key) in enumerate(zip(chosen, keys))]


async def skip_backlog(log: EventLog, session_timeout_s: float) -> int:
    """Commit group "evaluator" at the end of samples.generated (a scratch log only); returns how many it skipped."""
    ends = await log.end_offsets(TOPIC)
    async with await log.consumer(GROUP, [TOPIC], session_timeout_s=session_timeout_s) as consumer:
        before = await log.committed(GROUP, TOPIC)  # after the join: a new broker has a group coordinator now
        await consumer.poll(max_records=1, timeout_s=0.1)  # the embedded log assigns partitions at the first poll
        await consumer.commit({tp: ends[tp[1]] for tp in consumer.assignment()})
    after = await log.committed(GROUP, TOPIC)
    if after != ends:
        raise RuntimeError(f"group {GROUP!r} still has members: could not skip the backlog ({after} != {ends})")
    return sum(ends[p] - before.get(p, 0) for p in ends)


async def partition_count(log: EventLog, wait_s: float = 30.0) -> int:
    """samples.generated's partitions (a topic Kafka has just created takes a moment to be listed)."""
    deadline = time.monotonic() + wait_s
    while TOPIC not in (topics := await log.topics()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TOPIC} not listed by {log.url} after {wait_s:.0f}s")
        await asyncio.sleep(0.2)
    return topics[TOPIC]


class WorkerGroup:
    """The supervisor process and its workers; reads its output to know each worker's pid."""

    def __init__(self, workers: str, broker: str, env: dict[str, str], log_path: Path):
        self.lines: list[str] = []
        self.pids: dict[int, int] = {}
        self._changed = threading.Condition()
        self._log = open(log_path, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelzero", "serve", "evaluator", "--workers", workers, "--broker", broker,
             "--no-result-cache"],
            stdout=subprocess.PIPE, stderr=self._log, text=True, env=env, cwd=REPO)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._log.write(f"{time.strftime('%H:%M:%S')} {line}")
            self._log.flush()
            ready = re.match(r"evaluator worker (\d+): pid (\d+) ready", line)
            with self._changed:
                self.lines.append(line.rstrip())
                if ready:
                    self.pids[int(ready.group(1))] = int(ready.group(2))
                self._changed.notify_all()

    def wait_ready(self, count: int, timeout_s: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.pids) >= count or self.process.poll() is not None,
                                          timeout_s):
                raise TimeoutError(f"{count} evaluator workers not ready after {timeout_s:.0f}s: {self.lines[-5:]}")
        if len(self.pids) < count:
            raise RuntimeError(f"the worker supervisor exited ({self.process.returncode}): {self.lines[-5:]}")

    def kill(self, index: int) -> int:
        pid = self.pids[index]
        os.kill(pid, signal.SIGKILL)
        return pid

    def restarts(self) -> int:
        return sum("died" in line for line in self.lines)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)
        self._log.close()


class RunResult(msgspec.Struct):
    workers: int
    samples: int
    evaluated: int  # distinct samples with a samples.evaluated event
    lost: int  # samples with none when the run ended (not finished: the run hit its cap)
    re_evaluated: int  # samples.evaluated events beyond the first per sample (duplicates downstream drops)
    wall_s: float
    samples_per_hour: float
    finished: bool
    verdicts: dict[str, int] = {}
    unexpected: dict[str, str] = {}  # candidate -> "expected X, got Y" (the expectations are the CPU path's)
    by_worker: dict[str, int] = {}  # evaluations per producer (worker index, host, pid)
    killed_pid: int | None = None
    killed_at_s: float | None = None
    killed_evaluated: int = 0  # evaluations the killed process published before it died
    re_evaluated_after_kill: int = 0  # duplicates published after the kill (the rest come from the group's first join)
    taken_over: int = 0  # samples of partitions the killed process had served, first evaluated by a survivor
    restarts: int = 0


class EvaluationSeen(msgspec.Struct, frozen=True):
    at: float  # produced_at: when the worker finished it
    producer: str
    verdict: str


def earliest(seen: dict[str, list[EvaluationSeen]]) -> dict[str, EvaluationSeen]:
    return {sample_id: min(evaluations, key=lambda e: e.at) for sample_id, evaluations in seen.items()}


def kill_report(result: RunResult, pid: int, killed_at: float, started: float, seen: dict[str, list[EvaluationSeen]],
                samples: dict[str, SampleGenerated], partitions: int) -> None:
    mark = f":{pid}"

    def partition(sample_id: str) -> int:
        return partition_for(samples[sample_id].module_id.encode(), partitions)

    served = {partition(s) for s, evaluations in seen.items() if any(e.producer.endswith(mark) for e in evaluations)}
    result.killed_pid, result.killed_at_s = pid, round(killed_at - started, 2)
    result.killed_evaluated = sum(n for p, n in result.by_worker.items() if p.endswith(mark))
    result.re_evaluated_after_kill = sum(1 for evaluations in seen.values()
                                         for e in sorted(evaluations, key=lambda e: e.at)[1:] if e.at > killed_at)
    result.taken_over = sum(1 for s, e in earliest(seen).items() if e.at > killed_at and partition(s) in served
                            and not e.producer.startswith("evaluator/0@"))


async def drive(log: EventLog, group: WorkerGroup, samples: list[SampleGenerated], workers: int, cap_s: float,
                kill_when: Callable[[float, int], bool] | None = None,
                expected: dict[str, str] | None = None) -> RunResult:
    """Publish the samples, SIGKILL worker 0 once `kill_when(seconds since publishing, samples evaluated)`,
    and read samples.evaluated until every sample has one or `cap_s` passes. `expected`: candidate -> verdict."""
    wanted = {s.sample_id: s for s in samples}
    seen: dict[str, list[EvaluationSeen]] = {}  # every evaluation of each sample
    by_worker: dict[str, int] = {}
    killed_pid, killed_at = None, 0.0
    async with await log.consumer(f"scale-out-{uuid.uuid4().hex[:8]}", ["samples.evaluated"]) as reader:
        await reader.poll(max_records=1, timeout_s=0.1)
        await publish(log, [make_event(s, correlation_id=s.module_id, producer="bench") for s in samples])
        started = time.time()
        while len(seen) < len(wanted) and time.time() - started < cap_s:
            if kill_when is not None and killed_pid is None and kill_when(time.time() - started, len(seen)):
                killed_pid, killed_at = group.kill(0), time.time()
            for record in await reader.poll(max_records=500, timeout_s=0.2):
                event = decode(record.value)
                sample_id, producer = event.payload.sample_id, event.envelope.producer
                if sample_id in wanted:
                    by_worker[producer] = by_worker.get(producer, 0) + 1
                    seen.setdefault(sample_id, []).append(
                        EvaluationSeen(event.envelope.produced_at, producer, event.payload.verdict))
    first = earliest(seen)
    finished = len(first) == len(wanted)
    wall = (max(e.at for e in first.values()) if finished else time.time()) - started
    verdicts: dict[str, int] = {}
    unexpected: dict[str, str] = {}
    for sample_id, e in first.items():
        verdicts[e.verdict] = verdicts.get(e.verdict, 0) + 1
        name = wanted[sample_id].apis[0]
        if expected and expected.get(name, e.verdict) != e.verdict:
            unexpected[name] = f"expected {expected[name]}, got {e.verdict}"
    result = RunResult(workers=workers, samples=len(samples), evaluated=len(first), lost=len(wanted) - len(first),
                       re_evaluated=sum(by_worker.values()) - len(first), wall_s=round(wall, 2),
                       samples_per_hour=round(len(first) / max(wall, 1e-9) * 3600), finished=finished,
                       verdicts=verdicts, unexpected=unexpected, by_worker=by_worker, restarts=group.restarts())
    if killed_pid is not None:
        kill_report(result, killed_pid, killed_at, started, seen, wanted, await partition_count(log))
    return result


def service_env(device: str, cache_dir: Path, session_timeout_s: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELZERO_")}
    env.update(KERNELZERO_EVALUATOR_DEVICE=device, KERNELZERO_EVALUATOR_CACHE_DIR=str(cache_dir),
               KERNELZERO_EVALUATOR_TIMEOUT_S="60", KERNELZERO_LOG_SESSION_TIMEOUT_S=str(session_timeout_s),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])))
    return env


class Budget:
    """Splits what is left of the wall-time budget evenly over the phases still to run."""

    def __init__(self, seconds: float, phases: int):
        self.deadline = time.monotonic() + seconds
        self.phases_left = phases

    def left(self) -> float:
        return max(10.0, self.deadline - time.monotonic())

    def next_cap(self) -> float:
        cap = max(10.0, (self.deadline - time.monotonic()) / max(1, self.phases_left))
        self.phases_left -= 1
        return cap


class Phase(NamedTuple):
    name: str
    samples: list[SampleGenerated]
    kill_when: Callable[[float, int], bool] | None = None


async def run_group(broker: str, workers: int, env: dict[str, str], work: Path, phases: list[Phase],
                    budget: Budget, expected: dict[str, str], session_timeout_s: float) -> dict[str, RunResult]:
    """Start the service with `workers` workers once and drive each phase through it, one after the other."""
    log = await open_log(broker)
    results = {}
    try:
        skipped = await skip_backlog(log, session_timeout_s)
        if skipped:
            print(f"skipped a backlog of {skipped} samples.generated events on {broker}", flush=True)
        group = WorkerGroup(str(workers), broker, env, work / "workers.log")
        try:
            await asyncio.to_thread(group.wait_ready, workers, budget.left())
            for phase in phases:
                results[phase.name] = await drive(log, group, phase.samples, workers, budget.next_cap(),
                                                  phase.kill_when, expected)
                print(f"{phase.name}: {msgspec.json.encode(results[phase.name]).decode()}", flush=True)
        finally:
            group.stop()
    finally:
        await log.close()
    return results


def run_name(workers: int) -> str:
    return f"{workers} worker" + ("s" if workers > 1 else "")


def worker_count(token: str, device: str) -> int:
    if token != "auto":
        return int(token)
    from kernelzero.gpu_workers.fleet import slots_for
    return len(slots_for("auto", device))


def markdown(results: dict, meta: dict) -> str:
    rows = ["| run | workers | samples | evaluated | lost | re-evaluated | wall s | samples/hour | finished |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name != "warm-up":
            rows.append(f"| {name} | {r['workers']} | {r['samples']} | {r['evaluated']} | {r['lost']} | "
                        f"{r['re_evaluated']} | {r['wall_s']} | {r['samples_per_hour']} | {r['finished']} |")
    lines = [f"Scale-out on {meta['machine']}, device {meta['device']}, log {meta['log']}, {meta['date']}", "",
             *rows, "", f"scaling ratio ({meta['scaling']}): {meta['scaling_ratio']}"]
    kill = results.get("killed mid-run")
    if kill:
        lines.append(f"killed worker 0 (pid {kill['killed_pid']}) at {kill['killed_at_s']} s, after it had published "
                     f"{kill['killed_evaluated']} evaluations; lost {kill['lost']}, re-evaluated after the kill "
                     f"{kill['re_evaluated_after_kill']} (all duplicates {kill['re_evaluated']}), "
                     f"taken over by survivors {kill['taken_over']}, restarts {kill['restarts']}")
    unexpected = {k: v for r in results.values() for k, v in r["unexpected"].items()}
    if unexpected:
        lines.append("verdicts other than the files' (CPU) expectations: "
                     + "; ".join(f"{k}: {v}" for k, v in sorted(unexpected.items())))
    return "\n".join(lines) + "\n"


async def main_async(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scale-out-", dir=out))
    broker = args.broker or f"embedded:{work / 'log.sqlite'}"
    counts = [worker_count(t, args.device) for t in args.workers_list.split(",")]
    largest = max(counts)
    env = service_env(args.device, work / "cache", args.session_timeout_s)
    candidates = candidate_set(args.device)
    log = await open_log(broker)
    try:
        partitions = await partition_count(log)
    finally:
        await log.close()

    order = sorted(set(counts), reverse=True)  # the largest first: its warm-up fills Triton's disk cache
    budget = Budget(args.budget_s, 1 + len(order) + (largest >= 2))
    expected = {c.name: c.expect for c in candidates}

    async def run(workers: int, phases: list[Phase]) -> dict[str, RunResult]:
        return await run_group(broker, workers, env, work, phases, budget, expected, args.session_timeout_s)

    results: dict[str, RunResult] = {}
    for i, count in enumerate(order):
        warm_up = [] if i else [Phase("warm-up", make_samples(candidates, len(candidates), partitions))]
        results |= await run(count, [*warm_up, Phase(run_name(count), make_samples(candidates, args.samples, partitions))])
    if largest >= 2:
        kill_after = args.kill_after if args.kill_after is not None else round(0.4 * results[run_name(largest)].wall_s, 1)
        results |= await run(largest, [Phase("killed mid-run", make_samples(candidates, args.samples, partitions),
                                             lambda elapsed, _done: elapsed >= kill_after)])
    smallest = min(counts)
    ratio = round(results[run_name(largest)].samples_per_hour / max(1, results[run_name(smallest)].samples_per_hour), 2)
    meta = {"date": datetime.date.today().isoformat(), "machine": f"{platform.node()}: {os.cpu_count()} CPUs",
            "device": args.device, "log": broker.split(":")[0], "samples": args.samples, "candidates": len(candidates),
            "session_timeout_s": args.session_timeout_s, "scaling": f"{run_name(largest)} vs {run_name(smallest)}",
            "scaling_ratio": ratio, "command": " ".join(sys.argv)}
    if args.device != "cpu":
        meta["gpus"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    plain = {k: msgspec.to_builtins(v) for k, v in results.items()}
    (out / "results.json").write_text(json.dumps({"meta": meta, "runs": plain}, indent=2))
    text = markdown(plain, meta)
    (out / "results.md").write_text(text)
    print(text)
    kill = results.get("killed mid-run")
    return 1 if kill is not None and kill.lost else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json, results.md and the workers' log")
    p.add_argument("--broker", help="kafka://HOST:PORT of a scratch broker (default: a fresh embedded log)")
    p.add_argument("--workers-list", default="1,2", help="worker counts to compare, e.g. 1,2 or 1,auto")
    p.add_argument("--samples", type=int, default=48, help="samples per measured run")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--kill-after", type=float, default=None, metavar="S",
                   help="SIGKILL worker 0 this long after publishing (default: 40%% of the all-workers run's wall time)")
    p.add_argument("--session-timeout-s", type=float, default=6.0,
                   help="group session timeout: how soon a dead worker's partitions move (Kafka's default minimum is 6)")
    p.add_argument("--budget-s", type=float, default=210.0, help="wall-time budget; runs are capped to fit it")
    args = p.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
