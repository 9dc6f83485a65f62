"""`kernelzero serve ROLE`: run one stage as a long-running service against the configured log."""

from __future__ import annotations

import importlib

# role -> module providing `serve(args, config) -> int`
ROLES: dict[str, str] = {
    "evaluator": "kernelzero.gpu_workers.service",
    "coder": "kernelzero.producers.coder",
    "proposer": "kernelzero.producers.proposer",
    "validator": "kernelzero.consumers.validator",
    "trainer": "kernelzero.consumers.trainer_service",
    "projector": "kernelzero.analytics.service",
}


def add_arguments(parser) -> None:
    parser.add_argument("role", choices=sorted(ROLES), help="the stage to run")
    parser.add_argument("--workers", default=None, metavar="auto|N",
                        help="evaluator: one supervised worker process per visible GPU (auto), or N sharing them")
    parser.add_argument("--idle-exit", type=float, default=None, metavar="S",
                        help="stop after S seconds with nothing to consume (default: run until interrupted)")


def main(args, config) -> int:
    return int(importlib.import_module(ROLES[args.role]).serve(args, config) or 0)


def serve_until_idle(role: str, config_path, idle_s: float = 3.0) -> int:
    """Run one stage in this process until its input has been drained for `idle_s` (the demo and benches)."""
    from kernelzero.cli import main as cli_main

    return cli_main(["serve", role, "--config", str(config_path), "--idle-exit", str(idle_s)])
