"""The distributed backfill's cost model (aggregator/operations/backfill/cost.py): its arithmetic
on a small case computed by hand, its bounds, that more workers are never slower, and that the
tables of docs/operations/backfill-cost.md are what it computes.

``AGGREGATOR_UPDATE_COST_PAGE=1`` rewrites the page's generated blocks from the model (review the
diff, then commit it)."""

from __future__ import annotations

import itertools
import math
import os
import re
from pathlib import Path

import pytest

from aggregator.operations.backfill.cost import (
    BOUNDS,
    CHECKPOINT_BYTES,
    BackfillCostInputs,
    components_table,
    distinct,
    draws_for,
    estimate,
    figures_list,
    flush_records,
    progress_write_units,
    read_seconds,
    touched,
    workers_table,
)
from bench.backfill_scale import WORKER_COUNTS, estimate_lines

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "operations" / "backfill-cost.md"

SMALL = BackfillCostInputs(
    items=1_000_000,
    item_bytes=1024,
    contributing_share=1.0,
    aggregate_keys=1000,
    app_writes_per_second=100,
    changing_share=0.5,
    shards=4,
    retained_seconds=3600,
    stream_record_bytes=2048,
    workers=2,
    segments=4,
    join_buckets=1,
    reduce_buckets=1,
    page_items=1000,
    carry_keys=1_000_000,
    flush_items=1_000_000,
    lambda_memory_mb=1769,
    lambda_timeout_seconds=900,
    scan_cpu_items_per_second=20_000,
    s_entry_bytes=32,
    partial_bytes=16,
    stream_parse_records_per_second=10_000,
    stream_evaluate_records_per_second=50_000,
    scan_page_seconds=0.1,
    control_partitions=1000,
    aggregate_partitions=1,
    aggregate_checkpoints=0,
    stream_lag_seconds=5,
    stream_request_seconds=0.05,
)


def test_an_invocation_reads_for_its_time_less_the_reserve():
    assert read_seconds(900) == 840  # 900 - min(60, 180)
    assert read_seconds(100) == 80  # 100 - min(60, 20)


def test_a_small_case_computed_by_hand():
    e = estimate(SMALL)
    # the fence: 100 writes/s for an hour, 360,000 records of 2 KB, 512 a GetRecords (1 MB);
    # each of 4 shards at the one call a second the handler's four leave of five: 90,000 / 512
    # = 175.8 s; the CPU (360,000 / 10,000 = 36 s) is faster; plus a second
    fence = e.phase("fence")
    assert e.catch_up_records == 360_000
    assert fence.seconds == pytest.approx(1 + 90_000 / 512)
    assert fence.stream_reads == pytest.approx(360_000 / 512 + 4)
    assert e.warnings == ()  # 175.8 s: within an invocation's 840 s
    # a worker: a 1,000-item page (1,000 KB) per 0.1 s * 1000/1024: 10,240 items/s; a
    # partition's 3,000 read units a second at 1/4 unit per item allow 12,000; the CPU 20,000
    assert e.worker_items_per_second == pytest.approx(10_240)
    assert e.bound == "workers"  # two workers, far under the read quota (160,000 items/s)
    assert e.scan_items_per_second == pytest.approx(20_480)
    assert e.saturating_workers == 4  # the 4 segments bound them
    scan = e.phase("scan")
    assert scan.seconds == pytest.approx(1_000_000 / 20_480)
    assert scan.read_units == 250_000  # 1 KB items, strongly consistent: 1 unit per 4 items
    assert scan.invocations == 4  # 24.4 s a segment: one invocation each
    # per segment one flush: 250,000 S entries of 32 bytes (8,000,000 bytes) to the one join
    # bucket, in chunks of at most 358,400 bytes: 23 of 347,826 bytes and 150 of overhead,
    # 340 write units each; the partials: 1,000 keys of 16 bytes and 150, 16 units; a commit
    # of a 309-byte progress item (1 unit) and the stats' ADD (1)
    assert scan.write_units == pytest.approx(4 * (23 * 340 + 16 + 1 + 1))
    # B entries: half of the 100 writes a second, from the fence to the scan's end, its lag
    # (5 s) and a last pass (2 s: 4 shards * 0.05 s is less)
    assert e.b_entries == pytest.approx(50 * (90_000 / 512 + 1_000_000 / 20_480 + 5 + 2))
    assert e.collector.seconds == pytest.approx(1_000_000 / 20_480 + 7)
    # the reduce: 1,000 aggregates, one UpdateItem each (120 bytes and one 35-byte
    # checkpoint: 1 unit), one aggregate partition: 1,000 units a second
    assert e.aggregate_updates == pytest.approx(1000)
    assert e.reduce_passes == 1
    reduce = e.phase("reduce")
    assert reduce.write_units == pytest.approx(1000 + 3 + 1)  # the reducer's 3 saves, stats
    assert reduce.seconds >= 1.0
    # dollars
    assert e.dollars["DynamoDB reads"] == pytest.approx(e.read_units * 0.125e-6)
    assert e.dollars["DynamoDB writes"] == pytest.approx(e.write_units * 0.625e-6)
    assert e.dollars["Step Functions"] == pytest.approx(e.transitions * 0.025 / 1000)
    assert e.dollars_per_item == pytest.approx(e.total_dollars / 1_000_000)


def test_probes_read_every_committed_flush_s_first_chunk():
    e = estimate(SMALL.with_(app_writes_per_second=0))
    # the join's one invocation probes the 4 segments' first chunks (present: 85 read units
    # each, 347,976 bytes strongly consistent) and the collector's one flush (no B entries:
    # missing, 1 unit); then reads the 92 records (85 units each)
    assert e.phase("join").read_units == pytest.approx(4 * 85 + 1 + 92 * 85)
    # the reducer probes the 4 segments' partials (16,150 bytes: 4 units) and the join's two
    # flushes (no corrections: missing), then reads the 4 records once (one pass)
    assert e.phase("reduce").read_units == pytest.approx(4 * 4 + 2 + 4 * 4)
    assert e.probe_read_units == pytest.approx(341 + 18)


@pytest.mark.parametrize(("carry_keys", "passes"), [(700_000, 1), (400_000, 2), (250_000, 4)])
def test_a_reducer_reads_its_bucket_once_per_pass_and_per_doubling(carry_keys, passes):
    # a million aggregates: a segment's 250,000 contributions name 221,199 of them (fewer than
    # the carry: one flush a segment), the reducer's one bucket 632,121
    base = SMALL.with_(app_writes_per_second=0, aggregate_keys=1_000_000)
    e = estimate(base.with_(carry_keys=carry_keys))
    assert e.reduce_passes == passes  # the next power of two >= 632,121 / carry_keys
    # a segment's partials: 221,199 * 16 bytes in 10 chunks of 353,918 bytes (+150): 87 read
    # units each; the reducer probes the 4 first chunks and the join's 2 flushes (missing), then
    # reads the 40 chunks once per pass and once per doubling
    assert e.phase("reduce").read_units == pytest.approx(
        4 * 87 + 2 + (passes + math.log2(passes)) * 40 * 87
    )


def test_the_helpers():
    assert touched(2, 1) == pytest.approx(1)
    assert touched(4, 2) == pytest.approx(4 * (1 - 0.75**2))
    assert touched(1, 10) == 1
    assert touched(8, 0) == 0
    assert distinct(1000, 1000) == pytest.approx(1000 * (1 - math.exp(-1)))
    assert distinct(10_000_000, draws_for(10_000_000, 20_000)) == pytest.approx(20_000)
    assert draws_for(10, 10) == math.inf
    # 10 entries of 32 bytes in one bucket: one record of 150 + 320 bytes: 1 write unit, 1 read
    records = flush_records(1, 10, 32)
    assert (records.records, records.write_units, records.read_units) == (1, 1, 1)
    # 20,000 entries: 640,000 bytes in 2 chunks of 320,000 (+150): 313 write, 79 read units
    records = flush_records(1, 20_000, 32)
    assert (records.records, records.write_units, records.read_units) == (2, 626, 158)
    assert CHECKPOINT_BYTES == 14 + 17 + 4
    # a progress item of 1,000 bytes and 9 more per flush: 1,009 and 1,018 bytes fit 1 KB,
    # the next eight take 2 units each
    assert progress_write_units(10, 10, 1000) == 2 + 8 * 2
    assert progress_write_units(3, 0, 2000) == 3 * 2


def test_the_issues_case():
    e = estimate()
    i = e.inputs
    assert (i.items, i.workers, i.segments, i.join_buckets, i.reduce_buckets) == (
        1_000_000_000,
        64,
        256,
        64,
        64,
    )
    assert (i.page_items, i.carry_keys, i.flush_items) == (1000, 20_000, 50_000)
    assert e.bound == "read capacity"
    assert e.scan_items_per_second == 40_000 * 4  # 4 items of 1 KB per read unit
    assert e.phase("scan").read_units == 250_000_000
    assert e.saturating_workers == 16
    assert estimate(i.with_(workers=15)).bound == "workers"
    # 86.4 million records: the fence is its CPU, 21,000 records a second on one core
    assert e.catch_up_records == 86_400_000
    assert e.phase("fence").seconds == pytest.approx(1 + 86_400_000 / 21_000)
    # 156,250 aggregates a reducer, 20,000 a pass: 8 passes
    assert e.reduce_passes == 8
    assert any("goes on over 5 invocations" in w for w in e.warnings)


@pytest.mark.parametrize(
    ("changes", "bound"),
    [
        ({"control_partitions": 1}, "write capacity"),
        ({"max_rcu": 1000}, "read capacity"),
        ({"workers": 4, "segments": 2}, "segments"),
        (
            {
                "workers": 4000,
                "segments": 8192,
                "table_read_quota": 1e9,
                "table_write_quota": 1e9,
                "control_partitions": 100_000,
            },
            "Lambda concurrency",
        ),
    ],
)
def test_each_bound(changes, bound):
    e = estimate(BackfillCostInputs().with_(**changes))
    assert e.bound == bound
    assert bound in BOUNDS
    if bound == "Lambda concurrency":
        assert e.effective_workers == 1000 - 128 - 1


def test_the_progress_items_grow_with_their_flushes():
    # the collector's item holds 128 shards' positions (11.5 KB): each commit costs 12 units
    few = estimate(BackfillCostInputs(shards=128))
    many = estimate(BackfillCostInputs(shards=512))
    assert many.progress_write_units > few.progress_write_units
    # a week of retained writes for a collector whose flushes pass 400 KB: warned
    long = estimate(
        BackfillCostInputs(items=10**12, segments=20_000, shards=4000, lambda_concurrency=20_000)
    )
    assert any("400 KB" in w for w in long.warnings)


def test_the_collector_that_cannot_keep_up_is_warned_of():
    e = estimate(BackfillCostInputs(app_writes_per_second=30_000, table_write_quota=1e6))
    assert any("falls behind" in w for w in e.warnings)


@pytest.mark.parametrize(
    "base",
    [
        BackfillCostInputs(),
        BackfillCostInputs(table_read_quota=400_000, table_write_quota=400_000),
        BackfillCostInputs(items=10_000_000, segments=64, aggregate_keys=1000),
        BackfillCostInputs(control_partitions=1, aggregate_partitions=1, overlap_reads=False),
    ],
)
def test_more_workers_are_never_slower_and_faster_until_the_bound(base):
    counts = [*range(1, 200, 3), *range(200, 5000, 97)]
    estimates = [estimate(base.with_(workers=w)) for w in counts]
    seconds = [e.seconds for e in estimates]
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(seconds))
    saturating = estimates[0].saturating_workers
    scans = {w: e.phase("scan").seconds for w, e in zip(counts, estimates, strict=True)}
    below = [scans[w] for w in counts if w <= saturating]
    assert all(b < a for a, b in itertools.pairwise(below))  # strictly, until the bound
    assert len({round(scans[w], 6) for w in counts if w >= saturating}) == 1  # then nothing


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"items": 0}, "items must be positive"),
        ({"changing_share": 1.5}, "changing_share is a share"),
        ({"lambda_timeout_seconds": 1000}, "within Lambda's 900 s"),
        ({"shards": 999}, "leaves no worker"),
        ({"app_writes_per_second": 50_000}, "whole table write quota"),
        ({"segments": 20_000, "join_buckets": 10_000}, "over 30,000"),
        ({"reduce_buckets": 10_001}, "reduce_buckets must be 1 to 10,000"),
        ({"handler_polls_per_second": 5}, "leaves the collector no GetRecords"),
    ],
)
def test_bad_inputs_are_refused_in_one_line(changes, message):
    with pytest.raises(ValueError, match=message) as caught:
        estimate(BackfillCostInputs().with_(**changes))
    assert "\n" not in str(caught.value)


# -- the docs page ------------------------------------------------------------------------------

TABLE = re.compile(
    r"(?P<head><!-- cost-table: workers=(?P<workers>[\d,]+)(?P<changes>(?: \w+=[\d.]+)*) -->\n)"
    r"(?P<body>(?:\|.*\n)*)"
)
COMPONENTS = re.compile(r"(?P<head><!-- cost-components -->\n)(?P<body>(?:\|.*\n)*)")
FIGURES = re.compile(
    r"(?P<head><!-- cost-figures(?::(?P<changes>(?: \w+=[\d.]+)*))? -->\n)(?P<body>(?:- .*\n)*)"
)
LINES = re.compile(r"(?P<head><!-- cost-estimate-lines -->\n```text\n)(?P<body>(?:.*\n)*?)(?=```)")


def _changes(text: str) -> dict[str, float]:
    pairs = (part.split("=") for part in text.split())
    return {name: float(value) if "." in value else int(value) for name, value in pairs}


def render_page(text: str) -> str:
    """The page with each generated block as the model computes it."""

    def table(m: re.Match[str]) -> str:
        counts = tuple(int(w) for w in m["workers"].split(","))
        inputs = BackfillCostInputs().with_(**_changes(m["changes"]))
        return m["head"] + workers_table(inputs, counts)

    text = TABLE.sub(table, text)
    text = COMPONENTS.sub(lambda m: m["head"] + components_table(estimate()), text)
    text = FIGURES.sub(
        lambda m: (
            m["head"]
            + figures_list(estimate(BackfillCostInputs().with_(**_changes(m["changes"] or ""))))
        ),
        text,
    )
    lines = "\n".join(estimate_lines(BackfillCostInputs(), WORKER_COUNTS)) + "\n"
    return LINES.sub(lambda m: m["head"] + lines, text)


def test_the_docs_tables_are_the_models():
    text = PAGE.read_text(encoding="utf-8")
    assert len(TABLE.findall(text)) == 3
    assert COMPONENTS.search(text) and LINES.search(text)
    assert len(FIGURES.findall(text)) == 2
    expected = render_page(text)
    if os.environ.get("AGGREGATOR_UPDATE_COST_PAGE") and expected != text:
        PAGE.write_text(expected, encoding="utf-8")
        pytest.skip("rewrote docs/operations/backfill-cost.md from the model")
    assert text == expected, "re-render with AGGREGATOR_UPDATE_COST_PAGE=1 (see this module)"


def test_the_page_is_in_the_sites_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "operations/backfill-cost.md" in nav
