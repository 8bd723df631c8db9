"""``python -m bench.backfill_flights``: adopting a table with data, on real data.

The first half of the chosen days of the 2013 New York City departures is written to a table
that has no stream yet (no rule exists); then the stream is enabled, the rules of
``definitions/flights.yaml`` are deployed (the local runner registers them, pending), and a
backfill runs while the second half is replayed and the runner processes it, all at once. At the
end every aggregate is compared with the ground truth computed from the CSV independently of the
engine (``tests/integration/test_flights.py``), and the backfill's figures are printed:
throughput (items/s), RCU per item scanned and WCU per aggregate key written (modelled, from
item sizes: DynamoDB Local enforces and reports no real capacity). Its last line (an interface:
outside checks read it) divides the aggregate updates' modelled WCU by the aggregate keys
written and the segments (each segment writes a key at least once when its items reach it)::

    backfill: <x> WCU per aggregate key per segment; exact <yes|no>

    .venv/bin/python -m bench.backfill_flights                 # January: days 1-15, then 16-31
    .venv/bin/python -m bench.backfill_flights --days 4 --mode window
    .venv/bin/python -m bench.backfill_flights --carry-pages 1    # the baseline: every page
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from datetime import date, timedelta
from pathlib import Path

from aggregator.core.rules import load_rules
from aggregator.dev.demo import write_steps
from aggregator.dev.flights import read_flights, replay_steps
from aggregator.dev.local import DynamoDBLocal
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import table_definition, table_stream_arn
from aggregator.dynamodb.tablecheck import prepare_table
from aggregator.operations.backfill import DEFAULT_CARRY_PAGES, Backfill
from aggregator.runtime.processor import create_processor
from tests.integration.harness import stored
from tests.integration.test_flights import ground_truth
from tests.integration.test_kinds_flights import check_kinds, csv_departures

ROOT = Path(__file__).resolve().parents[1]


def run(days: int, mode: str, segments: int, carry_pages: int = DEFAULT_CARRY_PAGES) -> int:
    first, last = date(2013, 1, 1), date(2013, 1, 1) + timedelta(days=days - 1)
    middle = first + timedelta(days=days // 2)  # the first day of the second half
    rules = load_rules(ROOT / "definitions" / "flights.yaml")
    server = DynamoDBLocal(install_dir=ROOT / ".cache" / "dynamodb-local")
    server.start()
    try:
        ddb, streams = server.client("dynamodb"), server.client("dynamodbstreams")
        name = f"adopt-{uuid.uuid4().hex[:6]}"
        definition = table_definition(rules.layout)
        definition.pop("StreamSpecification", None)
        ddb.create_table(TableName=name, **definition)
        ddb.get_waiter("table_exists").wait(TableName=name)
        flights = read_flights(start=first, end=last)
        before = [f for f in flights if f.day < middle]
        after = [f for f in flights if f.day >= middle]
        started = time.monotonic()
        written = write_steps(ddb, name, replay_steps(before, rules.layout))
        print(
            f"{first}..{middle - timedelta(days=1)}: {written} writes before the stream, "
            f"{time.monotonic() - started:.0f} s"
        )
        prepare_table(ddb, name, rules)
        arn = table_stream_arn(ddb, name)
        runner = StreamRunner(
            create_processor(rules, ddb, name, mode=mode, lifecycle=True),
            streams,
            arn,
            batch_size=100,
        )
        results: dict[str, object] = {}
        threads = [
            threading.Thread(
                target=lambda: results.setdefault(
                    "writes", write_steps(ddb, name, replay_steps(after, rules.layout))
                )
            ),
            threading.Thread(
                target=lambda: results.setdefault(
                    "backfill",
                    Backfill(
                        rules,
                        TableStream(ddb, streams, name, arn),
                        segments=segments,
                        stream_lag_seconds=1.0,
                        carry_pages=carry_pages,
                    ).run(),
                )
            ),
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            runner.run(until_caught_up=False, max_seconds=1.0)
        runner.run()
        stats = results["backfill"]
        truth = ground_truth(first, last, sample=1)  # every row is replayed
        sums = [r for r in rules if r.kind.name == "sum"]
        aggregates = stored(ddb, name, rules)
        exact = {r.name: aggregates[r.name] for r in sums} == {r.name: truth[r.name] for r in sums}
        try:  # the other kinds against the CSV's delays
            check_kinds(AggregateStore(ddb, name, rules), csv_departures(first, last, sample=1))
        except AssertionError:
            exact = False
        print(
            f"{middle}..{last}: {results['writes']} writes replayed while the backfill ran; "
            f"all caught up in {time.monotonic() - started:.0f} s"
        )
        print(
            f"backfill ({mode}, {segments} segments, carry {carry_pages} pages): "
            f"{stats.items_scanned} items in "
            f"{stats.elapsed_seconds:.1f} s ({stats.items_scanned / stats.elapsed_seconds:,.0f} "
            f"items/s); {stats.modelled_rcu} RCU ({stats.modelled_rcu / stats.items_scanned:.3f} "
            f"per item); {stats.write.modelled_wcu} WCU for {stats.aggregate_keys} aggregate keys "
            f"({stats.write.modelled_wcu / stats.aggregate_keys:.2f} per key) in "
            f"{stats.write.items_written} updates; {stats.changed_items} items changed during it"
        )
        print(f"aggregates vs CSV ground truth: {'exact' if exact else 'DRIFT'}")
        per_key_segment = stats.write.modelled_wcu / (stats.aggregate_keys * segments)
        print(
            f"backfill: {per_key_segment:.2f} WCU per aggregate key per segment; "
            f"exact {'yes' if exact else 'no'}"
        )
        return 0 if exact else 1
    finally:
        server.stop()


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.backfill_flights", description=__doc__)
    p.add_argument("--days", type=int, default=31, help="days of January 2013 (default 31)")
    p.add_argument(
        "--mode", default="exactly-once", choices=["exactly-once", "window", "at-least-once"]
    )
    p.add_argument("--segments", type=int, default=4)
    p.add_argument(
        "--carry-pages",
        type=int,
        default=DEFAULT_CARRY_PAGES,
        help="apply a segment's amounts every this many pages (1: every page, as before the "
        f"carry; default {DEFAULT_CARRY_PAGES})",
    )
    args = p.parse_args()
    return run(args.days, args.mode, args.segments, args.carry_pages)


if __name__ == "__main__":
    raise SystemExit(main())
