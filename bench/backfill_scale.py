"""A backfill beyond one machine (issue 33): the cost model's estimate for a billion items, then a
twin run (``make bench-backfill-scale``, or ``python -m bench.backfill_scale``).

What it prints
--------------
1. One ``estimate:`` line per worker count (``--worker-counts``: 16, 64, 256, 1,000, 4,000) with
   the wall time in hours and the dollars of :func:`aggregator.operations.backfill.cost.estimate`
   for ``--items`` items (a billion by default), and what bounds the scan; then one ``estimate:``
   line with the total for the default (``--workers``) by phase and by component, the dollars
   per million items and a worker's peak memory, and one ``estimate: warning:`` line per limit
   the inputs take the code past. The model's inputs are options (below); its page,
   ``docs/operations/backfill-cost.md``, gives the formulas and the same table.
2. The twin run (:func:`run_twin`), when it returns figures, ends with the issue's line
   (:func:`twin_line`): ``backfill-scale: <segments> segments, <workers> workers: <x> items/s,
   worker peak memory <m> MB, exact <yes|no>``.

``--measure`` first times the backfill's own code paths on one core of this machine
(:func:`measure`: the scan's loop with ``FlushBuffer.write`` and ``Job.put_records`` stubbed
out, the records' sizes, the join's and the reducer's decoding, the collector's parsing and
evaluating of stream records), prints one ``measured:`` line and uses the figures instead of the
model's measured constants (:mod:`aggregator.operations.backfill.cost`).

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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

from aggregator.core.engine import Engine
from aggregator.core.records import Image
from aggregator.core.rules import load_rules
from aggregator.operations.backfill import item_digest
from aggregator.operations.backfill.cost import (
    BackfillCostInputs,
    CostEstimate,
    estimate,
)
from aggregator.operations.backfill.distributed.start import (
    DEFAULT_CARRY_KEYS,
    DEFAULT_FLUSH_ITEMS,
    DEFAULT_PAGE_ITEMS,
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
    """The default's total, by phase and by component."""
    d = e.dollars
    lambda_dollars = d["Lambda GB-s"] + d["Lambda requests"]
    hours = {name: e.phase(name).seconds / 3600 for name in ("fence", "scan", "join", "reduce")}
    return (
        f"estimate: total for {e.inputs.workers:,} workers: {e.hours:.2f} h (fence "
        f"{hours['fence']:.2f}, scan {hours['scan']:.2f}, join {hours['join']:.2f}, reduce "
        f"{hours['reduce']:.2f}), ${e.total_dollars:,.2f} = reads "
        f"${d['DynamoDB reads']:,.2f} + writes ${d['DynamoDB writes']:,.2f} + stream reads "
        f"${d['stream reads']:,.2f} + Lambda ${lambda_dollars:,.2f} + Step Functions "
        f"${d['Step Functions']:,.2f}; ${e.dollars_per_item * 1e6:,.3f} per million items; the "
        f"scan saturates at {e.saturating_workers:,} workers; the collector reads up to "
        f"{e.collector_capacity:,.0f} records/s; worker peak memory {e.worker_peak_mb:,.0f} MB"
    )


def estimate_lines(inputs: BackfillCostInputs, worker_counts: Sequence[int]) -> list[str]:
    """The ``estimate:`` lines: one per worker count, then the total for ``inputs.workers`` and
    its warnings (one line each)."""
    lines = [estimate_line(estimate(inputs.with_(workers=w))) for w in worker_counts]
    total = estimate(inputs)
    return [*lines, total_line(total), *(f"estimate: warning: {w}" for w in total.warnings)]


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


@dataclass(frozen=True)
class Measured:
    """What :func:`measure` found on this machine, per second of one core (process time) or in
    bytes; each is one of :class:`~aggregator.operations.backfill.cost.BackfillCostInputs`'
    inputs (named alike)."""

    scan_cpu_items_per_second: float
    s_entry_bytes: float
    partial_bytes: float
    join_skip_entries_per_second: float
    join_decode_entries_per_second: float
    reduce_entries_per_second: float
    stream_parse_records_per_second: float
    stream_evaluate_records_per_second: float

    def line(self) -> str:
        """The bench's ``measured:`` line."""
        return (
            f"measured: scan {self.scan_cpu_items_per_second:,.0f} items/s; records "
            f"{self.s_entry_bytes:.1f} B per S entry, {self.partial_bytes:.1f} B per partial; "
            f"join {self.join_skip_entries_per_second:,.0f} entries/s skipped, "
            f"{self.join_decode_entries_per_second:,.0f} decoded; reduce "
            f"{self.reduce_entries_per_second:,.0f} partials/s; stream "
            f"{self.stream_parse_records_per_second:,.0f} records/s parsed, "
            f"{self.stream_evaluate_records_per_second:,.0f} evaluated (one core, "
            f"{MEASURED_RULE}, 1 KB items)"
        )


def _stub_job(join_buckets: int, reduce_buckets: int) -> tuple[Any, dict[str, Any]]:
    """A :class:`~aggregator.operations.backfill.distributed.job.Job` of the reference rules
    that never touches DynamoDB: its ``put_records`` keeps the records in the returned dict."""
    from aggregator.operations.backfill.distributed.job import Job, Settings

    rules = load_rules(list(DEFINITIONS))
    written: dict[str, Any] = {}
    job = Job.__new__(Job)
    job.backfill_id = "0123456789ab"
    job.layout = rules.layout
    job.rules = rules
    job.engine = Engine(rules)
    job.clock = time.time
    job.evaluation_failures = 0
    job.settings = Settings(
        backfill_id=job.backfill_id,
        rules=(MEASURED_RULE,),
        carried=(),
        segments=1,
        join_buckets=join_buckets,
        reduce_buckets=reduce_buckets,
        workers=1,
        max_rcu=None,
        stream_lag_seconds=5.0,
        page_items=DEFAULT_PAGE_ITEMS,
        carry_keys=DEFAULT_CARRY_KEYS,
        flush_items=DEFAULT_FLUSH_ITEMS,
    )
    job.put_records = written.update  # type: ignore[method-assign]
    return job, written


def _best(run: Callable[[], object], repeats: int) -> float:
    """The least process time of ``repeats`` calls of ``run``."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return max(best, 1e-9)


def measure(
    page_items: int = 1000, pages: int = 20, buckets: int = 64, repeats: int = 3
) -> Measured:
    """Time the backfill's own code paths on this machine (one core, process time, the best of
    ``repeats``), on ``pages`` ``Scan`` pages of ``page_items`` 1 KB likes
    (:func:`sample_items`: each of a post of ten million, so each item its own aggregate):

    - the scan (:func:`~aggregator.operations.backfill.distributed.scan.scan_segment`'s loop):
      botocore parses each page, then per item its key's :func:`item_digest`, its contribution
      (``Engine.image_entries`` through ``Job.contributions``), ``FlushBuffer.add_amounts`` and
      ``add_entry``; then one ``FlushBuffer.write`` of them all over ``buckets`` join and
      ``buckets`` reduce buckets, ``Job.put_records`` stubbed out;
    - the records' sizes: bytes per S entry and per partial amount in what ``write`` encoded;
    - the join: per S entry of a record, its JSON parsed and its digest looked up in the
      bucket's first changes (a miss: most entries), and per entry decoded in full (a match), as
      ``decode_entries`` does;
    - the reduce: per partial, ``decode_amounts`` and the pass's second hash (a BLAKE2b of the
      aggregate's batch key, as ``reduce.residue``);
    - the collector: botocore parsing a ``GetRecords`` response of 2.2 KB records (a 1 KB
      item's ``NEW_AND_OLD_IMAGES``), and per record after the fence both images' contributions.
    """
    import hashlib
    from decimal import Decimal

    import botocore.session
    from botocore import parsers

    from aggregator.operations.backfill.distributed.entries import decode_amounts, decode_entries
    from aggregator.operations.backfill.distributed.flushing import FlushBuffer

    job, written = _stub_job(buckets, buckets)
    items = sample_items(page_items * pages)
    bodies = [
        json.dumps({"Items": chunk, "Count": len(chunk), "ScannedCount": len(chunk)}).encode()
        for chunk in (items[p * page_items : (p + 1) * page_items] for p in range(pages))
    ]
    session = botocore.session.get_session()
    scan_shape = session.get_service_model("dynamodb").operation_model("Scan").output_shape
    parser = parsers.create_parser("json")
    names = job.layout.key_attributes

    def scan() -> None:
        written.clear()
        buffer = FlushBuffer(job, "scanned")
        for body in bodies:
            page = parser.parse({"body": body, "headers": {}, "status_code": 200}, scan_shape)
            for item in page["Items"]:
                keys = {n: item[n] for n in names if n in item}
                if job.layout.is_reserved(keys):
                    continue
                contribution = job.contributions(Image(item))
                if contribution:
                    buffer.add_amounts(contribution)
                    buffer.add_entry(item_digest(keys, job.layout), contribution)
        buffer.write("s0", 0, "attempt0")

    scan_cpu = len(items) / _best(scan, repeats)
    blobs = {key: record["data"]["B"] for key, record in written.items()}
    scanned = [b for k, b in blobs.items() if "#scanned#" in k]
    parts = [b for k, b in blobs.items() if "#part#" in k]
    entries = sum(len(decode_entries(b)) for b in scanned)
    partials = sum(len(decode_amounts(b)) for b in parts)
    s_entry_bytes = sum(len(b) for b in scanned) / entries
    partial_bytes = sum(len(b) for b in parts) / partials

    wanted = {bytes(16)}  # the bucket's first changes: none of these items

    def join_skip() -> None:
        for blob in scanned:
            decoded = json.loads(zlib.decompress(blob).decode("utf-8"))
            for digest_hex, _ in decoded["items"]:
                _ = bytes.fromhex(digest_hex) in wanted

    def join_decode() -> None:
        for blob in scanned:
            decode_entries(blob)

    def reduce() -> None:
        for blob in parts:
            for ref, amounts in decode_amounts(blob).items():
                digest = hashlib.blake2b(ref.batch_key.encode("utf-8"), digest_size=8).digest()
                _ = (int.from_bytes(digest, "big") % 8, amounts[0] + Decimal(0))

    records = [_stream_record(item, n) for n, item in enumerate(items[:page_items])]
    stream_body = json.dumps({"Records": records, "NextShardIterator": "x" * 200}).encode()
    stream_shape = (
        session.get_service_model("dynamodbstreams").operation_model("GetRecords").output_shape
    )
    parsed: list[dict[str, Any]] = []

    def stream_parse() -> None:
        response = {"body": stream_body, "headers": {}, "status_code": 200}
        parsed[:] = parser.parse(response, stream_shape)["Records"]

    def evaluate() -> None:
        for raw in parsed:
            old = job.contributions(Image(raw["dynamodb"]["OldImage"]))
            new = job.contributions(Image(raw["dynamodb"]["NewImage"]))
            _ = old == new

    parse_rate = len(records) / _best(stream_parse, repeats)
    return Measured(
        scan_cpu_items_per_second=scan_cpu,
        s_entry_bytes=s_entry_bytes,
        partial_bytes=partial_bytes,
        join_skip_entries_per_second=entries / _best(join_skip, repeats),
        join_decode_entries_per_second=entries / _best(join_decode, repeats),
        reduce_entries_per_second=partials / _best(reduce, repeats),
        stream_parse_records_per_second=parse_rate,
        stream_evaluate_records_per_second=len(parsed) / _best(evaluate, repeats),
    )


def _stream_record(item: dict[str, Any], n: int) -> dict[str, Any]:
    """A ``MODIFY`` record of ``item`` (DynamoDB Streams JSON, both images: about 2.2 KB)."""
    old = {**item, "likedAt": {"N": str(int(item["likedAt"]["N"]) - 1)}}
    return {
        "eventID": f"{n:032x}",
        "eventName": "MODIFY",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_700_000_000,
            "Keys": {"PK": item["PK"], "SK": item["SK"]},
            "NewImage": item,
            "OldImage": old,
            "SequenceNumber": str(10**20 + n),
            "SizeBytes": 2100,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
    }


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


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
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
    ("--retained-seconds", "retained_seconds", _positive_float, "the stream's writes held"),
    ("--fence-age-seconds", "fence_age_seconds", _non_negative, "the handler's fences' age"),
    ("--workers", "workers", _positive_int, "the default worker count (the total's line)"),
    ("--segments", "segments", _positive_int, "Scan segments"),
    ("--scan-cpu", "scan_cpu_items_per_second", _positive_float, "items one vCPU scans/s"),
    ("--scan-page-seconds", "scan_page_seconds", _positive_float, "seconds per 1 MB Scan page"),
    ("--memory-mb", "lambda_memory_mb", _positive_int, "the function's memory"),
    ("--timeout-seconds", "lambda_timeout_seconds", _positive_float, "the function's timeout"),
    ("--page-items", "page_items", _positive_int, "the Scan page's Limit"),
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
        help="time the backfill's code paths on one core here and use the figures",
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
    measured = measure() if args.measure else None
    if measured is not None:
        print(measured.line())
    try:
        inputs = inputs_from(args)
        if measured is not None:
            inputs = inputs.with_(**asdict(measured))
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
