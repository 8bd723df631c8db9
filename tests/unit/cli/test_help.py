"""The command listings of ``aggregator --help`` and ``aggregator query --help``: every command's
summary is its ``short_help``, one whole sentence on one line of an 80-column terminal (click
cuts a summary it makes from the help text at about 45 characters, mid-sentence). The CLI
reference (mkdocs-click) lists the same summaries: tests/unit/test_site.py checks the built page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from aggregator.cli import main


def _groups(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _groups(command, (*path, name))


@pytest.mark.parametrize("path", list(_groups(main)), ids=lambda path: " ".join(path) or "main")
def test_listing_shows_whole_summaries(path: tuple[str, ...]) -> None:
    group = main
    for name in path:
        group = group.commands[name]  # type: ignore[assignment]
    result = CliRunner().invoke(main, [*path, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    listing = result.output.partition("\nCommands:\n")[2]
    lines = dict(
        (match["name"], match["text"])
        for match in re.finditer(r"^  (?P<name>[\w-]+) +(?P<text>.*)$", listing, re.M)
    )
    visible = {name: cmd for name, cmd in group.commands.items() if not cmd.hidden}
    assert set(lines) == set(visible)
    for name, command in visible.items():
        assert command.short_help, f"{name} has no short_help: click would cut its help"
        assert re.search(r"[.)]$", command.short_help), f"{name}: {command.short_help!r}"
        # the whole sentence on the command's own line: not cut, not wrapped
        assert lines[name] == command.short_help, f"{name}: {lines[name]!r}"
