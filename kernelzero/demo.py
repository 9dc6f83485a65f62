"""`kernelzero demo`: the whole co-evolution loop on one machine, embedded log, CPU is enough; small, not a benchmark.

Each round runs the real stages one after another, each as `kernelzero serve ROLE` until its
input is drained: proposer -> validator -> coder -> evaluator -> trainer -> projector (which
publishes the frontier the next round's proposer reads). Without `--coder-model` the Coder is
a random-weight model built here (no weights can be downloaded), so its samples hold no code
and earn nothing: the loop, the events and the analytics are real, the kernels are not. Point
`--coder-model` at a local Hugging Face directory to see real kernels.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kernelzero.config import Config, dump_config
from kernelzero.serve import serve_until_idle

STAGES = ("proposer", "validator", "coder", "evaluator", "trainer", "projector")
EXAMPLE_PROBLEM = Path("examples/problems/relu_matmul.py")
EXAMPLE_CANDIDATE = Path("examples/candidates/relu_matmul_triton.py")


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR", help="run directory (default: runs/demo-TIMESTAMP)")
    parser.add_argument("--rounds", type=int, default=2, help="propose-code-evaluate-train rounds (default 2)")
    parser.add_argument("--modules", type=int, default=4, help="modules proposed per round (default 4)")
    parser.add_argument("--group-size", type=int, default=4, help="Coder samples per module, G (default 4)")
    parser.add_argument("--coder-model", default=None, metavar="DIR",
                        help="a local Hugging Face model directory for the Coder (default: a tiny random one)")


def demo_config(config: Config, out: Path, args) -> Config:
    """The user's configuration, pointed at the run directory and sized for a CPU."""
    config.log.url = f"embedded:{out / 'log.sqlite'}"
    config.analytics.db = str(out / "analytics.duckdb")
    config.trainer.checkpoint_dir = str(out / "checkpoints")
    config.proposer.backend = "synth"
    config.proposer.batch = args.modules
    config.proposer.rounds = 1
    config.proposer.scale = min(config.proposer.scale, 2.0 ** -13)
    config.coder.group_size = args.group_size
    config.coder.max_tokens = min(config.coder.max_tokens, 256)
    config.coder.model = args.coder_model or str(out / "models" / "coder")
    config.trainer.group_deadline_s = min(config.trainer.group_deadline_s, 30.0)
    return config


def _summary(config_path: Path, out: Path) -> None:
    from kernelzero.cli import main

    queries = {
        "verdicts by policy version": "SELECT policy_version, verdict, count(*) AS samples FROM evaluations "
                                      "GROUP BY ALL ORDER BY ALL",
        "events by type": "SELECT type, count(*) AS events FROM events GROUP BY ALL ORDER BY events DESC",
    }
    for title, sql in queries.items():
        print(f"\n{title}:")
        main(["sql", "--config", str(config_path), sql])
    print()
    main(["frontier", "--config", str(config_path), "--kind", "api"])
    main(["report", "--config", str(config_path), "--out", str(out / "report")])


def main(args, config: Config) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if (out / "log.sqlite").exists():
        console.print(f"[red]kernelzero demo: {out} already holds a run; choose another --out[/red]")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    config = demo_config(config, out, args)
    config_path = out / "kernelzero.toml"
    config_path.write_text(dump_config(config))
    console.rule(f"KernelZero demo in {out}")

    if EXAMPLE_PROBLEM.exists():
        with console.status("evaluator self-check on the shipped example kernel"):
            from kernelzero.gpu_workers import evaluate

            check = evaluate(EXAMPLE_PROBLEM.read_text(), EXAMPLE_CANDIDATE.read_text(), config.evaluator)
        console.print(f"evaluator self-check ({EXAMPLE_CANDIDATE}): [bold]{check.verdict}[/bold] ({check.reason})")
        if check.verdict != "correct":
            console.print("[red]the evaluator rejects the known-good example: stopping[/red]")
            return 1

    if not args.coder_model:
        with console.status("building a tiny random-weight Coder (no weights can be downloaded)"):
            from kernelzero.models import build_random_model

            build_random_model(config.coder.model)

    started = time.monotonic()
    for round_number in range(1, args.rounds + 1):
        for role in STAGES:
            with console.status(f"round {round_number}/{args.rounds}: {role}"):
                code = serve_until_idle(role, config_path)
            if code != 0:
                console.print(f"[red]round {round_number}: {role} exited with {code}[/red]")
                return code
            console.print(f"round {round_number}/{args.rounds}: {role} done ({time.monotonic() - started:.0f} s)")

    _summary(config_path, out)
    (out / "demo.json").write_text(json.dumps({"rounds": args.rounds, "seconds": time.monotonic() - started}))
    console.rule("done")
    console.print(f"run directory: {out}\n  kernelzero sql --config {config_path} \"SELECT * FROM evaluations\"\n"
                  f"  report: {out / 'report' / 'index.html'}")
    return 0
