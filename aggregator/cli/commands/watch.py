"""``watch``: a live terminal view of the aggregates, refreshed while a runner or the deployed
function processes the stream.

Each refresh reads, per rule (all of them, or those named):

- a leaderboard rule: its top ``-n`` (``query top``: one read of its index or top list);
- a windowed ``sum`` rule: its top ``-n`` by their sums over ``--last`` (``query top --last``:
  the buckets' top lists, or every aggregate of a rule without them), and a sparkline of each of
  its first three keys' buckets over the same range (``query window --series``: one ``Query``
  each; the last 24 buckets when the range has more, said under the panel);
- a rule of another kind (mean, min, max, percentiles): its first ``-n`` keys with the kind's
  main field as the value (a mean's mean) and its other fields (``query list``), windowed ones
  over ``--last`` (``query window`` per key; their keys are looked for in the rule's first 2,000
  items, which hold a key's every bucket and value);
- any other ``sum`` rule: its first ``-n`` keys (``query list``, one page).

A windowed panel's title gives the range summed, ``[start, end)``: ``--last`` widened out to
the buckets' boundaries, as ``query top --last`` prints it. Panels follow the order of the
rules named (else the definitions'). A panel whose read is refused (a ``QueryError`` of its own:
a ``--last`` of more buckets than a rolling top reads) shows why in its place, and the other
panels stay; a failed request (no table, no region, the endpoint down) ends the view with one
line, as any command's errors.

So a refresh costs a few requests per panel (counted in the footer), more only for a windowed
rule without top lists or a rule with many keys listed. Values that changed since the last
refresh are marked ``▲``/``▼``, new keys ``new``. On a terminal the view fits its height: the
panels that fit, a line counting the others, and the footer. ``q`` (on a terminal), Ctrl-C or
SIGTERM leaves, restoring the terminal, with a one-line summary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, TypeVar

import click

from aggregator.cli.boundary import aws_cause
from aggregator.cli.options import RuleSources, definitions_option, endpoint_option, table_option
from aggregator.cli.output import column_texts, console, sparkline
from aggregator.core.exceptions import QueryError
from aggregator.core.windows import bucket_text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.text import Text

    from aggregator.core.rules import Rule, RuleSet
    from aggregator.dynamodb.query import AggregateStore
    from aggregator.dynamodb.query.ranges import BucketRange
    from aggregator.dynamodb.query.results import Aggregate

__all__ = ["FittedView", "Panel", "Row", "chosen_rules", "render", "span_text", "watch_cmd"]

SERIES_KEYS = 3
"""Keys of a windowed rule drawn as a sparkline, each one ``Query``."""

SPARK_BUCKETS = 24
"""Buckets a panel's sparkline draws: the last ones of the range (the column stays narrow
enough for 80 columns)."""

MOST_ITEMS_FOR_KEYS = 2_000
"""Items a windowed panel of another kind than ``sum`` reads at most to find its keys (each
key has an item per bucket, and per value for min, max and percentiles)."""


@dataclass(frozen=True)
class Row:
    """One line of a panel: a key, its main value, the kind's other fields and perhaps a
    sparkline of its buckets."""

    key: str
    value: Decimal
    fields: tuple[tuple[str, Decimal | None], ...] = ()
    spark: str = ""


@dataclass(frozen=True)
class Panel:
    """One rule's panel: what it shows (``title``) and its rows."""

    rule: str
    title: str
    rows: tuple[Row, ...] = ()
    note: str = ""


@dataclass
class Snapshot:
    """One refresh: the panels and what reading them cost."""

    panels: list[Panel] = field(default_factory=list)
    requests: int = 0
    read_units: Decimal = Decimal(0)
    at: float = 0.0


def _marker(rule: str, row: Row, previous: dict[tuple[str, str], Decimal] | None) -> str:
    if previous is None:
        return ""
    before = previous.get((rule, row.key))
    if before is None:
        return "new"
    if row.value > before:
        return "▲"
    if row.value < before:
        return "▼"
    return ""


def render(
    snapshot: Snapshot,
    previous: Snapshot | None,
    *,
    digits: int,
    refreshes: int,
    total_requests: int,
) -> RenderableType:
    """The view of ``snapshot``, marking what changed since ``previous`` (pure): its panels and
    the footer, fitted to a terminal's height when shown on one (:class:`FittedView`)."""
    from rich.table import Table
    from rich.text import Text

    before = (
        None
        if previous is None
        else {(p.rule, r.key): r.value for p in previous.panels for r in p.rows}
    )
    tables: list[RenderableType] = []
    for panel in snapshot.panels:
        table = Table(title=panel.title, title_justify="left", expand=False)
        table.add_column("key")
        table.add_column("value", justify="right")
        names = [name for name, _ in panel.rows[0].fields] if panel.rows else []
        for name in names:
            table.add_column(name, justify="right")
        sparks = any(r.spark for r in panel.rows)
        if sparks:
            table.add_column("buckets")
        table.add_column("")
        values = column_texts([r.value for r in panel.rows], digits)
        columns = [  # each field's column, its numbers sharing their places
            column_texts([dict(r.fields).get(name) for r in panel.rows], digits) for name in names
        ]
        for i, (row, text) in enumerate(zip(panel.rows, values, strict=True)):
            mark = _marker(panel.rule, row, before)
            style = "bold" if mark else ""
            cells = [Text(row.key, style=style), Text(text, style=style)]
            cells += [Text(column[i]) for column in columns]
            if sparks:
                cells.append(Text(row.spark))
            cells.append(Text(mark, style="green" if mark in ("▲", "new") else "red"))
            table.add_row(*cells)
        if not panel.rows:
            table.add_row(Text(panel.note or "no aggregates yet", style="dim"), "")
        elif panel.note:
            table.caption, table.caption_justify, table.caption_style = panel.note, "left", "dim"
        tables.append(table)
    footer = Text(
        f"{time.strftime('%H:%M:%S', time.gmtime(snapshot.at))}Z  refresh {refreshes}: "
        f"{_counted(snapshot.requests, 'read request')}; {total_requests:,} in all  "
        "(q or Ctrl-C to leave)",
        style="dim",
    )
    return FittedView(tables, footer)


def _counted(number: int, thing: str, things: str | None = None) -> str:
    """``1 refresh``, ``2 refreshes``: ``number`` (with thousands separators) and the word in
    its number (``things``, default ``thing`` + ``s``)."""
    return f"{number:,} {thing if number == 1 else things or thing + 's'}"


@dataclass(frozen=True)
class FittedView:
    """Panels, then the footer. On a terminal, fitted to its height (rich's
    ``options.size.height``, the terminal's lines): the panels that fit whole in turn, then a
    line counting the others, then the footer, which stays in view (when not even the first
    panel fits, its first lines). Elsewhere (piped, a file), everything."""

    panels: list[RenderableType]
    footer: Text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment
        from rich.text import Text

        if not console.is_terminal:
            yield from self.panels
            yield self.footer
            return
        footer = console.render_lines(self.footer, options, pad=False)
        rendered = [console.render_lines(p, options, pad=False) for p in self.panels]

        def more(hidden: int) -> Text:
            return Text(
                f"{_counted(hidden, 'more panel')}: make the terminal taller, or name fewer rules",
                style="yellow",
            )

        # the line counting panels left out, at its longest (every panel left out)
        more_height = len(console.render_lines(more(len(rendered)), options, pad=False))
        room = options.size.height - len(footer)
        shown: list[list[list[Segment]]] = []
        used = 0
        for i, lines in enumerate(rendered):
            after = len(rendered) - i - 1  # panels after this one: a line then counts them
            if used + len(lines) + (more_height if after else 0) > room:
                break
            shown.append(lines)
            used += len(lines)
        if not shown and rendered:  # not even the first panel fits: its first lines
            below = more_height if len(rendered) > 1 else 0
            shown.append(rendered[0][: max(0, room - below)])
        for lines in shown:
            for line in lines:
                yield from line
                yield Segment.line()
        if len(shown) < len(rendered):
            yield more(len(rendered) - len(shown))
        yield self.footer


def _panel(store: AggregateStore, rule: Rule, n: int, last: int, now: float) -> Panel:
    """Read one rule's panel (module docstring); a :class:`QueryError` of the panel's own (a
    refused read, not a failed request) is the panel's note.

    Raises
    ------
    QueryError
        When a request failed (its ``__cause__`` is the AWS SDK's error): no table, no access,
        the endpoint down, throttling past the retries. That ends the view.
    """
    try:
        return _read_panel(store, rule, n, last, now)
    except QueryError as exc:
        if aws_cause(exc) is not None:  # a failed request ends the view (boundary: one line)
            raise
        return Panel(rule.name, rule.name, note=str(exc))


def _read_panel(store: AggregateStore, rule: Rule, n: int, last: int, now: float) -> Panel:
    name = rule.name
    window = rule.window
    if window is not None and rule.kind.ranks:
        planned = _ranked_buckets(rule, last, now)
        label = planned.granularity.label
        top = store.rolling_top(name, n, granularity=label, last=last, now=now)
        rows = []
        note = ""
        for i, a in enumerate(top.aggregates):
            spark = ""
            if i < SERIES_KEYS:
                series = store.series(name, a.key, granularity=label, last=last, now=now)
                spark = sparkline(series.headlines()[-SPARK_BUCKETS:])
                if len(series.buckets) > SPARK_BUCKETS:
                    note = f"sparklines: the last {SPARK_BUCKETS} of {len(series.buckets)} buckets"
            rows.append(Row(a.key, a.value, spark=spark))
        title = f"{name}: top {n}, {span_text(top.start, top.end)} ({label} buckets)"
        return Panel(name, title, tuple(rows), note)
    if rule.leaderboard:
        top_now = store.top(name, n)
        return Panel(name, f"{name}: top {n}", tuple(Row(a.key, a.value) for a in top_now))
    headline = rule.kind.headline
    if window is not None:
        from aggregator.dynamodb.query.ranges import AskedRange

        # the range every key's window sums: --last widened out to the finest buckets
        (lo, hi), _ = AskedRange(last=last, now=now).covering(window.finest, now)
        # the rule's items are buckets (and a kind's value items) of each key in turn
        keys, note = _first_keys(store.list(name), n)
        rows = []
        for key in keys:
            w = store.window(name, key, last=last, now=now)
            rows.append(_row(key, w.fields, headline, w.value))
        title = f"{name}: first {n} keys, {span_text(lo, hi)} ({headline})"
        return Panel(name, title, tuple(rows), note)
    rows = [_row(a.key, a.fields, headline, a.value) for a in _first(store.list(name), n)]
    title = f"{name}: first {n} keys" + ("" if rule.kind.ranks else f" ({headline})")
    return Panel(name, title, tuple(rows))


def _ranked_buckets(rule: Rule, last: int, now: float) -> BucketRange:
    """The buckets a rolling top of ``rule`` sums over the last ``last`` seconds at ``now``:
    the finest granularity with at most
    :data:`~aggregator.dynamodb.query.rolling.MAX_ROLLING_BUCKETS` of them (the choice of
    :meth:`~aggregator.dynamodb.query.AggregateStore.rolling_top`), read nothing.

    Raises
    ------
    QueryError
        When even the coarsest granularity the rule keeps has more buckets over the range,
        advising the longest ``--last`` that has few enough.
    """
    from aggregator.dynamodb.query.ranges import AskedRange, bucket_range
    from aggregator.dynamodb.query.rolling import MAX_ROLLING_BUCKETS

    window = rule.window
    assert window is not None  # a rolling top is of a windowed rule
    coarsest = max(window.granularities, key=lambda g: g.seconds)
    # --last widens by at most one bucket: MAX - 1 buckets' length always fits
    longest = _whole_units((MAX_ROLLING_BUCKETS - 1) * coarsest.seconds)
    asked = AskedRange(last=last, now=now)
    why = f"watch a shorter --last (at most {longest})"
    most, what = MAX_ROLLING_BUCKETS, "a rolling top"
    # refused when even the coarsest buckets are too many; then rolling_top's own choice
    bucket_range(rule.name, window, coarsest.label, asked, most=most, what=what, why=why)
    return bucket_range(rule.name, window, None, asked, most=most, what=what, why=why)


def span_text(start: int, end: int) -> str:
    """``[start, end)`` (epoch seconds) as UTC text, as ``query top --last`` prints a range;
    shorter than a day, as times of day (``[10:00Z, 12:00Z)``; with seconds only when an
    edge has them).

    Examples
    --------
    >>> span_text(1357034400, 1357041600)
    '[10:00Z, 12:00Z)'
    >>> span_text(1357034400, 1357120800)
    '[2013-01-01T10:00:00Z, 2013-01-02T10:00:00Z)'
    """
    first, second = bucket_text(start), bucket_text(end)
    if end - start >= 86_400:
        return f"[{first}, {second})"
    first, second = first[11:], second[11:]  # "10:00:00Z"
    if first.endswith(":00Z") and second.endswith(":00Z"):
        first, second = first[:-4] + "Z", second[:-4] + "Z"
    return f"[{first}, {second})"


def _row(key: str, fields: Mapping[str, Decimal | None], headline: str, value: Decimal) -> Row:
    """A key's row: the kind's main field (a mean's mean) as its value, then its other fields."""
    main = fields.get(headline)
    others = tuple((k, v) for k, v in fields.items() if k not in ("value", headline))
    return Row(key, value if main is None else main, others)


def _first_keys(aggregates: Iterator[Aggregate], n: int) -> tuple[list[str], str]:
    """The first ``n`` distinct keys of a windowed rule's items, read at most
    :data:`MOST_ITEMS_FOR_KEYS` items far (a note says so when that stopped the search)."""
    keys: dict[str, None] = {}
    for read, a in enumerate(aggregates, start=1):
        keys.setdefault(a.key)
        if len(keys) >= n:
            break
        if read >= MOST_ITEMS_FOR_KEYS:
            return list(keys), f"keys found in the first {read:,} items"
    return list(keys), ""


T = TypeVar("T")


def _first(items: Iterator[T], n: int) -> list[T]:
    """The first ``n`` of ``items``, reading no further."""
    out: list[T] = []
    for item in items:
        out.append(item)
        if len(out) >= n:
            break
    return out


def _whole_units(seconds: int) -> str:
    """``seconds`` as whole days, hours, minutes or seconds, rounded down to the largest unit it
    holds one of (``41d`` for 999 hours), as ``--last`` takes it."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def collect(store: AggregateStore, rules: list[Rule], n: int, last: int) -> Snapshot:
    """One refresh's panels, and what they cost."""
    requests, units = store.requests, store.read_units
    now = time.time()
    panels = [_panel(store, rule, n, last, now) for rule in rules]
    return Snapshot(panels, store.requests - requests, store.read_units - units, now)


@contextlib.contextmanager
def _keys(stop: threading.Event) -> Iterator[None]:
    """On a terminal: read keys without echo in a thread; ``q`` sets ``stop``. The terminal's
    settings are restored on the way out (Ctrl-C still interrupts: cbreak keeps signals)."""
    if not sys.stdin.isatty():
        yield
        return
    import select
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read() -> None:
        # signals go to the main thread, waking its wait at once (not after --interval)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        while not stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            # os.read, not sys.stdin: a q typed with other keys must not wait in a buffer
            if ready and os.read(fd, 1) in (b"q", b"Q"):
                stop.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        reader.join(timeout=1)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@click.command("watch", short_help="A live view of the aggregates.")
@click.argument("names", nargs=-1, metavar="[RULE]...")
@table_option
@definitions_option
@endpoint_option
@click.option(
    "-n",
    "n",
    default=10,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Keys a panel shows",
)
@click.option(
    "--last",
    default="1h",
    show_default=True,
    help="The range a windowed rule is shown over (its top by sums, its keys' buckets)",
)
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.2, 3600),
    help="Seconds between refreshes",
)
@click.option(
    "--digits",
    default=2,
    show_default=True,
    type=click.IntRange(0, 38),
    help="Places after the point of numbers that are not whole, rounded half-even",
)
def watch_cmd(
    names: tuple[str, ...],
    table_name: str,
    definitions: RuleSources,
    endpoint_url: str | None,
    n: int,
    last: str,
    interval: float,
    digits: int,
) -> None:
    """A live view of the aggregates of RULE... (in the order named; default: every rule),
    refreshed every --interval seconds while a runner or the deployed function processes the
    stream: top lists, windowed rules' tops and sparklines over --last (the range summed in
    each title), other kinds' fields. Changed values are marked; the footer counts the reads.
    q or Ctrl-C leaves."""
    from rich.live import Live

    from aggregator.cli.tables import rules_for_table
    from aggregator.core.windows import parse_duration
    from aggregator.dynamodb.query import AggregateStore

    try:
        last_seconds = parse_duration(last)
    except ValueError as exc:
        raise QueryError(f"--last: {exc}") from None
    client, ruleset = rules_for_table(table_name, definitions, endpoint_url)
    chosen = chosen_rules(ruleset, names)
    store = AggregateStore(client, table_name, ruleset)
    stop = threading.Event()
    refreshes = 0
    previous: Snapshot | None = None

    def on_signal(signum: int, frame: object) -> None:
        # Ctrl-C and SIGTERM end the loop (at most one read later), the terminal restored and
        # the summary printed. Installed for SIGINT too: Python leaves SIGINT ignored in a
        # process started with it ignored (a background job's child; a CI job's may be), and
        # Ctrl-C was then lost. Setting the event also cannot be lost in a finalizer, as an
        # exception raised here can. A second signal leaves without waiting for the read.
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous_handlers = {
        signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        # FittedView fits a terminal's height itself; Live must not crop it again (elsewhere,
        # piped, Live would cut at the height rich assumes, 25 lines)
        view = Live(
            console=console, auto_refresh=False, transient=False, vertical_overflow="visible"
        )
        with _keys(stop), view as live:
            while not stop.is_set():
                snapshot = collect(store, chosen, n, last_seconds)
                refreshes += 1
                live.update(
                    render(
                        snapshot,
                        previous,
                        digits=digits,
                        refreshes=refreshes,
                        total_requests=store.requests,
                    ),
                    refresh=True,
                )
                previous = snapshot
                stop.wait(interval)
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
    if refreshes and not console.is_terminal:
        console.line()  # rich ends its last view with a new line only on a terminal
    console.print(
        f"watched {_counted(len(chosen), 'rule')}: {_counted(refreshes, 'refresh', 'refreshes')}, "
        f"{_counted(store.requests, 'read request')}",
        highlight=False,
    )


def chosen_rules(ruleset: RuleSet, names: tuple[str, ...]) -> list[Rule]:
    """The rules ``names`` in their order (each once), or every rule in the definitions' order
    when none is named.

    Raises
    ------
    RuleError
        For a name the rule set does not have, listing the rules it has
        (:meth:`~aggregator.core.rules.RuleSet.get`, as ``query`` says it).
    """
    if not names:
        return list(ruleset)
    return [ruleset.get(name) for name in dict.fromkeys(names)]
