"""``query get|list|top|percentile|histogram|window``: read aggregates."""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table
from rich.text import Text

from aggregator.cli.options import RuleSources, definitions_option, endpoint_option, table_option
from aggregator.cli.output import (
    DEFAULT_DIGITS,
    MAX_DIGITS,
    aggregate_fields,
    column_texts,
    console,
    err_console,
    number_text,
    print_aggregates,
)
from aggregator.core.exceptions import AggregatorError

if TYPE_CHECKING:
    from aggregator.dynamodb.query import Aggregate, AggregateStore


_json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (numbers as strings holding the exact decimal)",
)


_digits_option = click.option(
    "--digits",
    default=DEFAULT_DIGITS,
    show_default=True,
    type=click.IntRange(0, MAX_DIGITS),
    help="Places after the point of numbers that are not whole (means, percentiles...), "
    "rounded half-even; whole numbers show as integers, and a column's numbers share their "
    "places. Text output only: --json is exact",
)


@dataclass(frozen=True, slots=True)
class _Reading:
    """The options of every query command: the table and rules to read (``--table``,
    ``--definitions``, ``--endpoint-url``) and how to print (``--json``, ``--digits``)."""

    table_name: str
    definitions: RuleSources
    endpoint_url: str | None
    as_json: bool
    digits: int

    def store(self, rule: str) -> AggregateStore:
        """The store, after a warning on stderr when ``rule``'s serving generation was built from
        another definition, or does not count the table's older items yet (pending or being
        backfilled); both from the store's own manifest read."""
        from aggregator.cli.tables import rules_for_table
        from aggregator.dynamodb.query import AggregateStore

        client, rules = rules_for_table(self.table_name, self.definitions, self.endpoint_url)
        store = AggregateStore(client, self.table_name, rules)
        known = any(r.name == rule for r in rules)
        status = store.serving_status(rule) if known else None
        warning = None
        if known and store.definition_changed(rule):
            warning = (
                f"rule {rule!r} was changed since its aggregates were built: they count "
                "its deployed definition, not this one (aggregator rebuild "
                f"{rule} --table {self.table_name})"
            )
        elif known and store.deployed(rule) is False:
            warning = (
                f"rule {rule!r} is not deployed yet: no handler (nor aggregator run) has "
                "started with it, so nothing is counted for it (aggregator status --table "
                f"{self.table_name})"
            )
        elif status in ("requested", "pending", "backfilling"):
            warning = (
                f"rule {rule!r} is {status}: its aggregates do not count the items "
                "from before its fences yet, so they are incomplete (aggregator status --table "
                f"{self.table_name}; aggregator backfill --table {self.table_name})"
            )
        if warning is not None:
            err_console.print(f"warning: {warning}", markup=False, highlight=False)
        return store


def _reading_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the options of :class:`_Reading` (after the command's own) and pass them to
    ``command`` as one keyword argument, ``reading``."""

    @functools.wraps(command)
    def run(
        *args: Any,
        table_name: str,
        definitions: RuleSources,
        endpoint_url: str | None,
        as_json: bool,
        digits: int,
        **kwargs: Any,
    ) -> None:
        reading = _Reading(table_name, definitions, endpoint_url, as_json, digits)
        command(*args, reading=reading, **kwargs)

    decorated: Callable[..., None] = run
    # applied last to first, so --help lists them in this order: table, definitions, endpoint,
    # json, digits
    for option in (_digits_option, _json_option, endpoint_option, definitions_option, table_option):
        decorated = option(decorated)
    return decorated


def _aggregate_json(a: Any) -> dict[str, Any]:
    """``{"key", "value"}``, for a time bucket ``"granularity"`` and ``"bucket"``, and for a kind
    other than ``sum`` its ``"fields"`` (numbers as strings, ``null`` for none)."""
    out: dict[str, Any] = {"key": a.key, "value": str(a.value)}
    if a.granularity is not None:
        out["granularity"], out["bucket"] = a.granularity, a.bucket
    if set(a.fields) - {"value"}:
        out["fields"] = _numbers_json(a.fields)
    return out


def _fields_text(a: Any, digits: int) -> str:
    """A kind's fields as one line (``mean 12.50, sum 25, count 2``), or the value of a sum,
    numbers for people (:func:`~aggregator.cli.output.number_text`)."""
    fields = aggregate_fields(a)
    if not set(fields) - {"value"}:
        return number_text(a.value, digits)
    return ", ".join(f"{k} {number_text(v, digits)}" for k, v in fields.items())


def _echo_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2))


def _key(values: tuple[str, ...]) -> str | list[str]:
    """The key arguments as AggregateStore takes them: one argument as text (the value of a
    one-placeholder key, or the key as displayed, split at the template's separators), several
    as the placeholder values in order."""
    return values[0] if len(values) == 1 else list(values)


def _print_no_values(store: AggregateStore, rule: str, values: tuple[str, ...]) -> None:
    """``<rule> <key>: no values ...`` with the hint of a key perhaps not the one meant."""
    console.print(
        f"{rule} {' '.join(values)}: no values (none counted, or all removed)"
        + _not_found_hint(store, rule, values),
        markup=False,
        highlight=False,
    )


def _not_found_hint(store: AggregateStore, rule: str, values: tuple[str, ...]) -> str:
    """What to give instead of a key that has no aggregate. For a key with one placeholder and
    literal text around it (``P#{pk}``), whose single argument is taken as the value and has
    that text around it: the value to give if the argument was the key as displayed (``P#bob``
    -> ``bob``; nothing read). Else keys of the rule that exist and look like it
    (:meth:`~aggregator.dynamodb.query.AggregateStore.suggest_keys`, a bounded read)."""
    template = store.rules.get(rule).key
    if len(values) == 1 and len(template.placeholders) == 1 and template.literals != ("", ""):
        try:
            (value,) = template.split_display(values[0])
        except ValueError:
            pass
        else:
            return f"; if {values[0]} is the key as query list shows it, give its value: {value}"
    from aggregator.core.exceptions import QueryError

    try:
        suggested = store.suggest_keys(rule, _key(values)).keys
    except QueryError:  # a hint only: a failed read (throttled, not allowed) leaves it out
        return ""
    if len(suggested) == 1:
        return f"; did you mean {suggested[0]}?"
    if suggested:
        return f"; did you mean {', '.join(suggested[:-1])} or {suggested[-1]}?"
    return ""


def _print_rule_aggregates(
    store: AggregateStore,
    rule: str,
    title: str,
    aggregates: list[Aggregate],
    digits: int,
    *,
    empty: str | None = None,
) -> None:
    """A table of ``rule``'s aggregates: a column per field of its kind, and for a windowed
    rule each row's granularity and bucket start in columns of their own (``empty``: what to
    say instead of a table when there are none)."""
    windowed = store.rules.get(rule).window is not None
    print_aggregates(title, aggregates, digits, buckets=windowed, empty=empty)


@click.group(short_help="Read aggregates.")
def query() -> None:
    """Read aggregates."""


@query.command("get", short_help="One aggregate of RULE, by its key.")
@click.argument("rule")
@click.argument("values", nargs=-1)
@_reading_options
def query_get(rule: str, values: tuple[str, ...], reading: _Reading) -> None:
    """One aggregate: RULE and its key, as query list shows it (JFK#LAX) or as the key's
    placeholder values in order (JFK LAX); nothing for a literal key.

    With one placeholder the argument is its value. When a value holds a separator of the key
    ('#'), the key text can split in several ways: give the values separately. A key without
    an aggregate gets a "did you mean" when keys like it exist (PLAYER#p13 for p13), found by
    reading at most 100 of the rule's keys and trying up to 3 of their prefixes (at most 4
    small eventually consistent reads; not with --json)."""
    store = reading.store(rule)
    # key text is the same for a string and a number attribute (numbers render in plain form)
    aggregate = store.get(rule, _key(values))
    if reading.as_json:
        _echo_json(
            {"rule": rule, "aggregate": None if aggregate is None else _aggregate_json(aggregate)}
        )
        if aggregate is None:
            raise SystemExit(1)
        return
    target = store.rules.get(rule).target
    if aggregate is None and target is not None:
        console.print(
            f"{rule} {' '.join(values)}: the target item does not exist (the rule never "
            "creates it; query list shows the deltas that found no item)",
            markup=False,
        )
        raise SystemExit(1)
    if aggregate is None:
        hint = _not_found_hint(store, rule, values)
        console.print(
            f"{rule} {' '.join(values)}: no aggregate (nothing counted yet){hint}",
            markup=False,
        )
        raise SystemExit(1)
    where = "" if target is None else f" ({target.attribute} of the target item)"
    console.print(
        f"{rule} {aggregate.key}: {_fields_text(aggregate, reading.digits)}{where}", markup=False
    )


@query.command("list", short_help="Every aggregate of RULE, in key order.")
@click.argument("rule")
@_reading_options
def query_list(rule: str, reading: _Reading) -> None:
    """Every aggregate of RULE, in key order, with the fields of its kind (value; mean, sum and
    count; min; max; count, min, p50, p90, p99 and max); a windowed rule's with their
    granularity and bucket start; for a rule with a target, the deltas that found no target
    item."""
    store = reading.store(rule)
    aggregates = list(store.list(rule))
    if reading.as_json:
        _echo_json({"rule": rule, "aggregates": [_aggregate_json(a) for a in aggregates]})
        return
    target = store.rules.get(rule).target
    if target is not None:  # its sums are on the application's items: this is its ledger
        title = (
            f"{rule}: deltas that found no target item (its {target.attribute} sums are on the "
            "items themselves: query get)"
        )
        _print_rule_aggregates(
            store,
            rule,
            title,
            [a for a in aggregates if a.value],
            reading.digits,
            empty="none: every delta found its target item",
        )
        return
    _print_rule_aggregates(store, rule, rule, aggregates, reading.digits)


def _range_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--last``, ``--now``, ``--start``, ``--end``: a time range of a windowed rule, passed to
    ``command`` as ``window_range``, the arguments of :meth:`AggregateStore.window`
    (:func:`_range`; a bad combination or value is refused before anything is read)."""

    @functools.wraps(command)
    def run(
        *args: Any,
        last: str | None,
        now: str | None,
        start: str | None,
        end: str | None,
        **kwargs: Any,
    ) -> None:
        command(*args, window_range=_range(last, now, start, end), **kwargs)

    decorated: Callable[..., None] = run
    for option in reversed(
        (
            click.option(
                "--last",
                default=None,
                help="Sliding window length, e.g. 24h, 90m, 1h30m: the range answered covers the "
                "last D up to now, its edges widened out to the rule's finest buckets (with hour "
                "buckets, --last 1h at 17:00:30 answers [16:00, 18:00)); it is printed",
            ),
            click.option(
                "--now",
                "now",
                default=None,
                help="With --last: end the window at this time instead of the current one (ISO "
                "8601 with offset, or epoch s)",
            ),
            click.option(
                "--start",
                default=None,
                help="Range start (ISO 8601 with offset, or epoch s); rounded down to the "
                "rule's finest buckets",
            ),
            click.option(
                "--end",
                default=None,
                help="Range end with --start, exclusive, rounded up to the rule's finest "
                "buckets (with --last: as --now)",
            ),
        )
    ):
        decorated = option(decorated)
    return decorated


@query.command("top", short_help="The N largest aggregates of RULE.")
@click.argument("rule")
@click.option("-n", "n", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--granularity",
    default=None,
    help="Windowed rule: rank the keys of one bucket of this granularity (hour, minute, ...); "
    "needed when the rule keeps several",
)
@click.option(
    "--at",
    "at",
    default=None,
    help="Windowed rule: the bucket holding this time (ISO 8601 with offset, or epoch s); "
    "default now",
)
@_range_options
@_reading_options
def query_top(
    rule: str,
    n: int,
    granularity: str | None,
    at: str | None,
    window_range: dict[str, int | None],
    reading: _Reading,
) -> None:
    """The N largest aggregates of RULE (leaderboard index when the rule has one); for a
    windowed rule, of one time bucket (--granularity, --at), or ranked by their sums over a
    range of buckets (--last 1h: the top of the last hour, of the --granularity buckets,
    default the finest with at most 1,000 over the range), merged from the buckets' top lists
    when they prove it exact, else from every aggregate (the path and its cost are printed)."""
    store = reading.store(rule)
    if any(v is not None for v in window_range.values()):
        if at is not None:
            from aggregator.core.exceptions import QueryError

            raise QueryError("give --at (one bucket) or a range (--last, --start/--end), not both")
        _print_rolling_top(store, rule, n, granularity, window_range, reading)
        return
    when = _instant(at)
    window = store.rules.get(rule).window
    if window is not None and granularity is None and len(window.granularities) > 1:
        from aggregator.core.exceptions import QueryError

        labels = [g.label for g in window.granularities]
        raise QueryError(
            f"rule {rule!r} keeps buckets of {', '.join(labels)}: add --granularity "
            f"{' or --granularity '.join(labels)} to rank the keys of one bucket"
        )
    if when is None and window is not None:
        when = int(time.time())  # one instant for the bucket read and the bucket named
    bucket = store.top_bucket(rule, granularity, when)
    top = store.top(rule, n, granularity=granularity, at=when)
    if reading.as_json:
        data: dict[str, Any] = {"rule": rule, "n": n}
        if bucket is not None:
            data.update(granularity=bucket[0], bucket=bucket[1])
        _echo_json({**data, "aggregates": [_aggregate_json(a) for a in top]})
        return
    title = f"top {n}: {rule}"
    empty = None
    if bucket is not None:
        title += f" ({bucket[0]} bucket {bucket[1]})"
        empty = "no aggregates in this bucket"
    _print_rule_aggregates(store, rule, title, top, reading.digits, empty=empty)


def _instant(value: str | None) -> int | None:
    """Epoch seconds from ``1357016400`` (a fraction is floored) or an ISO 8601 time with an
    offset."""
    if value is None:
        return None
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_instant

    if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value.strip()):
        return math.floor(Decimal(value.strip()))  # epoch seconds, fractions floored
    try:
        return parse_instant(value)
    except AggregatorError as exc:
        raise QueryError(
            f"bad time: {exc} (give ISO 8601 with an offset, or epoch seconds)"
        ) from None


def _now_instant(value: str) -> int:
    """``--now``: epoch seconds (fractions allowed) or an ISO 8601 time with an offset, rounded
    up to a whole second as the clock's "now" is, so the window's end moves as it would."""
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_instant

    text = value.strip()
    if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", text):
        return math.ceil(Decimal(text))
    try:
        seconds = parse_instant(text)
    except AggregatorError as exc:
        raise QueryError(f"--now: bad time: {exc}") from None
    return seconds + (1 if datetime.fromisoformat(text).microsecond else 0)


def _range(
    last: str | None, now: str | None, start: str | None, end: str | None
) -> dict[str, int | None]:
    """The ``start``, ``end`` and ``last`` arguments of :meth:`AggregateStore.window` from the
    range options (a one-line error for a bad combination or value)."""
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_duration

    if now is not None and last is None:
        raise QueryError(
            "--now needs --last: it ends a sliding window; use --start/--end for a range"
        )
    if now is not None and end is not None:
        raise QueryError("give --now or --end with --last, not both (they set the same end)")
    if last is not None and start is not None:
        raise QueryError("give --last or --start/--end, not both")
    if start is not None and end is None:
        raise QueryError("give --end with --start")
    if end is not None and start is None and last is None:
        raise QueryError("--end needs --start (or --last): it ends a range")
    try:
        seconds = None if last is None else parse_duration(last)
    except ValueError as exc:
        raise QueryError(f"--last: {exc}") from None
    end_seconds = _now_instant(now) if now is not None else _instant(end)
    start_seconds = _instant(start)
    if start_seconds is not None and end_seconds is not None and end_seconds < start_seconds:
        raise QueryError(f"--end ({end}) is before --start ({start})")
    return {"start": start_seconds, "end": end_seconds, "last": seconds}


def _need_range(store: AggregateStore, rule: str, window_range: dict[str, int | None]) -> None:
    """A windowed ``rule`` is read over a range: one line when none was given."""
    from aggregator.core.exceptions import QueryError

    if store.rules.get(rule).window is not None and all(
        window_range[name] is None for name in ("start", "last")
    ):
        raise QueryError(
            f"rule {rule!r} counts per time bucket: give a range, --last D (--last 24h) or "
            "--start T --end T"
        )


def _asked_text(result: Any) -> str | None:
    """``[asked start, asked end)`` when the range answered is wider than the range asked (an
    edge inside one of the rule's finest buckets), else ``None``."""
    from aggregator.core.windows import bucket_text

    if result.asked_start is None or result.asked_end is None:
        return None
    if (result.asked_start, result.asked_end) == (result.start, result.end):
        return None
    return f"[{bucket_text(result.asked_start)}, {bucket_text(result.asked_end)})"


def _asked_json(result: Any) -> dict[str, str]:
    """``{"asked_start", "asked_end"}`` (UTC text) of a windowed read, else ``{}``."""
    from aggregator.core.windows import bucket_text

    if result.asked_start is None or result.asked_end is None:
        return {}
    return {
        "asked_start": bucket_text(result.asked_start),
        "asked_end": bucket_text(result.asked_end),
    }


def _percent_list(ctx: click.Context, param: click.Parameter, value: str) -> list[Decimal]:
    """``--p 50,90,99``: percentiles from 0 to 100 (a usage error naming the option else)."""
    from aggregator.core.sketch import percentile_list

    try:
        return percentile_list(p for p in value.split(",") if p.strip())
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@query.command("percentile", short_help="Percentiles of one key of RULE.")
@click.argument("rule")
@click.argument("values", nargs=-1)
@click.option(
    "--p",
    "ps",
    default="50,90,99",
    show_default=True,
    callback=_percent_list,
    help="Percentiles, comma-separated, from 0 to 100 (nearest rank)",
)
@_range_options
@_reading_options
def query_percentile(
    rule: str,
    values: tuple[str, ...],
    ps: list[Decimal],
    window_range: dict[str, int | None],
    reading: _Reading,
) -> None:
    """Percentiles of one key of a distribution RULE (each within the rule's relative
    accuracy), or exact ones of a min/max rule; the key as for query get.

    The p-th percentile of n values is the value of rank ceil(p/100 * n) in ascending order.
    A windowed rule ranks the values of a time range (--last 1h: the p90 of the last hour), as
    query window reads it."""
    from aggregator.core.windows import bucket_text

    store = reading.store(rule)
    _need_range(store, rule, window_range)
    result = store.percentiles(rule, _key(values), ps, **window_range)
    if reading.as_json:
        _echo_json(
            {
                "rule": rule,
                "key": result.key,
                "count": str(result.count),
                "relative_accuracy": str(result.relative_accuracy),
                "percentiles": _numbers_json(result.values),
                "requests": result.requests,
                "read_units": str(result.read_units),
                **(
                    {"start": bucket_text(result.start), "end": bucket_text(result.end)}
                    if result.start is not None and result.end is not None
                    else {}
                ),
                **_asked_json(result),
            }
        )
        return
    if result.count == 0:
        _print_no_values(store, rule, values)
        raise SystemExit(1)
    accuracy = (
        "exact"
        if result.relative_accuracy == 0
        else f"within {(result.relative_accuracy * 100).normalize():f} %"
    )
    span = ""
    if result.start is not None and result.end is not None:
        span = f" in [{bucket_text(result.start)}, {bucket_text(result.end)})"
    table = Table(
        title=f"{rule} {result.key}{span}: {number_text(result.count)} values, percentiles "
        f"{accuracy}",
        title_justify="left",
    )
    table.add_column("p", justify="right")
    table.add_column("value", justify="right")
    texts = column_texts(list(result.values.values()), reading.digits)
    for p, text in zip(result.values, texts, strict=True):
        table.add_row(f"p{p}", text)
    console.print(table)
    asked = _asked_text(result)
    window = store.rules.get(rule).window
    if asked is not None and window is not None:  # a range is asked only of a windowed rule
        finest = window.finest.label
        console.print(
            f"asked {asked}, widened to whole {finest} buckets", highlight=False, markup=False
        )
    console.print(
        f"{result.requests} request(s), {result.items_read} bin item(s), {result.read_units} RCU",
        highlight=False,
    )


@query.command("histogram", short_help="How many source keys have each value.")
@click.argument("rule")
@click.argument("values", nargs=-1)
@_reading_options
def query_histogram(rule: str, values: tuple[str, ...], reading: _Reading) -> None:
    """How many source keys have each value: RULE is a derived rule keyed by "{value}" (any
    other rule shows its keys and values, with bars). For a distribution rule give a key: its
    bins (each bin's reported value and how many values it holds)."""
    store = reading.store(rule)
    rows = store.histogram(rule, _key(values) if values else None)
    derived = store.rules.get(rule).is_derived or store.rules.get(rule).kind.per_value
    # a derived rule's key is its source's value, its value a count of source keys; any other
    # rule's rows are its own keys and values
    first, second = ("value", "count") if derived else ("key", "value")
    if reading.as_json:
        _echo_json(
            {"rule": rule, "rows": [{first: str(r.value), second: str(r.count)} for r in rows]}
        )
        return
    target = store.rules.get(rule).target
    what = f"{rule}: deltas that found no target item" if target is not None else rule
    table = Table(title=f"{what} ({store.requests} request(s))", title_justify="left")
    table.add_column(first, justify="right" if derived else "left")
    table.add_column(second, justify="right")
    table.add_column("")
    if not rows:
        if values:  # a distribution's key: perhaps not the key meant
            _print_no_values(store, rule, values)
            return
        console.print(
            f"{rule}: none, every delta found its target item"
            if target is not None
            else f"{rule}: no aggregates (nothing counted yet)",
            highlight=False,
        )
        return
    peak = max((r.count for r in rows), default=0)
    numbers = [r.value for r in rows if isinstance(r.value, Decimal)]
    # a column of numbers (a distribution's bins, a derived rule's numeric keys) for people;
    # text keys as they are
    firsts = (
        column_texts(numbers, reading.digits)
        if len(numbers) == len(rows)
        else [str(r.value) for r in rows]
    )
    counts = column_texts([r.count for r in rows], reading.digits)
    for r, first, count in zip(rows, firsts, counts, strict=True):
        bar = "#" * (int(40 * r.count / peak) if peak > 0 and r.count > 0 else 0)
        table.add_row(Text(first), count, bar)
    console.print(table)


@query.command("window", short_help="A windowed RULE's value for one key over a span of time.")
@click.argument("rule")
@click.argument("values", nargs=-1)
@click.option(
    "--series",
    "series",
    default=None,
    metavar="GRANULARITY",
    help="Show each bucket of this granularity (hour, minute, ...: one the rule keeps) over the "
    "range, with a sparkline and the total, in one Query",
)
@_range_options
@_reading_options
def query_window(
    rule: str,
    values: tuple[str, ...],
    series: str | None,
    window_range: dict[str, int | None],
    reading: _Reading,
) -> None:
    """Count or sum (or the rule's kind: mean, min, max, percentiles) of a windowed RULE for one
    key (its placeholder values, or the key as query list shows it) over --last D, ending now
    or at --now T, or over [--start, --end).

    The range answered covers the range asked: its start moves down and its end up to the
    boundaries of the rule's finest buckets, so the buckets holding either edge count in full
    (with hour buckets, --last 1h at 17:00:30 answers [16:00, 18:00): the past hour and the
    current one). Both ranges are printed ("range", and "asked" when wider; --json: start, end,
    asked_start, asked_end). Buckets are judged expired at the current time, with --now
    too."""
    store = reading.store(rule)
    _need_range(store, rule, window_range)
    if series is not None:
        _print_series(store, rule, values, series, window_range, reading)
        return
    result = store.window(rule, _key(values), **window_range)
    if reading.as_json:
        _echo_json(
            {
                "rule": rule,
                "key": result.key,
                "start": result.start_text,
                "end": result.end_text,
                **_asked_json(result),
                "value": str(result.value),
                "buckets": [
                    {"granularity": p.granularity.label, "buckets": p.buckets}
                    for p in result.parts or []
                ],
                "requests": result.requests,
                "items_read": result.items_read,
                "read_units": str(result.read_units),
                "complete": result.complete,
                **(
                    {"fields": _numbers_json(result.fields)}
                    if set(result.fields) - {"value"}
                    else {}
                ),
            }
        )
        return
    _note_no_buckets(store, rule, values, result.key, result.items_read)
    table = Table(title=f"{rule} {result.key}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("range", f"[{result.start_text}, {result.end_text})")
    asked = _asked_text(result)
    if asked is not None:  # the range asked, widened out to whole buckets as "range" shows
        table.add_row("asked", asked)
    if set(result.fields) - {"value"}:  # a kind's fields: mean, sum, count; min; ...
        for name, number in result.fields.items():
            table.add_row(name, number_text(number, reading.digits))
    else:
        table.add_row("value", number_text(result.value, reading.digits))
    runs = ", ".join(f"{p.buckets} {p.granularity.label}" for p in result.parts or [])
    table.add_row("buckets", runs or "none")
    table.add_row(
        "cost",
        f"{result.requests} Query request(s), {result.items_read} item(s) read, "
        f"{result.read_units} RCU (modelled, strongly consistent)",
    )
    console.print(table)
    if not result.complete:
        err_console.print(
            "warning: part of the range is past the rule's retention; expired buckets may "
            "already be deleted, so the value can be too small",
            highlight=False,
        )


def _print_series(
    store: AggregateStore,
    rule: str,
    values: tuple[str, ...],
    granularity: str,
    window_range: dict[str, int | None],
    reading: _Reading,
) -> None:
    """``query window --series``: each bucket's value (a kind's fields, for one with several: a
    mean's mean, sum and count), a sparkline of its main one and the range's total (fields)."""
    from aggregator.cli.output import sparkline

    result = store.series(rule, _key(values), granularity=granularity, **window_range)
    several = set(result.fields) - {"value"}
    if reading.as_json:
        _echo_json(
            {
                "rule": rule,
                "key": result.key,
                "granularity": result.granularity,
                "start": result.start_text,
                "end": result.end_text,
                **_asked_json(result),
                "buckets": [
                    {
                        "start": b.start_text,
                        "value": str(b.value),
                        **({"fields": _numbers_json(b.fields)} if several and b.written else {}),
                    }
                    for b in result.buckets
                ],
                "total": str(result.total),
                **({"fields": _numbers_json(result.fields)} if several else {}),
                "requests": result.requests,
                "items_read": result.items_read,
                "read_units": str(result.read_units),
                "complete": result.complete,
            }
        )
        return
    _note_no_buckets(store, rule, values, result.key, result.items_read)
    table = Table(
        title=f"{rule} {result.key}, per {result.granularity}",
        title_justify="left",
    )
    table.add_column(result.granularity)
    names = list(result.fields) if several else ["value"]
    columns = []
    for name in names:
        table.add_column(name, justify="right")
        numbers = (
            [b.value for b in result.buckets]
            if name == "value"
            else [b.fields.get(name) for b in result.buckets]
        )
        columns.append(column_texts(numbers, reading.digits))
    for i, bucket in enumerate(result.buckets):
        table.add_row(bucket.start_text, *(column[i] for column in columns))
    console.print(table)
    if several:  # the range's fields, from its sums, counts and value items
        summary = ", ".join(
            f"{name} {'-' if v is None else number_text(v, reading.digits)}"
            for name, v in result.fields.items()
        )
    else:
        summary = f"total {number_text(result.total, reading.digits)}"
    # the sparkline folds at the terminal's width; the summary wraps between words
    console.print(sparkline(result.headlines()), soft_wrap=False, overflow="fold", markup=False)
    console.print(
        f"[{result.start_text}, {result.end_text}): {len(result.buckets)} {result.granularity} "
        f"buckets, {summary}",
        soft_wrap=False,
        markup=False,
        highlight=False,
    )
    console.print(
        f"cost: {result.requests} Query request(s), {result.items_read} item(s) read, "
        f"{result.read_units} RCU (modelled, strongly consistent)",
        markup=False,
        highlight=False,
    )
    if not result.complete:
        err_console.print(
            "warning: part of the range is past the rule's retention; expired buckets may "
            "already be deleted, so the values can be too small",
            highlight=False,
        )


def _print_rolling_top(
    store: AggregateStore,
    rule: str,
    n: int,
    granularity: str | None,
    window_range: dict[str, int | None],
    reading: _Reading,
) -> None:
    """``query top --last``: the keys by their sums over the range, the path and its cost."""
    result = store.rolling_top(rule, n, granularity=granularity, **window_range)
    cost = (
        f"{result.requests} request(s), {result.items_read} item(s) read, "
        f"{result.read_units} RCU (reported)"
    )
    if reading.as_json:
        _echo_json(
            {
                "rule": rule,
                "n": n,
                "granularity": result.granularity,
                "start": result.start_text,
                "end": result.end_text,
                **_asked_json(result),
                "path": result.path,
                "aggregates": [{"key": a.key, "value": str(a.value)} for a in result.aggregates],
                "requests": result.requests,
                "items_read": result.items_read,
                "read_units": str(result.read_units),
                "complete": result.complete,
            }
        )
        return
    console.print(f"top {n}: {rule}", style="bold", markup=False, highlight=False)
    console.print(
        f"sums of the {result.granularity} buckets in [{result.start_text}, {result.end_text})",
        markup=False,
        highlight=False,
    )
    if result.aggregates:
        table = Table()
        table.add_column("key")
        table.add_column("sum", justify="right")
        texts = column_texts([a.value for a in result.aggregates], reading.digits)
        for aggregate, text in zip(result.aggregates, texts, strict=True):
            table.add_row(aggregate.key, text)
        console.print(table)
    else:
        console.print("no key has a sum other than 0 over the range", highlight=False)
    path = (
        "merged from the buckets' top lists"
        if result.path == "lists"
        else "summed from every aggregate of the rule"
    )
    console.print(path, markup=False, highlight=False)
    console.print(f"cost: {cost}", markup=False, highlight=False)
    if not result.complete:
        err_console.print(
            "warning: the buckets of the range past the rule's retention are left out",
            highlight=False,
        )


def _note_no_buckets(
    store: AggregateStore, rule: str, values: tuple[str, ...], key: str, items_read: int
) -> None:
    """A note on stderr when a range read no bucket of the key: perhaps not the key meant."""
    if items_read:
        return
    hint = _not_found_hint(store, rule, values)
    if hint:
        err_console.print(
            f"note: {rule} {key} has no bucket in this range{hint}", markup=False, highlight=False
        )


def _numbers_json(numbers: Mapping[Any, Decimal | None]) -> dict[str, str | None]:
    """Named numbers as JSON: the exact decimal as text (``None`` stays ``null``)."""
    return {str(k): None if v is None else str(v) for k, v in numbers.items()}
