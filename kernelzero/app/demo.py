"""`kernelzero demo`: KernelZero from zero on one machine (a CPU is enough): teachers, SFT, then rounds of the real loop with both learners; small, not a benchmark.

1. Bootstrap (bootstrap/from_zero.py, cached by its inputs): the synthesizer and the Triton
   teacher make verified SFT sets, split by API set; a tokenizer and from-scratch models of both
   roles are trained on them, the Coder until its held-out pass@1 enters the band.
2. Rounds of the real loop on the embedded log, each stage as `kernelzero serve ROLE` until its
   input is drained: proposer -> validator -> coder -> evaluator -> trainer -> projector. Before
   the first round and after the last, the held-out modules (kernelzero/kit/heldout_protocol.py)
   go on the log (`kernelzero heldout`): the Coder answers them with its current policy, sampled
   and greedy, and nothing trains on them.
3. A summary per Coder policy version (training and held-out pass rates with intervals, KL to the
   start, rewards and advantages, verdicts), the versions each role published, the frontier's
   in-band entries, and `kernelzero report`'s plots.
No weights are downloaded or committed: the demo builds everything it uses.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import msgspec

from kernelzero.bootstrap.from_zero import DEMO_PLAN, Plan, quiet_libraries
from kernelzero.app.heldout import publish_heldout
from kernelzero.app.serve import serve_until_idle
from kernelzero.config import Config, dump_config

STAGES = ("proposer", "validator", "coder", "evaluator", "trainer", "projector")
ANSWER_STAGES = ("coder", "evaluator", "trainer", "projector")
EXAMPLE_PROBLEM = Path(__file__).resolve().parents[2] / "examples/problems/relu_matmul.py"
EXAMPLE_CANDIDATE = Path(__file__).resolve().parents[2] / "examples/candidates/relu_matmul_triton.py"
SUMMARY = {
    "learning curve by Coder policy version (held-out modules are never trained on)":
        "SELECT policy_version, train_samples, round(train_pass_rate, 3) AS train_pass, heldout_modules, "
        "round(heldout_pass_at_1, 3) AS heldout_pass_at_1, round(heldout_low, 3) AS low, round(heldout_high, 3) AS high, "
        "round(heldout_greedy, 3) AS greedy, round(kl_to_start, 4) AS kl_to_start FROM learning_curve",
    "rewards and advantages by Coder policy version":
        "SELECT g.policy_version, count(DISTINCT g.event_id) AS groups, "
        "count(DISTINCT g.event_id) FILTER (WHERE g.informative) AS informative, count(*) AS samples, "
        "round(avg(s.reward), 3) AS mean_reward, round(min(s.advantage), 3) AS min_adv, "
        "round(max(s.advantage), 3) AS max_adv, round(avg((s.advantage <> 0)::INT), 3) AS nonzero_adv "
        "FROM groups_scored g JOIN group_samples s USING (event_id) GROUP BY ALL ORDER BY ALL",
    "verdicts of training samples by Coder policy version":
        "SELECT policy_version, verdict, count(*) AS samples FROM attempts WHERE split = 'train' "
        "GROUP BY ALL ORDER BY ALL",
    "policy versions published": "SELECT role, count(*) AS versions, max(version) AS newest FROM policies GROUP BY ALL",
    "frontier entries in the band": "SELECT kind, count(*) AS entries FROM frontier WHERE in_band GROUP BY ALL",
}


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR", help="run directory (default: runs/demo-TIMESTAMP)")
    parser.add_argument("--rounds", type=int, default=3, help="propose-code-evaluate-train rounds (default 3)")
    add_loop_arguments(parser, DEMO_PLAN)


def add_loop_arguments(parser, plan: Plan) -> None:
    """The options the demo shares with `kernelzero experiment`; `plan` gives --distill its default."""
    from kernelzero.kit.heldout_protocol import MIN_MODULES

    parser.add_argument("--modules", type=int, default=12, help="modules proposed per round (default %(default)s)")
    parser.add_argument("--group-size", type=int, default=4, help="Coder samples per module, G (default %(default)s)")
    parser.add_argument("--heldout", type=int, default=MIN_MODULES // 2,
                        help="held-out modules per measurement (default %(default)s)")
    parser.add_argument("--size", choices=("tiny", "small"), default="tiny", help="model size (default %(default)s)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu",
                        help="where models train and sample, and the evaluator runs (default %(default)s)")
    parser.add_argument("--distill", type=int, default=plan.modules, metavar="N",
                        help="modules distilled (default %(default)s)")
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="bootstrap cache (default: [evaluator] cache_dir/demo)")
    parser.add_argument("--learning-rate", type=float, default=1e-4,
                        help="both roles' RL learning rate, full fine-tuning (default %(default)s)")
    parser.add_argument("--kl-max", type=float, default=0.01,
                        help="trust region: the mean KL to the SFT policy a step may end at, 0 for none "
                             "(default %(default)s)")


def loop_argument_error(args) -> str | None:
    """What is wrong with the loop's options (add_loop_arguments' and --rounds), naming the option; None if nothing."""
    for option in ("rounds", "modules", "group_size", "heldout", "distill"):
        if getattr(args, option) < 1:
            return f"--{option.replace('_', '-')} must be at least 1"
    for option in ("learning_rate", "kl_max"):
        if not getattr(args, option) >= 0:
            return f"--{option.replace('_', '-')} must be 0 or more"
    return None


def loop_config(config: Config, out: Path, args) -> Config:
    """The user's configuration, pointed at the run directory and sized for the demo's models."""
    from kernelzero.bootstrap.from_zero import DEMO_APIS

    config.log.url = f"embedded:{out / 'log.sqlite'}"
    config.analytics.db = str(out / "analytics.duckdb")
    config.trainer.checkpoint_dir = str(out / "checkpoints")
    config.evaluator.device = config.validator.device = args.device
    config.evaluator.trials = min(config.evaluator.trials, 2)
    config.evaluator.cpu_workers = max(config.evaluator.cpu_workers, os.cpu_count() or 1)
    for section in (config.coder, config.proposer):
        section.backend, section.device, section.prompt = "transformers", args.device, "compact"
    config.coder.group_size = args.group_size
    config.proposer.apis = config.proposer.apis or list(DEMO_APIS)
    # sets of two or three, where the distillation drew one to three (Plan.api_set_sizes): the warm-started Coder
    # wrote every sample of most single APIs correctly (a demo of sets of one to three: 1 of 12 groups informative)
    config.proposer.api_set_size, config.proposer.min_api_set_size = 3, 2
    config.proposer.batch, config.proposer.rounds = args.modules, 1
    # 512 to 2048 elements: the Triton interpreter runs a program per row, and evaluation is the demo's pace
    config.proposer.scale = min(config.proposer.scale, 2.0 ** -15)
    trainer = config.trainer
    # full fine-tuning inside a trust region around the SFT policy (the defaults): a tiny model's loss of what SFT
    # built showed at 3e-4 and above within a few dozen steps (docs/BENCHMARKS.md, The Coder from zero)
    trainer.lora_rank, trainer.device = 0, args.device
    trainer.learning_rate, trainer.kl_max = args.learning_rate, args.kl_max
    # every informative group is scarce at this size: a step per group, and two Proposer steps a round
    trainer.groups_per_step, trainer.proposer_batch = 1, max(1, args.modules // 2)
    trainer.group_deadline_s = min(trainer.group_deadline_s, 30.0)
    return config


def self_check(console, config: Config) -> bool:
    from kernelzero.gpu_workers import evaluate

    with console.status("evaluator self-check on the shipped example kernel"):
        check = evaluate(EXAMPLE_PROBLEM.read_text(), EXAMPLE_CANDIDATE.read_text(), config.evaluator)
    console.print(f"evaluator self-check ({EXAMPLE_CANDIDATE.name}): [bold]{check.verdict}[/bold] ({check.reason})")
    return check.verdict == "correct"


def run_stages(console, roles, config: Config, label: str, started: float) -> int:
    """Each stage in `roles`, in order, until its input is drained; a stage's non-zero exit stops the rest."""
    for role in roles:
        with console.status(f"{label}: {role}"):
            code = serve_until_idle(role, config)
        if code != 0:
            console.print(f"[red]{label}: {role} exited with {code}[/red]")
            return code
    console.print(f"{label} done ({time.monotonic() - started:.0f} s)")
    return 0


def measure_heldout(console, config: Config, rows: Path, limit: int, tag: str, started: float) -> int:
    """The held-out modules answered by the Coder's current policy, sampled and greedy, judged and projected."""
    code = publish_heldout(config, rows, limit, tag)
    return code or run_stages(console, ANSWER_STAGES, config, f"held-out measurement {tag}", started)


def warm_start(console, config: Config, args, plan: Plan, started: float):
    """The bootstrap of `plan` with `args`' sizes (cached), printed, and the configuration pointed at its models."""
    from kernelzero.bootstrap.from_zero import bootstrap

    cache = Path(args.cache or os.path.join(os.path.expanduser(config.evaluator.cache_dir), "demo"))
    console.print(f"bootstrap (cached in {cache}): distill {args.distill} modules, from-scratch {args.size} models, SFT")
    boot = bootstrap(config, msgspec.structs.replace(plan, modules=args.distill, size=args.size), cache,
                     device=args.device)
    for role, report in boot.sft.items():
        checks = ", ".join(f"{c['passed']}/{c['total']}@{c['step']}" for c in report["checks"])
        console.print(f"  {role}: SFT {report['steps']} steps, loss {report['first_loss']:.3f} -> "
                      f"{report['last_loss']:.3f}, held-out checks {checks or 'none'}, stopped by {report['stopped']}")
    console.print(f"bootstrap done ({time.monotonic() - started:.0f} s)")
    config.coder.model, config.proposer.model = boot.coder_model, boot.proposer_model
    config.coder.max_tokens, config.proposer.max_tokens = boot.max_tokens["coder"], boot.max_tokens["proposer"]
    config.proposer.exclude_sets = boot.heldout_sets
    return boot


def summarize(config: Config, queries: dict[str, str] = SUMMARY, report_dir: Path | None = None) -> dict[str, list]:
    """Each query's rows as plain dicts, by title (the demo prints them and writes them to demo.json); with
    `report_dir`, `kernelzero report`'s plots and page there too."""
    from kernelzero.analytics.db import configured_connection
    from kernelzero.analytics.report import write_report

    tables = {}
    with configured_connection(config) as con:
        for title, sql in queries.items():
            cursor = con.execute(sql)
            names = [d[0] for d in cursor.description]
            tables[title] = [dict(zip(names, row)) for row in cursor.fetchall()]
        if report_dir is not None:
            write_report(con, report_dir)
    return tables


def print_tables(console, tables: dict[str, list]) -> None:
    from rich.table import Table

    for title, rows in tables.items():
        table = Table(title=title)
        for name in (rows[0] if rows else {"(none)": None}):
            table.add_column(name)
        for row in rows:
            table.add_row(*(str(v) for v in row.values()))
        console.print(table)


def main(args, config: Config) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    if (error := loop_argument_error(args)) is not None:
        console.print(f"[red]kernelzero demo: {error}[/red]")
        return 2
    quiet_libraries()
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if (out / "log.sqlite").exists():
        console.print(f"[red]kernelzero demo: {out} already holds a run; choose another --out[/red]")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    config = loop_config(config, out, args)
    console.rule(f"KernelZero demo in {out}")
    if not self_check(console, config):
        console.print("[red]the evaluator rejects the known-good example: stopping[/red]")
        return 1
    started = time.monotonic()
    boot = warm_start(console, config, args, DEMO_PLAN, started)
    config_path = out / "kernelzero.toml"
    config_path.write_text(dump_config(config))
    rows = Path(boot.distill_dir) / "coder_heldout.jsonl"
    code = measure_heldout(console, config, rows, args.heldout, "start", started)
    for round_number in range(1, args.rounds + 1):
        code = code or run_stages(console, STAGES, config, f"round {round_number}/{args.rounds}", started)
    code = code or measure_heldout(console, config, rows, args.heldout, "final", started)
    if code:
        return code
    tables = summarize(config, report_dir=out / "report")
    print_tables(console, tables)
    summary = {"rounds": args.rounds, "seconds": round(time.monotonic() - started, 1), "bootstrap": {
        "distill_dir": boot.distill_dir, "heldout_sets": boot.heldout_sets, "sft": boot.sft}, "tables": tables}
    (out / "demo.json").write_text(json.dumps(summary, indent=2, default=str))
    console.rule("done")
    console.print(f"run directory: {out}\n  kernelzero sql --config {config_path} \"SELECT * FROM learning_curve\"\n"
                  f"  report: {out / 'report' / 'index.html'}")
    return 0
