"""Every command in the table loads and explains itself: `kernelzero COMMAND --help` exits 0 with a usage line."""

from __future__ import annotations

import pytest

from kernelzero.cli import COMMANDS, main


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
