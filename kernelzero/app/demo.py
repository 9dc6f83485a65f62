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
A run stopped midway continues when the same command is given again with its --out: the steps
it finished (the held-out publications and answers, each round) are not run again
(kernelzero/app/journal.py), and it continues from the bootstrap it started from (recorded in
DIR/bootstrap.json; made again where its files are gone, and refused where the code now makes
another); a finished run is not run again. No weights are downloaded or
committed: the demo builds everything it uses.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import msgspec

from kernelzero.bootstrap.from_zero import DEMO_PLAN, Plan, quiet_libraries
from kernelzero.app.heldout import publish_heldout
from kernelzero.app.journal import Journal, arguments_differ, replace_file
from kernelzero.app.warm_stages import WarmStages
from kernelzero.config import Config, dump_config

STAGES = ("proposer", "validator", "coder", "evaluator", "trainer", "projector")
# what a run directory keeps from its first start: continuing it with other values would mix two runs
RUN_ARGUMENTS = ("rounds", "modules", "group_size", "heldout", "size", "device", "distill", "learning_rate", "kl_max")
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
    "the Proposer's modules by its policy version (rejected: the validator's reason)":
        "SELECT coalesce(proposer_version, 0) AS proposer_version, coalesce(reject_reason, status) AS outcome, "
        "count(*) AS modules FROM modules WHERE split = 'train' AND generator = 'llm' GROUP BY ALL ORDER BY ALL",
    "policy versions published": "SELECT role, count(*) AS versions, max(version) AS newest FROM policies GROUP BY ALL",
    "frontier entries in the band": "SELECT kind, count(*) AS entries FROM frontier WHERE in_band GROUP BY ALL",
}


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="run directory (default: runs/demo-TIMESTAMP); a stopped run given again continues")
    parser.add_argument("--rounds", type=int, default=3, help="propose-code-evaluate-train rounds (default 3)")
    add_loop_arguments(parser, DEMO_PLAN)


def add_loop_arguments(parser, plan: Plan) -> None:
    """The options the demo shares with `kernelzero experiment`; `plan` gives --distill its default."""
    from kernelzero.kit.heldout_protocol import MIN_MODULES

    parser.add_argument("--modules", type=int, default=12, help="modules proposed per round (default %(default)s)")
    parser.add_argument("--group-size", type=int, default=4, help="Coder samples per module, G (default %(default)s)")
    parser.add_argument("--heldout", type=int, default=MIN_MODULES // 2,
                        help="held-out modules per measurement (default %(default)s)")
    parser.add_argument("--size", choices=("tiny", "small"), default="tiny",
                        help="the Coder's model size (default %(default)s); the Proposer is tiny at either")
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
    if config.evaluator.workers_per_gpu == 0:  # modules of kilobytes: a worker per core, not per 16 GB of the card
        config.evaluator.workers_per_gpu = max(1, (os.cpu_count() or 1) - 1)
    for section in (config.coder, config.proposer):
        section.backend, section.device, section.prompt = "transformers", args.device, "compact"
    # models of a few million parameters cost no more in float32 on a GPU, and a held-out row's seeded samples come out
    # the same whatever the batch only there (bench/common_draws.py, H100: 244 of 256 identical, bfloat16 0 of 256);
    # the trainer scores the samples in the dtype they were drawn in
    for section in (config.coder, config.proposer, config.trainer):
        section.dtype = "float32" if section.dtype == "auto" else section.dtype
    config.coder.group_size = args.group_size
    # a poll's modules are sampled in one generation per kind: a held-out measurement's modules (sampled and greedy)
    # in one poll, 13.8 s for 32 rows where polls of 4 took 33.6 s (docs/BENCHMARKS.md)
    config.coder.max_inflight_groups = max(config.coder.max_inflight_groups, 2 * args.heldout)
    config.proposer.apis = config.proposer.apis or list(DEMO_APIS)
    # sets of two or three, where the distillation drew one to three (Plan.api_set_sizes): the warm-started Coder
    # wrote every sample of most single APIs correctly (a demo of sets of one to three: 1 of 12 groups informative)
    config.proposer.api_set_size, config.proposer.min_api_set_size = 3, 2
    config.proposer.batch, config.proposer.rounds = args.modules, 1
    # the tiny Proposer at T = 1 wrote a module that called every API of its set for 40 of 96 held-out sets (most of
    # the rest called a neighbour instead: abs for neg, silu for gelu), at 0.7 for 50, at 0.5 for 58; a round's modules
    # rejected starve the Coder. 0.7 keeps most of its spread (docs/BENCHMARKS.md)
    config.proposer.temperature = min(config.proposer.temperature, 0.7)
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


def run_stages(console, roles, stages: WarmStages, label: str, started: float) -> int:
    """Each stage in `roles`, in order, until its input is drained; a stage's non-zero exit stops the rest."""
    for role in roles:
        with console.status(f"{label}: {role}"):
            code = stages.run(role)
        if code != 0:
            console.print(f"[red]{label}: {role} exited with {code}[/red]")
            return code
    console.print(f"{label} done ({time.monotonic() - started:.0f} s)")
    return 0


def measure_heldout(console, journal: Journal, stages: WarmStages, rows: Path, limit: int, tag: str,
                    started: float, open_after: tuple[str, ...] = ()) -> int:
    """The held-out modules answered by the Coder's current policy, sampled and greedy, judged and projected: two
    steps of `journal`, so that a measurement stopped after its publication is not published again. The evaluator's
    workers start while the Coder loads and answers; the kept stages `open_after` start once the modules are
    published (the validator's duplicates then include them) and while they are judged."""
    stages.open_soon("evaluator")
    code = journal.run(f"publish held-out {tag}", lambda: publish_heldout(stages.config, rows, limit, tag))
    if code:
        return code
    for role in open_after:
        stages.open_soon(role)
    return journal.run(f"answer held-out {tag}", lambda: run_stages(
        console, ANSWER_STAGES, stages, f"held-out measurement {tag}", started))


def continuing(console, command: str, out: Path, args, names: tuple[str, ...] = RUN_ARGUMENTS) -> Journal | None:
    """`out`'s journal, the arguments `names` of its first start recorded or checked against `args`; None (said why)
    where `out` was started with others."""
    if differ := arguments_differ(out, {name: getattr(args, name) for name in names}):
        console.print(f"[red]kernelzero {command}: {out} was started with other arguments: {'; '.join(differ)}. "
                      "Give the same ones to continue it, or choose another --out[/red]")
        return None
    journal = Journal(out)
    if journal.done:
        console.print(f"continuing the run in {out}: {len(journal.done)} steps done ({journal.done[-1]} last)")
    return journal


def _made_by(boot) -> tuple[str, str]:
    """The bootstrap's cache keys (its folders' names), which say what made it, wherever its cache is."""
    return Path(boot.distill_dir).name, Path(boot.coder_model).parent.name


def run_bootstrap(console, config: Config, args, plan: Plan, out: Path):
    """The bootstrap `out`'s run started from (out/bootstrap.json), else the one of `plan` with `args`' sizes (cached),
    recorded there; None (said why) where the run's is gone and the code now makes another."""
    from kernelzero.bootstrap.from_zero import Bootstrap, bootstrap

    recorded = out / "bootstrap.json"
    boot = msgspec.json.decode(recorded.read_bytes(), type=Bootstrap) if recorded.exists() else None
    if boot is not None and all(Path(p).exists() for p in (boot.distill_dir, boot.coder_model, boot.proposer_model)):
        console.print(f"bootstrap: the one this run started from, {Path(boot.coder_model).parent}")
        return boot
    cache = Path(args.cache or os.path.join(os.path.expanduser(config.evaluator.cache_dir), "demo"))
    plan = msgspec.structs.replace(plan, modules=args.distill, size=args.size)
    console.print(f"bootstrap (cached in {cache}): distill {args.distill} modules, a {plan.coder.size_in(plan)} Coder "
                  f"and a {plan.proposer.size_in(plan)} Proposer from scratch, SFT")
    made = bootstrap(config, plan, cache, device=args.device)
    if boot is not None and _made_by(made) != _made_by(boot):
        console.print(f"[red]{out} started from the bootstrap {'/'.join(_made_by(boot))}, which is gone; this code "
                      f"makes {'/'.join(_made_by(made))}. Continue it where that bootstrap is, or choose another "
                      "--out[/red]")
        return None
    replace_file(recorded, msgspec.json.encode(made))
    return made


def warm_start(console, config: Config, args, plan: Plan, started: float, out: Path):
    """The run's bootstrap (`run_bootstrap`), printed, and the configuration pointed at its models; None where
    there is none to continue from."""
    if (boot := run_bootstrap(console, config, args, plan, out)) is None:
        return None
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
    if (out / "demo.json").exists() or ((out / "log.sqlite").exists() and not (out / "run.json").exists()):
        console.print(f"[red]kernelzero demo: {out} holds a finished run, or one it cannot continue (started "
                      "before runs kept their steps); choose another --out[/red]")
        return 2
    if (journal := continuing(console, "demo", out, args)) is None:
        return 2
    config = loop_config(config, out, args)
    # the demo reports held-out pass rates, not speeds (the experiment times them): untimed, a GPU judges them in
    # parallel instead of in turns
    config.evaluator.time_heldout = False
    console.rule(f"KernelZero demo in {out}")
    if not self_check(console, config):
        console.print("[red]the evaluator rejects the known-good example: stopping[/red]")
        return 1
    started = time.monotonic()
    if (boot := warm_start(console, config, args, DEMO_PLAN, started, out)) is None:
        return 2
    config_path = out / "kernelzero.toml"
    config_path.write_text(dump_config(config))
    rows = Path(boot.distill_dir) / "coder_heldout.jsonl"
    with WarmStages(config) as stages:
        code = measure_heldout(console, journal, stages, rows, args.heldout, "start", started,
                               open_after=("validator",))
        for number in range(1, args.rounds + 1):
            code = code or journal.run(f"round {number}", lambda: run_stages(
                console, STAGES, stages, f"round {number}/{args.rounds}", started))
        code = code or measure_heldout(console, journal, stages, rows, args.heldout, "final", started)
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
