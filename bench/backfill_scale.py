"""A backfill beyond one machine (issue 33): the cost model's estimate for a billion items, then a
twin run (``make bench-backfill-scale``, or ``python -m bench.backfill_scale``).

What it prints
--------------
1. One ``estimate:`` line per worker count (``--worker-counts``: 16, 64, 256, 1,000, 4,000) with
   the wall time in hours and the dollars of :func:`aggregator.operations.backfill.cost.estimate`
   for ``--items`` items (a billion by default), and what bounds the scan; then one ``estimate:``
   line with the total for the default (``--workers``) by component, the dollars per million
   items and a worker's peak memory. The model's inputs are options (below); its page,
   ``docs/operations/backfill-cost.md``, gives the formulas and the same table.
2. The twin run (:func:`run_twin`), when it returns figures, ends with the issue's line
   (:func:`twin_line`): ``backfill-scale: <segments> segments, <workers> workers: <x> items/s,
   worker peak memory <m> MB, exact <yes|no>``.

``--measure`` first measures what one core of this machine counts a second on a ``Scan`` page of
1 KB items (:func:`measure_scan_cpu`: botocore's parsing, the digest, ``Engine.image_entries`` of
``likes_per_post``, the carry, the S entry) and uses it instead of the model's
:data:`~aggregator.operations.backfill.cost.SCAN_CPU_ITEMS_PER_SECOND`; it prints one
``measured:`` line.

Exit status: 0; 1 when the twin's aggregates are not exact; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from aggregator.core.deltas import NO_AMOUNTS, add_amounts
from aggregator.core.engine import Engine
from aggregator.core.records import Image
from aggregator.core.rules import load_rules
from aggregator.operations.backfill import item_digest
from aggregator.operations.backfill.cost import (
    BackfillCostInputs,
    CostEstimate,
    estimate,
)

ROOT = Path(__file__).resolve().parents[1]
DEFINITIONS = (
    ROOT / "definitions" / "reference_counts.yaml",
    ROOT / "definitions/layouts/PK_SK.yaml",
)
MEASURED_RULE = "likes_per_post"
WORKER_COUNTS = (16, 64, 256, 1000, 4000)


@dataclass(frozen=True)
class TwinFigures:
    """What a twin run reports (:func:`run_twin`)."""

    segments: int
    workers: int
    items_per_second: float
    peak_memory_mb: float
    exact: bool


def run_twin(args: argparse.Namespace) -> TwinFigures | None:
    """The twin run of the distributed backfill (:func:`aggregator.dev.backfill_twin.
    run_backfill_twin`): a table of ``--twin-likes`` items adopted on DynamoDB Local, a stream
    of ``--twin-partitions`` rolling shards with crashing handlers, an application writing
    throughout, ``--twin-segments`` segments scanned by ``--twin-workers`` invocations at once,
    each a process with a time budget, a quarter killed at a random moment; every aggregate
    compared with a count of the items made without the engine. Prints a ``twin:`` line of its
    figures; ``--no-twin`` skips it (``None``)."""
    if args.no_twin:
        return None
    from aggregator.dev.backfill_twin import TwinSettings, run_backfill_twin
    from aggregator.dev.local import DynamoDBLocal

    settings = TwinSettings(
        likes=args.twin_likes,
        partitions=args.twin_partitions,
        segments=args.twin_segments,
        workers=args.twin_workers,
        seed=args.twin_seed,
    )
    with DynamoDBLocal() as local:
        result = run_backfill_twin(local, settings)
    print(
        f"twin: {result.items_scanned:,} items scanned in {result.backfill_seconds:.1f} s over "
        f"{result.shards} shards ({settings.partitions} open at once); {result.invocations} "
        f"invocations of {settings.budget_seconds:g} s, {result.killed} killed; "
        f"{result.application_writes:,} application writes and {result.handler_crashes} handler "
        f"crashes meanwhile; {result.changes:,} changes of {result.changed_items:,} items; at most "
        f"{result.most_backfill_checkpoints} backfill checkpoint(s) per aggregate; "
        f"{len(result.wrong)} aggregates wrong"
    )
    for wrong in result.wrong[:5]:
        print(f"twin: wrong: {wrong}")
    return TwinFigures(
        segments=settings.segments,
        workers=settings.workers,
        items_per_second=result.items_per_second,
        peak_memory_mb=result.worker_peak_mb,
        exact=result.exact,
    )


def twin_line(figures: TwinFigures) -> str:
    """The bench's last line, in the issue's format."""
    return (
        f"backfill-scale: {figures.segments} segments, {figures.workers} workers: "
        f"{figures.items_per_second:,.0f} items/s, worker peak memory "
        f"{figures.peak_memory_mb:,.0f} MB, exact {'yes' if figures.exact else 'no'}"
    )


# -- the model's lines ----------------------------------------------------------------------------


def estimate_line(e: CostEstimate) -> str:
    """One worker count's line: hours, dollars, the scan's rate and bound."""
    i = e.inputs
    return (
        f"estimate: {i.items:,} items, {i.workers:,} workers: {e.hours:.2f} h, "
        f"${e.total_dollars:,.2f} (scan {e.phase('scan').seconds / 3600:.2f} h at "
        f"{e.scan_items_per_second:,.0f} items/s, bound: {e.bound})"
    )


def total_line(e: CostEstimate) -> str:
    """The default's total, by component."""
    d = e.dollars
    lambda_dollars = d["Lambda GB-s"] + d["Lambda requests"]
    return (
        f"estimate: total for {e.inputs.workers:,} workers: {e.hours:.2f} h, "
        f"${e.total_dollars:,.2f} = reads ${d['DynamoDB reads']:,.2f} + writes "
        f"${d['DynamoDB writes']:,.2f} + stream reads ${d['stream reads']:,.2f} + Lambda "
        f"${lambda_dollars:,.2f} + Step Functions ${d['Step Functions']:,.2f}; "
        f"${e.dollars_per_item * 1e6:,.3f} per million items; the scan saturates at "
        f"{e.saturating_workers:,} workers; the collector reads up to "
        f"{e.collector_capacity:,.0f} records/s; worker peak memory {e.worker_peak_mb:,.0f} MB"
    )


def estimate_lines(inputs: BackfillCostInputs, worker_counts: Sequence[int]) -> list[str]:
    """The ``estimate:`` lines: one per worker count, then the total for ``inputs.workers``."""
    lines = [estimate_line(estimate(inputs.with_(workers=w))) for w in worker_counts]
    return [*lines, total_line(estimate(inputs))]


# -- measuring this machine -----------------------------------------------------------------------


def sample_items(count: int, seed: int = 1) -> list[dict[str, dict[str, str]]]:
    """``count`` likes of 1 KB in DynamoDB JSON (definitions/reference_counts.yaml's layout):
    ``PK`` a post of ten million, ``SK`` ``LIKE#USER#<n>``, a time and a 980-character body
    (about 1,020 bytes each by DynamoDB's rules)."""
    rnd = random.Random(seed)
    return [
        {
            "PK": {"S": f"POST#{rnd.randrange(10_000_000)}"},
            "SK": {"S": f"LIKE#USER#{n}"},
            "likedAt": {"N": str(1_700_000_000 + n)},
            "body": {"S": "".join(rnd.choices(string.ascii_letters, k=980))},
        }
        for n in range(count)
    ]


def measure_scan_cpu(page_items: int = 1000, repeats: int = 5) -> float:
    """Items one core counts a second, the best of ``repeats`` passes over a ``Scan`` page of
    ``page_items`` 1 KB items: botocore parses the response, then each item's digest, its
    contributions (``Engine.image_entries`` of ``likes_per_post``), the carry's amounts and its
    encoded S entry, and the page's S entries compressed (process CPU time)."""
    import botocore.session
    from botocore import parsers

    rules = load_rules(list(DEFINITIONS))
    engine = Engine(rules)
    layout = rules.layout
    items = sample_items(page_items)
    body = json.dumps({"Items": items, "Count": len(items), "ScannedCount": len(items)}).encode()
    shape = botocore.session.get_session().get_service_model("dynamodb").operation_model("Scan")
    parser = parsers.create_parser("json")
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        page = parser.parse({"body": body, "headers": {}, "status_code": 200}, shape.output_shape)
        carry: dict[str, tuple[object, tuple[object, object]]] = {}
        entries: list[bytes] = []
        for item in page["Items"]:
            digest = item_digest({"PK": item["PK"], "SK": item["SK"]}, layout)
            found, _ = engine.image_entries(Image(item), [MEASURED_RULE], now=0.0)
            for ref, amounts in found.items():
                _, held = carry.get(ref.sort_key, (ref, NO_AMOUNTS))
                carry[ref.sort_key] = (ref, add_amounts(held, amounts))  # type: ignore[arg-type]
            text = {ref.sort_key: [str(a), str(c)] for ref, (a, c) in found.items()}
            entries.append(digest + json.dumps(text, separators=(",", ":")).encode())
        zlib.compress(b"".join(entries))
        best = min(best, time.process_time() - started)
    return page_items / best


# -- command line ---------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share is 0 to 1, got {text}")
    return value


def _counts(text: str) -> tuple[int, ...]:
    return tuple(_positive_int(part) for part in text.split(","))


MODEL_OPTIONS: tuple[tuple[str, str, object, str], ...] = (
    ("--items", "items", _positive_int, "items in the table"),
    ("--item-bytes", "item_bytes", _positive_int, "bytes per item"),
    ("--contributing-share", "contributing_share", _share, "share of items that contribute"),
    ("--keys", "aggregate_keys", _positive_int, "distinct aggregate keys"),
    ("--writes-per-second", "app_writes_per_second", _positive_float, "application writes/s"),
    ("--changing-share", "changing_share", _share, "share of writes changing a contribution"),
    ("--shards", "shards", _positive_int, "open stream shards"),
    ("--workers", "workers", _positive_int, "the default worker count (the total's line)"),
    ("--segments", "segments", _positive_int, "Scan segments"),
    ("--scan-cpu", "scan_cpu_items_per_second", _positive_float, "items one vCPU counts/s"),
    ("--scan-page-seconds", "scan_page_seconds", _positive_float, "seconds per 1 MB Scan page"),
    ("--memory-mb", "lambda_memory_mb", _positive_int, "the function's memory"),
    ("--invocation-seconds", "invocation_seconds", _positive_float, "an invocation's budget"),
    ("--flush-items", "flush_items", _positive_int, "S or B entries per flush"),
    ("--carry-keys", "carry_keys", _positive_int, "aggregate keys per carry"),
    ("--join-buckets", "join_buckets", _positive_int, "join buckets"),
    ("--reduce-buckets", "reduce_buckets", _positive_int, "reduce buckets"),
    ("--max-rcu", "max_rcu", _positive_float, "the read budget (default: the read quota)"),
    ("--read-quota", "table_read_quota", _positive_float, "the table's read quota"),
    ("--write-quota", "table_write_quota", _positive_float, "the table's write quota"),
    ("--lambda-concurrency", "lambda_concurrency", _positive_int, "Lambda's concurrency quota"),
    ("--control-partitions", "control_partitions", _positive_int, "control partition values"),
    ("--aggregate-partitions", "aggregate_partitions", _positive_int, "aggregate partitions"),
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m bench.backfill_scale",
        description="The distributed backfill's cost model for a billion items (hours, dollars "
        "per worker count), then its twin run.",
    )
    defaults = BackfillCostInputs()
    for flag, name, kind, text in MODEL_OPTIONS:
        default = getattr(defaults, name)
        shown = "the table's read quota" if default is None else f"{default:,}"
        p.add_argument(flag, dest=name, type=kind, default=default, help=f"{text} ({shown})")  # type: ignore[arg-type]
    p.add_argument(
        "--worker-counts",
        type=_counts,
        default=WORKER_COUNTS,
        help="worker counts of the estimate lines (16,64,256,1000,4000)",
    )
    p.add_argument("--no-twin", action="store_true", help="print the model's lines only")
    for flag, name, default, text in (
        ("--twin-likes", "twin_likes", 40_000, "items in the twin's table before the backfill"),
        ("--twin-partitions", "twin_partitions", 64, "stream shards open at once"),
        ("--twin-segments", "twin_segments", 256, "the twin's Scan segments"),
        ("--twin-workers", "twin_workers", 8, "the twin's invocations at once"),
        ("--twin-seed", "twin_seed", 0, "the twin's random seed"),
    ):
        p.add_argument(flag, dest=name, type=int, default=default, help=f"{text} ({default:,})")
    p.add_argument(
        "--measure",
        action="store_true",
        help="measure what one core here counts a second and use it as --scan-cpu",
    )
    return p


def inputs_from(args: argparse.Namespace) -> BackfillCostInputs:
    """The model's inputs from the command line.

    Raises
    ------
    ValueError
        When the model refuses them (one line).
    """
    return BackfillCostInputs(**{name: getattr(args, name) for _, name, _, _ in MODEL_OPTIONS})


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.measure:
        args.scan_cpu_items_per_second = measure_scan_cpu()
        print(
            f"measured: {args.scan_cpu_items_per_second:,.0f} items/s on one core "
            f"({MEASURED_RULE}, 1 KB items)"
        )
    try:
        inputs = inputs_from(args)
        lines = estimate_lines(inputs, args.worker_counts)
    except ValueError as exc:
        print(f"backfill-scale: error: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    figures = run_twin(args)
    if figures is None:
        return 0
    print(twin_line(figures))
    return 0 if figures.exact else 1


if __name__ == "__main__":
    sys.exit(main())
