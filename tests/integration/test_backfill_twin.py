"""The distributed backfill's twin (:mod:`aggregator.dev.backfill_twin`): an adopted table,
a stream of rolling shards with crashing handlers, an application writing throughout, scan, join
and reduce invocations as separate processes with a time budget, some killed at a random
moment; every aggregate equals a count of the items made without the engine, and the backfill
ends while the application writes.

``make test`` runs it small (8 shards at once, 8 segments); ``make soak`` at the issue's size
(64 shards at once, 256 segments, 40,000 items: :class:`~aggregator.dev.backfill_twin.
TwinSettings`' defaults), with a few seeds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aggregator.dev.backfill_twin import TwinSettings, run_backfill_twin
from tests.integration.harness import SOAK

pytestmark = [pytest.mark.integration]

SMALL = TwinSettings(
    posts=40,
    likes=600,
    partitions=8,
    rollover_seconds=5.0,
    segments=8,
    workers=4,
    join_buckets=2,
    reduce_buckets=2,
    budget_seconds=1.0,
    kill_share=0.3,
    writes_per_second=60.0,
    crash_share=0.1,
    stream_lag_seconds=0.5,
    page_items=20,
    carry_keys=15,
    flush_items=15,
)


@pytest.mark.parametrize("seed", range(3) if SOAK else [0])
def test_the_twin_backfill_is_exact_and_ends_while_the_application_writes(dynamodb_local, seed):
    settings = TwinSettings(seed=seed) if SOAK else SMALL
    result = run_backfill_twin(dynamodb_local, settings)
    print(
        f"\n{result.line()}: {result.items_scanned} items in {result.backfill_seconds:.1f} s, "
        f"{result.shards} shards, {result.invocations} invocations, {result.killed} killed, "
        f"{result.application_writes} writes, {result.handler_crashes} handler crashes, "
        f"{result.changes} changes"
    )
    soak_dir = os.environ.get("AGGREGATOR_SOAK_DIR")
    if soak_dir:
        Path(soak_dir).mkdir(parents=True, exist_ok=True)
        line = {"line": result.line(), "seconds": result.backfill_seconds, "wrong": result.wrong}
        (Path(soak_dir) / f"backfill-twin-{seed}.json").write_text(json.dumps(line))
    assert result.wrong == []
    assert result.overruns == 0  # every invocation stopped itself within its budget
    # one checkpoint of the backfill's per aggregate, however many segments counted it
    assert result.most_backfill_checkpoints == 1
    # the paths were reached: kills, changes racing the scan, crashes, rollovers
    assert result.killed > 0 and result.changes > 0 and result.handler_crashes > 0
    assert result.shards > settings.partitions
    assert result.application_writes > 0  # the application wrote throughout
