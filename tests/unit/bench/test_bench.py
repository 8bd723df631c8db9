"""The write-mode benchmark's own pieces (no servers): the per-delta writer and the verdict."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from aggregator.core.engine import AggregateRef, BatchDeltas, CoalescedDelta
from aggregator.dynamodb.updates import Update, added_amounts
from aggregator.dynamodb.writer import AtLeastOnceWriter
from bench.write_modes import (
    CountingClient,
    PerDeltaWriter,
    RunFigures,
    _batch_sizes,
    _strategies,
    compare_aggregates,
    per_thousand,
    summary_line,
    top_lines,
    verdict,
)


class FakeClient:
    """``update_item`` answers ``{}`` (or, with ``indexed``, an ``ALL_OLD`` image that is in the
    leaderboard index) and records its arguments."""

    def __init__(self, indexed: bool = False) -> None:
        self.calls: list[dict] = []
        self._lock = threading.Lock()
        self.indexed = indexed

    def update_item(self, **request):
        with self._lock:
            self.calls.append(request)
        if self.indexed:
            return {"Attributes": {"lb": {"S": "delay"}, "value": {"N": "1"}}}
        return {}

    def batch_get_item(self, **request):  # the leaderboard floors: none stored
        return {"Responses": {}}


def _batch(*deltas: CoalescedDelta) -> BatchDeltas:
    batch = BatchDeltas()
    for d in deltas:
        batch.deltas[d.ref.sort_key] = d
    seqs = [s for d in deltas for s, _ in d.parts]
    batch.first_sequence_number, batch.last_sequence_number = min(seqs), max(seqs)
    return batch


def _delta(rule: str, key: str, parts: list[tuple[str, str]], leaderboard: bool = False):
    decoded = [(s, Decimal(a)) for s, a in parts]
    return CoalescedDelta(
        AggregateRef(rule, key, key),
        sum((a for _, a in decoded), Decimal(0)),
        decoded[0][0],
        decoded,
        leaderboard,
    )


def _amounts(client: FakeClient) -> list[str]:
    return sorted(str(added_amounts(c)["value"]) for c in client.calls)


def test_per_delta_writer_sends_one_request_per_part():
    client = FakeClient()
    writer = PerDeltaWriter(client, "t", max_workers=2)
    try:
        result = writer.apply(
            _batch(_delta("total", "ALL", [("11", "1"), ("12", "1"), ("13", "-1")]))
        )
    finally:
        writer.close()
    assert len(client.calls) == 3
    assert _amounts(client) == ["-1", "1", "1"]
    assert all(set(added_amounts(c)) == {"value"} for c in client.calls)
    assert "ConditionExpression" not in client.calls[0]
    assert result.retry_from is None
    assert result.stats.requests == 3
    assert result.stats.items_written == 3
    assert result.stats.modelled_wcu == 3  # small item: 1 WCU per write, no index


def test_per_delta_writer_against_coalesced_and_index_cost():
    parts = [("21", "5"), ("22", "-2"), ("23", "4"), ("24", "1")]
    batch = _batch(_delta("delay", "AA", parts, leaderboard=True), _delta("n", "AA", [("21", "1")]))

    per_delta_client, coalesced_client = FakeClient(indexed=True), FakeClient()
    per_delta = PerDeltaWriter(per_delta_client, "t")
    coalesced = AtLeastOnceWriter(coalesced_client, "t")
    try:
        a = per_delta.apply(batch)
        b = coalesced.apply(batch)
    finally:
        per_delta.close()
        coalesced.close()
    assert len(per_delta_client.calls) == 5
    assert len(coalesced_client.calls) == 2
    assert _amounts(coalesced_client) == ["1", "8"]
    # each write of an indexed item pays the index entry's delete and re-put (2 WCU) on top
    # of 1; the first write of an item puts its entry (1 WCU)
    assert a.stats.modelled_index_wcu == 4 * 2
    assert a.stats.modelled_wcu == 4 * 3 + 1
    assert b.stats.modelled_index_wcu == 1
    assert b.stats.modelled_wcu == 2 + 1


def test_counting_client_counts_zero_adds_and_failed_conditions():
    class Failing(FakeClient):
        def update_item(self, **request):
            super().update_item(**request)
            if "ConditionExpression" in request:
                raise ClientError(
                    {"Error": {"Code": "ConditionalCheckFailedException", "Message": "no"}},
                    "UpdateItem",
                )
            return {}

    client = CountingClient(Failing())
    client.update_item(**Update().add("value", Decimal(0)).render())
    client.update_item(**Update().add("value", Decimal(2)).render())
    with pytest.raises(ClientError):
        client.update_item(
            **Update()
            .add("value", Decimal("0.00"))
            .where_missing_or_below("ck", {"S": "1"})
            .render()
        )
    client.update_item(**Update().remove("ck").render())
    assert (client.update_items, client.zero_adds, client.failed_conditions) == (4, 2, 1)
    assert client.calls == client._client.calls  # other attributes pass through


def test_per_thousand():
    assert per_thousand(703, 1000) == 703
    assert per_thousand(12_406, 5_452) == pytest.approx(2_275.5, abs=0.1)
    assert per_thousand(5, 0) == 0


@pytest.mark.parametrize(
    ("target", "baseline", "ok"),
    [
        (703, 703, True),
        (1050, 1000, True),  # exactly 5 % above: still within
        (1051, 1000, False),
        (600, 1000, True),  # cheaper than the baseline passes
    ],
)
def test_verdict(target, baseline, ok):
    v = verdict(target, baseline, batch_size=100)
    assert v.ok is ok
    assert v.ratio == pytest.approx(target / baseline)
    assert v.batch_size == 100


def test_verdict_needs_a_baseline():
    with pytest.raises(ValueError):
        verdict(1, 0)


def test_compare_aggregates():
    ref = {("r", "r#a"): Decimal(1), ("r", "r#b"): Decimal(2)}
    assert compare_aggregates(ref, dict(ref)) == []
    other = {("r", "r#a"): Decimal(1), ("r", "r#c"): Decimal(3)}
    assert compare_aggregates(ref, other) == ["r r#b: 2 != 0", "r r#c: 0 != 3"]
    many = {("r", f"r#{i}"): Decimal(i + 1) for i in range(8)}
    assert compare_aggregates({}, many, limit=5)[-1] == "... 3 more"


def test_option_parsers():
    import argparse

    assert _batch_sizes("100,1000") == (100, 1000)
    with pytest.raises(argparse.ArgumentTypeError):
        _batch_sizes("100,5000")
    with pytest.raises(argparse.ArgumentTypeError):
        _batch_sizes("a")
    assert _strategies("window,per-delta") == ("per-delta", "window")
    with pytest.raises(argparse.ArgumentTypeError):
        _strategies("twice")


def test_the_summary_line_reads_the_exactly_once_and_per_delta_runs_at_batch_100():
    """The interface line of make bench: W and its index part per 1,000 source records, and W's
    ratio to per-delta's."""
    exactly = RunFigures("exactly-once", 100, "t", stream_records=2000, modelled_wcu=4000)
    exactly.modelled_index_wcu = 1000
    per_delta = RunFigures("per-delta", 100, "t", stream_records=2000, modelled_wcu=16000)
    assert summary_line([exactly, per_delta]) == (
        "bench: exactly-once batch 100: 2,000.0 WCU per 1,000 source records (index 500.0); "
        "0.250 of per-delta"
    )
    assert summary_line([exactly]) is None


def test_the_top_lines_give_reads_per_call_and_exactness():
    run = RunFigures("exactly-once", 100, "t", top_calls=4, top_queries=5, top_read_units=3.0)
    run.top_fallbacks = 1
    other = RunFigures("per-delta", 100, "t")  # no top calls: no line
    assert top_lines([run, other]) == [
        "top (exactly-once, batch 100): 4 calls (n = 10, 100 on each leaderboard rule), "
        "5 requests, 0.75 RCU per call modelled; exact yes; 1 read every aggregate"
    ]
    run.top_exact = False
    assert "exact NO" in top_lines([run])[0]
    # a run whose leaderboards are top lists: their writes and reads per 1,000 source records
    listed = RunFigures("exactly-once", 100, "t", stream_records=2000, self_writes=1000)
    listed.top_list_writes, listed.top_list_reads, listed.modelled_index_wcu = 30, 12, 75
    assert top_lines([listed]) == [
        "top lists (exactly-once, batch 100): 30.0 conditional writes (75.0 WCU) and 12.0 "
        "strongly consistent reads per 1,000 source records"
    ]


def test_counting_client_models_query_read_units():
    class Client:
        def query(self, **request):
            return {"Items": [{"pk": {"S": "x" * 3000}}, {"pk": {"S": "y" * 3000}}]}

    reads = CountingClient(Client())
    reads.query(TableName="t")  # two items of ~3 KB: 2 x 4 KB started, eventually consistent
    reads.query(TableName="t", ConsistentRead=True)
    assert (reads.queries, reads.query_read_units) == (2, 1.0 + 2.0)
