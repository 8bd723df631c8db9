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
    estimate,
    flush_write_units,
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
    workers=2,
    segments=4,
    scan_cpu_items_per_second=20_000,
    scan_page_seconds=0.1,
    lambda_memory_mb=1769,
    flush_items=1_000_000,
    carry_keys=1_000_000,
    join_buckets=1,
    reduce_buckets=1,
    control_partitions=1000,
    aggregate_partitions=1,
    aggregate_checkpoints=0,
    stream_lag_seconds=5,
    stream_request_seconds=0.05,
)


def test_a_small_case_computed_by_hand():
    e = estimate(SMALL)
    # a worker: a 1 MB page holds 1,024 items of 1 KB, one page per 0.1 s: 10,240 items/s; a
    # partition's 3,000 read units a second at 1/4 unit per item would allow 12,000; the CPU
    # (20,000 at one vCPU) is faster still
    assert e.worker_items_per_second == 10_240
    # two workers, far under the read quota (40,000 / 0.25 = 160,000 items/s)
    assert e.bound == "workers"
    assert e.scan_items_per_second == 20_480
    assert e.saturating_workers == 4  # the 4 segments bound them
    scan = e.phase("scan")
    assert scan.seconds == pytest.approx(1_000_000 / 20_480)  # 48.83 s
    assert scan.read_units == 250_000  # 1 KB items, strongly consistent: 1 unit per 4 items
    # per segment: 250,000 S entries in one flush to one join bucket: 8,000,000 bytes, in
    # records of at most 350 KB: (358,400 - 100) // 32 = 11,196 entries fit, so 23 records of
    # 10,869.6 entries, each ceil((100 + 347,826) / 1,024) = 340 units; the partials: the 1,000
    # keys in one record of 100 + 32,000 bytes = 32 units; a progress commit per flush (2)
    assert scan.write_units == 4 * (23 * 340 + 32 + 2)
    assert scan.invocations == 4  # one per segment: 97.7 s each, under 600 s
    # B entries: 100 writes/s, half of them changing a contribution, from the fence to the
    # scan's end and its lag
    assert e.b_entries == pytest.approx(100 * 0.5 * (1_000_000 / 20_480 + 5))
    collector = e.collector
    # the collector reads from the fence to the tail: the scan, the lag, one pass (4 * 0.05 s)
    assert collector.seconds == pytest.approx(1_000_000 / 20_480 + 5 + 0.2)
    # a GetRecords call every 0.05 s, and one per 1,000 records read
    assert collector.stream_reads == pytest.approx(
        collector.seconds / 0.05 + 100 * collector.seconds / 1000
    )
    # the reduce: 1,000 updates of 1 unit (120 bytes and one 35-byte checkpoint), one
    # aggregate partition: 1,000 units a second, so one second
    assert e.aggregate_updates == pytest.approx(1000)
    reduce = e.phase("reduce")
    assert reduce.write_units == pytest.approx(1000 + 1)  # and the reducer's progress
    assert reduce.seconds == pytest.approx(1.0)
    # dollars: reads at $0.125 per million units
    reads = sum(p.read_units for p in (*e.phases, e.collector))
    assert e.dollars["DynamoDB reads"] == pytest.approx(reads * 0.125e-6)
    assert reads == 250_000 + e.phase("join").read_units + reduce.read_units
    assert e.dollars["Step Functions"] == pytest.approx(e.transitions * 0.025 / 1000)
    assert e.dollars_per_item == pytest.approx(e.total_dollars / 1_000_000)


def test_the_helpers():
    assert touched(2, 1) == pytest.approx(1)
    assert touched(4, 2) == pytest.approx(4 * (1 - 0.75**2))
    assert touched(1, 10) == 1
    assert touched(8, 0) == 0
    assert distinct(1000, 1000) == pytest.approx(1000 * (1 - math.exp(-1)))
    # 10 entries over one bucket: one record of 100 + 320 bytes, 1 unit; 100 entries: 4 units
    assert flush_write_units(1, 10) == (1, 1)
    assert flush_write_units(1, 100) == (1, 4)
    # 20,000 entries: 2 records of 10,000 (320,100 bytes: 313 units each)
    assert flush_write_units(1, 20_000) == (2, 2 * 313)
    assert CHECKPOINT_BYTES == 14 + 17 + 4


def test_the_issues_case_is_bound_by_the_read_quota():
    e = estimate()
    assert e.inputs.items == 1_000_000_000
    assert e.bound == "read capacity"
    assert e.scan_items_per_second == 40_000 * 4  # 4 items of 1 KB per read unit
    assert e.phase("scan").read_units == 250_000_000
    assert e.saturating_workers == 16
    assert estimate(e.inputs.with_(workers=15)).bound == "workers"


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
        (
            {
                "workers": 15_000,
                "segments": 20_000,
                "lambda_concurrency": 20_000,
                "table_read_quota": 1e9,
                "table_write_quota": 1e9,
                "control_partitions": 100_000,
            },
            "Distributed Map concurrency",
        ),
    ],
)
def test_each_bound(changes, bound):
    e = estimate(BackfillCostInputs().with_(**changes))
    assert e.bound == bound
    assert bound in BOUNDS
    if bound == "Lambda concurrency":
        assert e.effective_workers == 1000 - 128 - 1
    if bound == "Distributed Map concurrency":
        assert e.effective_workers == 10_000


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
    counts = [*range(1, 200), *range(200, 5000, 37)]
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
        ({"invocation_seconds": 1000}, "within Lambda's 900 s"),
        ({"shards": 999}, "leaves no worker"),
        ({"app_writes_per_second": 50_000}, "whole table write quota"),
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
    lines = "\n".join(estimate_lines(BackfillCostInputs(), WORKER_COUNTS)) + "\n"
    return LINES.sub(lambda m: m["head"] + lines, text)


def test_the_docs_tables_are_the_models():
    text = PAGE.read_text(encoding="utf-8")
    assert len(TABLE.findall(text)) == 3
    assert COMPONENTS.search(text) and LINES.search(text)
    expected = render_page(text)
    if os.environ.get("AGGREGATOR_UPDATE_COST_PAGE") and expected != text:
        PAGE.write_text(expected, encoding="utf-8")
        pytest.skip("rewrote docs/operations/backfill-cost.md from the model")
    assert text == expected, "re-render with AGGREGATOR_UPDATE_COST_PAGE=1 (see this module)"


def test_the_page_is_in_the_sites_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "operations/backfill-cost.md" in nav
