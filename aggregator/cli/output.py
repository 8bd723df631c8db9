"""Where commands print: the rich consoles for stdout and stderr, and the table of aggregates
that ``query`` and ``demo`` print."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

# soft_wrap: a line of text is never broken at the terminal's width (80 when output is not a
# terminal), so messages stay one line each for scripts and logs; tables still fit the width
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def _print_aggregates(title: str, aggregates: list[Any]) -> None:
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
