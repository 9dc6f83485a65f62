"""The `kernelzero` command: a table of subcommands, each implemented in the module that owns it; it parses, it does no work.

The table holds the modules themselves, imported here as plain imports that the layering test
reads. They must not import torch, transformers or duckdb at import time (tests/test_cli.py
checks), which keeps `--help` and light commands fast. Each provides `add_arguments(parser)` and
`main(args, config) -> int`. One naming rule: a module that is only a command's arguments and
output is `<command>_cli.py`, beside the library it calls (analytics/sql_cli.py, gpu_workers/eval_cli.py,
app/log_cli.py); a module that does the command's work itself is named after that work (app/demo.py,
app/serve.py, app/run.py).
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from kernelzero.analytics import failures_cli, frontier_cli, replay_cli, report_cli, sql_cli
from kernelzero.app import config_cli, demo, experiment, heldout, kernelbench, log_cli, run, serve
from kernelzero.bootstrap import distill, init_model, sft_cli
from kernelzero.config import load_for_command
from kernelzero.gpu_workers import eval_cli

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[ModuleType, str]] = {
    "demo": (demo, "the whole loop on one machine (CPU is enough), embedded log"),
    "experiment": (experiment, "does RL raise held-out pass@1? arms from one SFT start against a control"),
    "run": (run, "the co-evolution loop: every stage as its own process, restarted when it dies"),
    "serve": (serve, "one stage as a long-running service (evaluator, coder, validator, ...)"),
    "eval": (eval_cli, "evaluate one candidate kernel against a KernelBench-format problem"),
    "bench": (kernelbench, "run a KernelBench level through the Coder and the evaluator"),
    "sql": (sql_cli, "ad hoc SQL over the projected event log"),
    "frontier": (frontier_cli, "the frontier: APIs the Coder solves sometimes"),
    "failures": (failures_cli, "failure taxonomy: compile, runtime, mismatch, rejection"),
    "replay": (replay_cli, "rebuild datasets (SFT, RL prompts, preferences) from the log"),
    "report": (report_cli, "PNG plots and an HTML page of a run"),
    "sft": (sft_cli, "supervised warm start of the Coder or Proposer from a dataset"),
    "init-model": (init_model, "a from-scratch model and a tokenizer trained on our own corpus"),
    "distill": (distill, "verified SFT sets for both roles from the teachers, split by API set"),
    "heldout": (heldout, "put held-out modules on the log for the Coder to answer (never trained on)"),
    "log": (log_cli, "inspect the event log: tail a topic, stats and consumer lag"),
    "config": (config_cli, "print the effective configuration (file + KERNELZERO_* variables)"),
}


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelzero",
        description="KernelZero: train LLMs to write fast, correct CUDA and Triton kernels. "
        "Every stage talks through an event log (embedded SQLite by default, Kafka across machines).",
        epilog="Run `kernelzero COMMAND --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser


def add_common_arguments(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument("--config", metavar="FILE", default=default,
                        help="TOML configuration (KERNELZERO_* variables override it)")
    parser.add_argument("--broker", metavar="URL", default=default, help="event log: embedded:PATH or kafka://HOST:PORT")


def _common_after_actions(parser: argparse.ArgumentParser) -> None:
    """--config and --broker after a command's action too (`kernelzero log stats --broker URL`), where users type them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                # SUPPRESS: an action that does not repeat the option keeps the value given before it
                add_common_arguments(subparser, default=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        if argv and not argv[0].startswith("-"):
            parser.error(f"unknown command {argv[0]!r}")
        parser.parse_args(argv)
        parser.print_help()
        return 0 if argv else 2
    name = argv[0]
    module = COMMANDS[name][0]
    parser = argparse.ArgumentParser(prog=f"kernelzero {name}", description=COMMANDS[name][1])
    add_common_arguments(parser)
    module.add_arguments(parser)
    _common_after_actions(parser)
    args = parser.parse_args(argv[1:])
    config = load_for_command(args.config, args.broker, "kernelzero")
    if config is None:
        return 2
    try:
        return int(module.main(args, config) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
