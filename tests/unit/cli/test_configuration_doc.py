"""docs/configuration.md states each flag's environment variable and default as the
commands have them (which read the defaults from clockwork_svc/settings.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from clockwork_svc.cli.main import cli

DOC = Path(__file__).parents[3] / "docs" / "configuration.md"
UNSET = ("none", "off", "driver default")


def defaults(command: click.Command) -> Iterator[tuple[click.Option, object]]:
    """Each option of the command tree, with its default."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from defaults(sub)
    context = click.Context(command)
    for param in command.params:
        if isinstance(param, click.Option):
            yield param, param.get_default(context)


def rows() -> list[tuple[list[str], list[str], str]]:
    found = []
    for line in DOC.read_text().splitlines():
        if line.startswith("| `--"):
            flags, envs, default = (cell.strip() for cell in line.split("|")[1:4])
            found.append(
                (
                    re.findall(r"`(--[a-z-]+)`", flags),
                    re.findall(r"`(CLOCKWORK_[A-Z_]+)`", envs),
                    default,
                )
            )
    return found


def shown(default: object) -> str:
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


@pytest.mark.parametrize(("flags", "envs", "default"), rows(), ids=lambda v: str(v))
def test_the_doc_states_each_flags_default_and_variable(
    flags: list[str], envs: list[str], default: str
) -> None:
    by_flag: dict[str, list[tuple[click.Option, object]]] = {}
    for option, value in defaults(cli):
        for flag in option.opts:
            by_flag.setdefault(flag, []).append((option, value))
    for i, flag in enumerate(flags):
        candidates = by_flag.get(flag)
        assert candidates, f"{flag} is documented but no command has it"
        if default in UNSET:
            assert any(value in (None, "", False) for _, value in candidates), flag
        else:
            assert default.strip("`") in {shown(value) for _, value in candidates}, flag
        if len(envs) > i:
            assert envs[i] in {option.envvar for option, _ in candidates}, flag
