"""Where commands print: the rich consoles for stdout and stderr, and the table of aggregates
that ``query`` and ``demo`` print."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

PIPED_WIDTH = 1_000
"""Columns of output that is not a terminal (a pipe, a file) when ``COLUMNS`` is unset: rich
would take 80 and crop or wrap table cells; a table is never wider than its content."""


def _width(stream: TextIO) -> int | None:
    """``None`` (rich's own choice: the terminal's width, or ``COLUMNS``) unless ``stream`` is
    not a terminal and ``COLUMNS`` is unset."""
    if "COLUMNS" in os.environ or stream.isatty():
        return None
    return PIPED_WIDTH


# soft_wrap: a line of text is never broken at the console's width, so messages stay one line
# each for scripts and logs; tables fit the width (a terminal's), or their content when piped
console = Console(soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, soft_wrap=True, width=_width(sys.stderr))


def print_aggregates(title: str, aggregates: list[Any]) -> None:
    console.print(f"[bold]{title}[/]")
    if not aggregates:
        console.print("no aggregates (nothing counted yet)")
        return
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("key")
    table.add_column("value", justify="right")
    for i, a in enumerate(aggregates, 1):
        table.add_row(str(i), a.key, f"{a.value:,}")
    console.print(table)
