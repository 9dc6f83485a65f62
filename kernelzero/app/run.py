"""`kernelzero run`: every stage as its own `kernelzero serve` process, supervised; restarts a stage that dies.

A stage that dies is restarted after a growing pause (kernelzero.supervisor); one that dies again
after MAX_RESTARTS restarts in a row (each death soon after its start) stops the whole run (exit code 1).

Restarting is safe because stages commit outputs and offsets together (at-least-once): a stage
that dies mid-batch redoes that batch. It does not place stages on other machines: for that,
run `kernelzero serve ROLE` there against the same Kafka broker.
"""

from __future__ import annotations

import asyncio
import sys

from kernelzero.stage import ROLES
from kernelzero.supervisor import Child, RestartPolicy, supervise

MAX_RESTARTS = 5


def add_arguments(parser) -> None:
    parser.add_argument("--roles", default=",".join(ROLES),
                        help=f"comma-separated stages to run (default: {','.join(ROLES)})")


def _command(role: str, args, config) -> list[str]:
    command = [sys.executable, "-m", "kernelzero", "serve", role, "--broker", config.log.url]
    if args.config:
        command += ["--config", args.config]
    return command


def main(args, config) -> int:
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        print(f"kernelzero run: unknown roles {unknown}; choose from {', '.join(ROLES)}", file=sys.stderr)
        return 2
    print(f"kernelzero run: {', '.join(roles)} on {config.log.url} (Ctrl-C stops)", file=sys.stderr)
    children = [Child(f"kernelzero run: {role}", _command(role, args, config)) for role in roles]
    # A stage that keeps dying is broken (configuration, code), not unlucky: give up and stop the rest.
    code = asyncio.run(supervise(children, RestartPolicy(max_restarts=MAX_RESTARTS, grace_s=30.0), sys.stderr))
    return 1 if code else 0
