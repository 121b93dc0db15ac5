"""Option groups: several click options that a command receives as one typed value."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def option_group(name: str, build: Callable[..., object], *options: Decorator) -> Decorator:
    """Add `options` (click option decorators, applied in this order, so `--help` lists
    the last first) to a command, which receives `build(**their values)` as its keyword
    argument `name` instead of the values.

    `build` names and types each value: its parameters are the options' names as click
    makes them (`--cassandra-user` -> `cassandra_user`). It runs when the command does,
    so its click.BadParameter or UsageError reaches the user as a usage error."""
    names = tuple(inspect.signature(build).parameters)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)  # keeps the options already on `command`
        def with_group(**values: Any) -> Any:
            own = {n: values.pop(n) for n in names}
            return command(**values, **{name: build(**own)})

        decorated: Callable[..., Any] = with_group
        for option in options:
            decorated = option(decorated)
        return decorated

    return decorate


def file_option(flag: str, envvar: str, help_text: str) -> Decorator:
    """An option naming a file that must exist (click refuses one that does not, naming
    the flag); the command receives a Path, or None when not given."""
    return click.option(
        flag,
        envvar=envvar,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )
