"""Every command in the table loads and explains itself: `kernelzero COMMAND --help` exits 0 with a usage line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelzero.app.cli import COMMANDS, main
from kernelzero.app.serve import ROLES, service


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: kernelzero {command}" in capsys.readouterr().out


def test_an_unknown_command_is_an_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2 and "unknown command" in capsys.readouterr().err


def test_the_command_table_imports_nothing_heavy() -> None:
    """Every command module is imported with the table: none may pull in torch, transformers or duckdb."""
    probe = "import sys, kernelzero.app.cli; print(','.join(m for m in ('torch', 'transformers', 'duckdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_service(role: str) -> None:
    assert callable(service(role).serve)
