"""The event counter (definitions/event_counts.yaml) over 37 simulated hours on DynamoDB Local.

As in the seed article: each hour 20 to 100 events (``make test``: 5 to 25) for one of three
providers, with ``insertUtcTime`` in epoch milliseconds, counted per hour and per minute and kept
25 hours. The processing clock follows simulated time (the end of the hour just written), and
24-hour sliding counts are read at many ``now`` points, on and off minute and hour boundaries,
and compared with a brute-force count over the raw events made here with integer arithmetic. Then
retractions: deleting an event whose buckets are past their retention is skipped and counted, and
never recreates a bucket that TTL has deleted; deleting a recent event is retracted.
"""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from tests.factories import ddb_json
from tests.fakes import Clock
from tests.integration.harness import SOAK, delete, pipeline, put, utc_text

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = load_rules(ROOT / "definitions" / "event_counts.yaml")
RULE = "events_per_counter"
HOURS = 37
DAY = 86400
PROVIDERS = [f"job_event_provider_id_{i}" for i in (1, 2, 3)]
EVENTS_PER_HOUR = (20, 100) if SOAK else (5, 25)
"""The seed article's rate in a soak; a quarter of it in ``make test`` (the same hours, buckets
and retention edges, fewer events in each)."""
MOMENTS_PER_HOUR = 11 if SOAK else 6
"""Sliding-window reads per hour and provider: the hour's edges, minute boundaries and random
seconds (``make test``: the edges, one minute boundary and two random moments)."""
PROVIDERS_PER_MOMENT = len(PROVIDERS) if SOAK else 1
"""Providers read at each moment: ``make soak`` all three, ``make test`` one in turn."""


@dataclass
class Event:
    id: str
    provider: str
    millis: int

    @property
    def seconds(self) -> int:
        return self.millis // 1000


def brute_force(events: list[Event], provider: str, start: int, end: int) -> Decimal:
    """Events of ``provider`` with ``start <= time < end`` (epoch seconds, whole seconds)."""
    return Decimal(sum(1 for e in events if e.provider == provider and start <= e.seconds < end))


def expected_range(now: float, last: int = DAY) -> tuple[int, int]:
    """[start, end) of a sliding window at ``now``: the ``last`` seconds up to ``now`` (rounded
    up to the second), widened out to whole minutes (the start down, the end up)."""
    asked_end = math.ceil(now)
    return (asked_end - last) // 60 * 60, math.ceil(asked_end / 60) * 60


@dataclass
class Simulation:
    ddb: object
    streams: object
    name: str
    arn: str
    store: AggregateStore
    events: list[Event]
    clock: Clock
    t0: int
    checked: list
    mode: str = "exactly-once"
    server: object = None

    def drain(self):
        return pipeline(
            self.ddb,
            self.streams,
            self.name,
            self.arn,
            batch_size=50,
            rules=RULES,
            clock=self.clock,
            mode=self.mode,
        ).runner.run()


# The write mode changes how the counts are written, not what the window queries read: make test
# runs the default mode, make soak all three (AGGREGATOR_EVENT_COUNTER_MODES=all).
MODES = (
    ["exactly-once", "window", "at-least-once"]
    if os.environ.get("AGGREGATOR_EVENT_COUNTER_MODES") == "all"
    else ["exactly-once"]
)


@pytest.fixture(scope="module", params=MODES)
def simulation(request):
    """37 hours of events written and processed hour by hour with a simulated clock, with
    sliding counts checked along the way (shared by this module's tests, which run in order).

    Each mode on a DynamoDB Local of its own: the server slows down as the streams of earlier
    tables pile up (the third mode took three times the first's 65 s on a shared one)."""
    from aggregator.dynamodb.table import create_table
    from tests.conftest import _local_server

    servers = _local_server()
    dynamodb_local = next(servers)
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    name = f"events-{uuid.uuid4().hex[:8]}"
    arn = create_table(ddb, name)
    rng = random.Random(2019)
    # simulated time starts a week from now at an hour boundary, so bucket TTLs lie in the future
    # for real (DynamoDB Local does not promise to expire items, but AWS would); 17 s past it
    t0 = (int(time.time()) // 3600 + 24 * 7) * 3600 + 17
    store = AggregateStore(ddb, name, RULES)
    sim = Simulation(
        ddb, streams, name, arn, store, [], Clock(t0), t0, [], request.param, dynamodb_local
    )
    for hour in range(HOURS):
        for _ in range(rng.randint(*EVENTS_PER_HOUR)):
            millis = (t0 + hour * 3600) * 1000 + rng.randint(0, 3600 * 1000 - 1)
            e = Event(str(uuid.uuid4()), rng.choice(PROVIDERS), millis)
            put(
                ddb,
                name,
                {
                    "pk": f"EVENT#{e.id}",
                    "sk": "EVENT",
                    "counterKeyPrefix": e.provider,
                    "insertUtcTime": e.millis,
                    "retention": 90000,
                },
            )
            sim.events.append(e)
        sim.clock.now = t0 + (hour + 1) * 3600
        stats = sim.drain()
        assert stats.failures == 0 and stats.expired == 0
        # sliding 24-hour counts at several moments of the hour just written: its edges, minute
        # boundaries, and random seconds
        offsets = (0, 1, 59, 60, 1799, 3599, 3600) if SOAK else (0, 59, 60, 3599)
        moments = [t0 + hour * 3600 + offset for offset in offsets]
        moments += [t0 + hour * 3600 + rng.randint(0, 3600) for _ in range(3 if SOAK else 1)]
        moments += [t0 + hour * 3600 + rng.randint(0, 3600) + 0.25]
        for i, now in enumerate(moments):
            lo, hi = expected_range(now)
            # make test: one provider per moment, in turn (every provider is read at every
            # kind of moment over the hours); make soak: all three at every moment
            turn = (hour + i) % len(PROVIDERS)
            for provider in PROVIDERS if SOAK else PROVIDERS[turn : turn + 1]:
                result = sim.store.window(RULE, provider, last=DAY, now=now)
                assert (result.start, result.end) == (lo, hi)
                assert result.complete
                assert result.value == brute_force(sim.events, provider, lo, hi), (hour, now)
                assert result.requests <= 3 and result.items_read <= 84
                sim.checked.append(result)
    yield sim
    next(servers, None)  # stops the server


def test_sliding_24_hour_counts_equal_brute_force_at_many_moments(simulation):
    store, events, clock, t0, checked = (
        simulation.store,
        simulation.events,
        simulation.clock,
        simulation.t0,
        simulation.checked,
    )
    assert len(checked) == HOURS * MOMENTS_PER_HOUR * PROVIDERS_PER_MOMENT
    assert {r.value for r in checked} != {Decimal(0)}
    # once the simulation has run a full day, every window reads coarse hour buckets
    full = [r for r in checked if r.end - t0 > DAY + 3600]
    assert full and all(sum(p.granularity.label == "hour" for p in r.parts) == 1 for r in full)
    items = sorted(r.items_read for r in full)
    print(
        f"\n24-hour window queries after the first day: {len(full)}, requests per query "
        f"{min(r.requests for r in full)}-{max(r.requests for r in full)}, items read "
        f"median {items[len(items) // 2]} max {items[-1]}, modelled RCU max "
        f"{max(r.read_units for r in full)}"
    )
    # explicit ranges at random minute edges, and ranges inside one hour
    rng = random.Random(7)
    for _ in range(40):
        a = t0 - 17 + rng.randint(0, HOURS * 60) * 60
        b = a + rng.randint(0, 20 * 60) * 60
        provider = rng.choice(PROVIDERS)
        result = store.window(RULE, provider, start=a, end=b, now=b)
        assert result.value == brute_force(events, provider, a, b)
        assert (result.start, result.end) == (a, b) and result.complete
    # read later, a range past the retention is flagged incomplete and its expired buckets
    # (which TTL may delete at any time) are not counted
    stale = store.window(RULE, PROVIDERS[0], start=t0 - 17, end=t0 - 17 + 3600, now=clock.now)
    assert not stale.complete and stale.value == 0 and stale.items_read > 0


def test_hour_and_minute_buckets_carry_the_retention_as_ttl(simulation):
    store, events = simulation.store, simulation.events
    e = events[0]
    items = [a for a in store.list(RULE) if a.key == e.provider]
    minute_start = e.seconds // 60 * 60
    hour_start = e.seconds // 3600 * 3600
    by_bucket = {(a.granularity, a.bucket): a for a in items}
    minute = by_bucket[("minute", utc_text(minute_start))]
    hour = by_bucket[("hour", utc_text(hour_start))]
    assert minute.expires == minute_start + 60 + 90000
    assert hour.expires == hour_start + 3600 + 90000
    assert hour.sort_key == f"{RULE}#{e.provider}#hour#{utc_text(hour_start)}"
    # per provider, the hour buckets add up to all of its events, and so do the minute buckets
    for provider in PROVIDERS:
        mine = [a for a in store.list(RULE) if a.key == provider]
        total = brute_force(events, provider, -(2**40), 2**40)
        assert sum(a.value for a in mine if a.granularity == "hour") == total
        assert sum(a.value for a in mine if a.granularity == "minute") == total


def test_retractions_to_expired_buckets_are_skipped_and_never_recreate_them(simulation):
    ddb, name, store, events = simulation.ddb, simulation.name, simulation.store, simulation.events
    clock, t0 = simulation.clock, simulation.t0
    clock.now = t0 + HOURS * 3600
    old = [e for e in events if e.seconds < t0 + 3 * 3600]  # buckets expired 25 h after their end
    first, second = (
        old[0],
        next(
            e
            for e in old[1:]
            if e.seconds // 60 != old[0].seconds // 60 and e.provider == old[0].provider
        ),
    )
    recent = events[-1]
    minute_key = f"{RULE}#{first.provider}#minute#{utc_text(first.seconds // 60 * 60)}"
    before = {a.sort_key: a.value for a in store.list(RULE)}
    # TTL has deleted the first event's minute bucket (DynamoDB Local has no TTL: do it here)
    ddb.delete_item(TableName=name, Key=ddb_json({"pk": "AGGREGATES", "sk": minute_key}))
    for e in (first, second, recent):
        delete(ddb, name, f"EVENT#{e.id}", "EVENT")
    stats = simulation.drain()
    assert (stats.expired, stats.expired_retractions) == (4, 4)  # 2 events x (hour, minute)
    after = {a.sort_key: a.value for a in store.list(RULE)}
    assert minute_key not in after  # not recreated with -1 and a fresh TTL
    recent_keys = {
        f"{RULE}#{recent.provider}#minute#{utc_text(recent.seconds // 60 * 60)}",
        f"{RULE}#{recent.provider}#hour#{utc_text(recent.seconds // 3600 * 3600)}",
    }
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == recent_keys
    assert all(after[k] == before[k] - 1 for k in recent_keys)
    events.remove(recent)
    result = store.window(RULE, recent.provider, last=DAY, now=clock.now)
    lo, hi = expected_range(clock.now)
    assert result.value == brute_force(events, recent.provider, lo, hi)


def test_window_command_prints_the_count_and_its_cost(simulation):
    name, events, clock = simulation.name, simulation.events, simulation.clock
    end = int(clock.now) // 60 * 60
    provider = PROVIDERS[1]
    result = CliRunner().invoke(
        main,
        [
            "query",
            "window",
            RULE,
            provider,
            "--last",
            "24h",
            "--end",
            str(end),
            "--table",
            name,
            "--definitions",
            str(ROOT / "definitions" / "event_counts.yaml"),
            "--endpoint-url",
            simulation.server.endpoint_url,
        ],
    )
    assert result.exit_code == 0, result.output
    expected = brute_force(events, provider, end - DAY, end)
    assert f"{expected:,}" in result.output
    assert f"[{utc_text(end - DAY)}, {utc_text(end)})" in result.output
    assert "Query request(s)" in result.output
