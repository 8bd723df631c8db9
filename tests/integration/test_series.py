"""``AggregateStore.series`` and ``query window --series`` on DynamoDB Local: every bucket of a
range, written or not, against counts and means computed here from the written events, with gaps,
range edges, a kind with several fields and buckets past their retention."""

from __future__ import annotations

import json
import random
import re
import time
from collections import defaultdict
from decimal import Context, Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.exceptions import QueryError
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from tests.integration.harness import pipeline, put

pytestmark = pytest.mark.integration

HOUR = 3600
RULES_TEXT = """version: 1
rules:
  - name: plays
    match: {type: play}
    key: "{player}"
    window: {time: ts, unit: epoch_seconds, granularities: [hour, minute], retention: 12h}
  - name: mean_score
    match: {type: play}
    key: "{player}"
    delta: {attribute: score}
    kind: mean
    window: {time: ts, unit: epoch_seconds, granularities: [hour], retention: 12h}
"""


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("series") / "rules.yaml"
    path.write_text(RULES_TEXT, encoding="utf-8")
    return path, load_rules(path)


def test_every_bucket_of_the_range_with_gaps_edges_fields_and_expiry(
    ddb, streams, dynamodb_local, rules
) -> None:
    path, ruleset = rules
    name = f"series-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    rng = random.Random(34)
    now = (int(time.time()) // HOUR) * HOUR + 1800  # half past this hour
    first = now - 1800 - 9 * HOUR  # ten hours, the last one running
    plays: list[tuple[int, str, int]] = []
    for i in range(120):
        hour = rng.choice([h for h in range(10) if h not in (3, 4)])  # hours 3 and 4: no play
        ts = first + hour * HOUR + rng.randrange(HOUR if hour < 9 else 1800)
        player = rng.choice(["ann", "bob"])
        score = rng.randrange(-5, 50)
        plays.append((ts, player, score))
        put(
            ddb,
            name,
            {"pk": f"PLAY#{i}", "sk": "PLAY", "type": "play", "player": player, "ts": ts,
             "score": score},
        )  # fmt: skip
    pipeline(ddb, streams, name, arn, rules=ruleset, batch_size=50).runner.run()
    store = AggregateStore(ddb, name, ruleset)

    counts: dict[int, int] = defaultdict(int)
    scores: dict[int, list[int]] = defaultdict(list)
    for ts, player, score in plays:
        if player == "ann":
            counts[ts - ts % HOUR] += 1
            scores[ts - ts % HOUR].append(score)

    # the last 8 hours at half past: the range widens out to 9 whole hours
    result = store.series("plays", "ann", granularity="hour", last=8 * HOUR, now=now)
    hours = list(range(now - 1800 - 8 * HOUR, now + 1800, HOUR))
    assert [b.start for b in result.buckets] == hours and (result.start, result.end) == (
        hours[0],
        hours[-1] + HOUR,
    )
    assert [b.value for b in result.buckets] == [Decimal(counts[h]) for h in hours]
    assert [b.written for b in result.buckets] == [counts[h] > 0 for h in hours]
    assert result.total == sum(counts[h] for h in hours)
    assert result.requests == 1 and result.items_read == sum(1 for h in hours if counts[h])
    window = store.window("plays", "ann", start=hours[0], end=hours[-1] + HOUR, now=now)
    assert window.value == result.total
    # minutes: one Query too, every minute of the last 90, most of them never written
    minutes = store.series("plays", "ann", granularity="minute", last=90 * 60, now=now)
    assert len(minutes.buckets) == 90 and minutes.requests == 1
    per_minute: dict[int, int] = defaultdict(int)
    for ts, player, _ in plays:
        if player == "ann":
            per_minute[ts - ts % 60] += 1
    assert [b.value for b in minutes.buckets] == [
        Decimal(per_minute[b.start]) for b in minutes.buckets
    ]
    # a mean per hour: its fields bucket by bucket, and over the range from sums and counts
    means = store.series("mean_score", "ann", last=8 * HOUR, now=now)
    for bucket in means.buckets:
        got = scores[bucket.start]
        if not got:
            assert not bucket.written and bucket.fields == {}
            continue
        assert bucket.fields["sum"] == sum(got) and bucket.fields["count"] == len(got)
        # DynamoDB's precision: 38 significant digits
        assert bucket.fields["mean"] == Context(prec=38).divide(Decimal(sum(got)), len(got))
    every = [s for h in hours for s in scores[h]]
    assert means.fields["count"] == len(every) and means.fields["sum"] == sum(every)
    # read later: the first buckets are past their 12 h retention, read as 0 and flagged
    later_now = now + 6 * HOUR
    later = store.series("plays", "ann", granularity="hour", end=now, last=8 * HOUR, now=later_now)
    assert not later.complete
    expired = [b for b in later.buckets if b.start + HOUR + 12 * HOUR <= later_now]
    assert expired and all(b.value == 0 and not b.written for b in expired)

    with pytest.raises(QueryError, match="keeps no 'day' buckets; it keeps hour, minute"):
        store.series("plays", "ann", granularity="day", last=HOUR, now=now)
    with pytest.raises(QueryError, match="more than a series reads"):
        store.series("plays", "ann", granularity="minute", last=30 * 24 * HOUR, now=now)
    # without a granularity, the finest whose buckets fit: 30 days of hours, not of minutes
    month = store.series("plays", "ann", last=30 * 24 * HOUR, now=now)
    assert month.granularity == "hour" and len(month.buckets) == 30 * 24 + 1

    # the command: a table, a sparkline with the total, and --json with every bucket
    runner = CliRunner()
    args = ["query", "window", "plays", "ann", "--series", "hour", "--last", "8h"]
    args += ["--now", str(now), "-d", str(path), "--table", name]
    args += ["--endpoint-url", dynamodb_local.endpoint_url]
    shown = runner.invoke(main, args)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    summary = next(i for i, line in enumerate(lines) if "hour buckets, total" in line)
    assert lines[summary - 1] == _spark([counts[h] for h in hours])  # the sparkline above it
    assert lines[summary].endswith(f"9 hour buckets, total {result.total}")
    data = json.loads(runner.invoke(main, [*args, "--json"]).output)
    assert [Decimal(b["value"]) for b in data["buckets"]] == [b.value for b in result.buckets]
    assert data["buckets"][0]["start"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(hours[0]))
    assert (data["total"], data["granularity"], data["requests"]) == (str(result.total), "hour", 1)
    bad = runner.invoke(main, [*args[:5], "fortnight", *args[6:]])
    assert bad.exit_code != 0 and "keeps no 'fortnight' buckets" in bad.output
    assert "Traceback" not in bad.output
    # a --last that is no whole number of buckets widens like any edge: 30 minutes at half
    # past ends in the running hour and starts in it too, so one hour; 90 minutes, two
    for last, hours_shown in (("30m", 1), ("90m", 2)):
        widened = runner.invoke(main, [*args[:7], last, *args[8:], "--json"])
        assert widened.exit_code == 0, widened.output
        assert len(json.loads(widened.output)["buckets"]) == hours_shown

    # a mean: its fields per bucket, a sparkline of the means (a gap where an hour has none)
    # and the range's mean from its sum and count
    mean_args = ["query", "window", "mean_score", "ann", "--series", "hour", *args[6:]]
    shown = runner.invoke(main, mean_args)
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.output.splitlines() if "mean" in line and "sum" in line)
    assert [w for w in re.split(r"[\s┃│]+", header) if w] == ["hour", "mean", "sum", "count"]
    means_of = [
        None if not scores[h] else Context(prec=38).divide(Decimal(sum(scores[h])), len(scores[h]))
        for h in hours
    ]
    lines = shown.output.splitlines()
    summary = next(i for i, line in enumerate(lines) if "hour buckets," in line)
    assert lines[summary - 1] == _spark_gaps(means_of).rstrip()  # rich drops trailing spaces
    every_mean = Context(prec=38).divide(Decimal(sum(every)), len(every))
    cost = next(i for i in range(summary, len(lines)) if lines[i].startswith("cost:"))
    spark = " ".join(" ".join(lines[summary:cost]).split())  # perhaps wrapped between words
    assert spark.endswith(
        f"9 hour buckets, mean {every_mean:.2f}, sum {sum(every):,}, count {len(every)}"
    )
    data = json.loads(runner.invoke(main, [*mean_args, "--json"]).output)
    assert data["fields"] == {
        "mean": str(every_mean),
        "sum": str(sum(every)),
        "count": str(len(every)),
    }
    assert [b.get("fields", {}).get("count") for b in data["buckets"]] == [
        str(len(scores[h])) if scores[h] else None for h in hours
    ]


def _spark_gaps(values: list[Decimal | None]) -> str:
    """As :func:`_spark` over the values there are, a space for each ``None``."""
    there = [v for v in values if v is not None]
    low, high = min(there), max(there)
    return "".join(
        " "
        if v is None
        else ("▁" if high == 0 else "▄")
        if low == high
        else "▁▂▃▄▅▆▇█"[min(7, int((v - low) * 8 / (high - low)))]
        for v in values
    )


def _spark(values: list[int]) -> str:
    """The sparkline, computed here: eight bars from the smallest value to the largest."""
    low, high = min(values), max(values)
    if low == high:  # all zero: the lowest bar; another value: the middle one
        return ("▁" if high == 0 else "▄") * len(values)
    return "".join("▁▂▃▄▅▆▇█"[min(7, (v - low) * 8 // (high - low))] for v in values)
