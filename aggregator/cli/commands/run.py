"""``run``: process a table's stream locally with the same code as the Lambda handler."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from aggregator.cli import clients
from aggregator.cli.options import (
    RuleSources,
    definitions_option,
    endpoint_option,
    mode_option,
    table_option,
    window_option,
)
from aggregator.cli.output import console

if TYPE_CHECKING:
    from aggregator.dev.runner import RunStats


@click.command(short_help="Process the table's stream locally, as Lambda does.")
@table_option
@definitions_option
@endpoint_option
@mode_option
@window_option
@click.option("--batch-size", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--follow/--until-caught-up",
    default=False,
    help="Keep polling (a live progress line; Ctrl-C or SIGTERM stops it with a summary), or "
    "stop once the stream is caught up (default)",
)
@click.option(
    "--event-bus",
    default=None,
    metavar="NAME",
    help="Send the crossings of rules with thresholds to this EventBridge bus (name or ARN; "
    "AGGREGATOR_EVENTS_ENDPOINT_URL for another endpoint); default: print each as a line",
)
@click.option(
    "--resume/--from-start",
    default=True,
    show_default=True,
    help="Continue from the shard positions kept in the table, or read the stream from its start "
    "(delivering every record again; the positions it reaches are kept, so the next run "
    "continues from them). With target rules, let a plain run process deleted targets first "
    "(docs: rules/targets)",
)
def run(
    table_name: str,
    definitions: RuleSources,
    endpoint_url: str | None,
    mode: str,
    window_seconds: int,
    batch_size: int,
    follow: bool,
    event_bus: str | None,
    resume: bool,
) -> None:
    """Process the table's stream locally with the same code as the Lambda handler.

    The crossings of rules with thresholds are printed (lines "event: ..."), or sent to an
    EventBridge bus with --event-bus, as the deployed function sends them."""
    from aggregator.cli.tables import rules_for_table
    from aggregator.dev.runner import PositionStore, RunStats, StreamRunner
    from aggregator.dynamodb.table import table_stream_arn
    from aggregator.runtime.processor import create_processor

    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    stream_arn = table_stream_arn(client, table_name)
    stats = RunStats()
    began = time.monotonic()
    live = _Progress(stats, began) if follow else None
    streams = clients.make_client("dynamodbstreams", endpoint_url)
    runner = StreamRunner(
        # the rule manifest and backfill fences, as in the Lambda handler; without tumbling
        # windows events name no shard, so pending rules are counted unfenced (and marked so:
        # a backfill of them refuses)
        create_processor(
            rules,
            client,
            table_name,
            mode=mode,
            lifecycle=True,
            streams=lambda: streams,
            events_client=(
                (lambda: clients.make_client("events", _events_endpoint()))
                if event_bus is not None
                else _PrintedEvents
            ),
            event_bus=event_bus or "default",
        ),
        streams,
        stream_arn,
        batch_size=batch_size,
        tumbling_window_seconds=window_seconds or None,
        positions=PositionStore(client, table_name, rules.layout, fresh=not resume),
        on_batch=live.batch if live is not None else None,
    )
    stopped = _run_until_stopped(runner, stats, until_caught_up=not follow)
    if live is not None:
        live.stop()
    stats.elapsed_seconds = time.monotonic() - began
    summary = _summary(stats)
    if stopped is None:
        console.print(summary, highlight=False)
        return
    console.print(f"stopped ({stopped}): {summary}", highlight=False)
    raise SystemExit(130 if stopped == "Ctrl-C" else 143)


def _events_endpoint() -> str | None:
    import os

    return os.environ.get("AGGREGATOR_EVENTS_ENDPOINT_URL") or None


class _PrintedEvents:
    """Stands for EventBridge in a local run: prints each event's detail as a line, accepts
    them all (:mod:`aggregator.runtime.threshold_events`). The aggregate's first write (no old
    value) shows as ``(first write) -> 2``."""

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        import json

        for entry in Entries:
            d = json.loads(entry["Detail"])
            bucket = f" {d['granularity']} {d['bucket']}" if "bucket" in d else ""
            old = "(first write)" if d["old_value"] is None else d["old_value"]
            console.print(
                f"event: {d['rule']} {d['key']}{bucket} {'entered' if d['entered'] else 'left'} "
                f"{d['threshold']} ({d['condition']}): {old} -> {d['new_value']}, "
                f"id {d['id']}",
                highlight=False,
                markup=False,
            )
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "local"} for _ in Entries]}


def _summary(stats: RunStats) -> str:
    extras = ""
    if stats.derived_inputs:
        extras += f", {stats.derived_inputs} source aggregates read by derived rules"
    if stats.partial_inputs:
        extras += f", {stats.partial_inputs} partial aggregates added to their aggregate"
    if stats.expired:
        extras += f", {stats.expired} deltas to expired buckets skipped"
    if stats.threshold_events:
        extras += f", {stats.threshold_events} threshold events"
    return (
        f"processed {stats.records} stream records in {stats.invocations} invocations "
        f"({stats.self_writes} self-writes skipped{extras}): {stats.record_deltas} deltas -> "
        f"{stats.write.items_written} aggregate updates, "
        f"{stats.write.modelled_wcu} WCU (modelled), "
        f"{stats.write.dead_letters} dead letters, {stats.elapsed_seconds:.1f} s"
    )


def _run_until_stopped(runner: Any, stats: RunStats, *, until_caught_up: bool) -> str | None:
    """Run; ``None`` when the run ended by itself, else what stopped it (``"Ctrl-C"`` or
    ``"SIGTERM"``). A batch cut short by the signal is delivered again on the next run (its
    position was not stored), which the write modes make harmless."""
    import signal

    class _Terminated(BaseException):
        """Like ``KeyboardInterrupt``, not an ``Exception``: a batch's ``except Exception``
        (a function error, retried) must not swallow the stop."""

    def on_term(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        runner.run(until_caught_up=until_caught_up, stats=stats)
    except KeyboardInterrupt:
        return "Ctrl-C"
    except _Terminated:
        return "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, previous)
    return None


class _Progress:
    """What ``run --follow`` shows while it runs: a live line on a terminal, else a line every
    :attr:`every_seconds` (for logs)."""

    every_seconds = 10.0

    def __init__(self, stats: RunStats, began: float) -> None:
        from rich.live import Live

        self.stats = stats
        self.began = began
        self.last_line = 0.0
        self.live: Any = None
        if console.is_terminal:
            self.live = Live(self._text(), console=console, refresh_per_second=4, transient=True)
            self.live.start()

    def _text(self) -> str:
        s = self.stats
        return (
            f"following: {s.records:,} stream records, {s.record_deltas:,} deltas, "
            f"{s.write.items_written:,} aggregate updates, {s.write.dead_letters:,} dead "
            f"letters, {time.monotonic() - self.began:,.0f} s (Ctrl-C stops)"
        )

    def batch(self, outcome: Any) -> None:
        if self.live is not None:
            self.live.update(self._text())
        elif time.monotonic() - self.last_line >= self.every_seconds:
            self.last_line = time.monotonic()
            console.print(self._text(), highlight=False)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
