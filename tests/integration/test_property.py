"""Property: under random writes, random faults and malformed records, every aggregate equals
the rules evaluated over the table's final items (TTL-deleted items still count for
``ttl_deletes: keep`` rules) less the changes that were dead-lettered, including a windowed rule
(hour and minute buckets of an event time that moves between buckets), two rules derived from
another rule's aggregates (a histogram and a distinct count) and two target rules.

The target rules keep the points and the number of the path items that name a parent
(``parent``) on the parent's own ``META`` item, which the scenario writes before anything else
(with or without a ``childPoints`` of its own); some parents are never created, one may be
deleted on the way (and is never written again). A parent in the table at the end must hold
what the application gave it plus its children's sum (a path whose points are bad, or that
TTL deleted, counts for the number only), and no attribute of the framework's but its
checkpoint map (16 entries at most); every other parent's sum must be in the rule's ledger
(harness.target_truth). A rule reads ``childPoints`` back from the parents' stream records.

Malformed records are real stream records corrupted at delivery, the same way at every delivery:
an envelope without ``eventName`` (every rule skips the record), ``points`` as ``{"N": "NaN"}``
(the rules reading ``points`` skip it, parent_points among them) or ``owner`` with an unknown
type tag (the rules reading ``owner`` skip it). The expected aggregates leave out exactly what
the handler cannot read: the whole record for a bad envelope, only the corrupted image's
contribution for a bad value (a bad image contributes nothing, the other image of its record
still applies); the dead letters must be exactly the bad envelopes and the bad new images.

``AGGREGATOR_PROPERTY_EXAMPLES`` scenarios (default 16, as CI runs them, from a fixed seed) are
split into parts of at most ``AGGREGATOR_PROPERTY_PART_SIZE`` (default 10; 100 in a soak, each
part then on a DynamoDB Local server of its own, as the server slows down when deleted tables
pile up), so pytest-xdist can run parts in parallel and no part nears the suite's per-test
timeout. Each part writes its figures to
``AGGREGATOR_SOAK_DIR`` when set. A longer soak::

    make soak            # 1,000 scenarios on 2 workers; EXAMPLES=10000 WORKERS=2 for more
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer
from hypothesis import strategies as st

from aggregator.core.records import TTL_PRINCIPAL
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.deadletters import list_dead_letters, replay_dead_letters
from aggregator.dynamodb.table import create_table
from tests.integration.harness import (
    SOAK,
    TARGETS,
    WIDE_RULES,
    Parents,
    delete,
    expected_from_items,
    final_items,
    misplaced,
    parent_deletes_strategy,
    parent_of_child,
    parents_strategy,
    pipeline,
    put,
    run_property,
    spread,
    stored,
    target_truth,
)

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

EXAMPLES = int(os.environ.get("AGGREGATOR_PROPERTY_EXAMPLES", "16"))
SPREAD_EXAMPLES = int(os.environ.get("AGGREGATOR_PROPERTY_SPREAD_EXAMPLES", "6"))
"""Scenarios of the spread layout (``aggregate_partitions: 8``), beside the others."""
SPREAD_RULES = spread(WIDE_RULES)
PART_SIZE = int(os.environ.get("AGGREGATOR_PROPERTY_PART_SIZE", "100" if SOAK else "10"))
PARTS = max(1, math.ceil(EXAMPLES / PART_SIZE))
_names = itertools.count()
_DESER = TypeDeserializer()

# Which rules of WIDE_RULES read which attribute (written out here, not asked of the rules):
# a malformed value of that attribute makes exactly these rules dead-letter the record.
KINDS = ("mean_points", "max_points", "points_spread")
READERS = {
    "envelope": (
        "paths",
        "per_owner",
        "points",
        "gems_by_kind",
        "points_by_hour",
        *KINDS,
        *TARGETS,
    ),
    "nan_points": ("points", "points_by_hour", *KINDS, "parent_points"),
    "tag_owner": ("per_owner", "points", "points_by_hour", *KINDS),
}

HOUR = 1_700_000_000 // 3600 * 3600  # an hour boundary; event times straddle it
item_ids = st.integers(0, 5)
# points written as a string ("12.5"): an item every rule reading points cannot count, until a
# later put of the same item fixes it (or a delete removes it)
BAD_POINTS = "12.5"
put_op = st.tuples(
    st.just("put"),
    item_ids,
    st.sampled_from(["ann", "bob", "cyd"]),
    st.one_of(st.integers(-3, 9), st.just(BAD_POINTS)),
    st.sampled_from(["ruby", "opal", None]),
    st.sampled_from([None, HOUR - 61, HOUR - 1, HOUR, HOUR + 59, HOUR + 60]),
    parent_of_child,
)
delete_op = st.tuples(st.sampled_from(["delete", "ttl_delete"]), item_ids)
ops = st.lists(st.one_of(put_op, put_op, delete_op), min_size=1, max_size=30)
scenario = st.fixed_dictionaries(
    {
        "ops": ops,
        "parents": parents_strategy,
        "parent_deletes": parent_deletes_strategy,
        "mode": st.sampled_from(["exactly-once", "window"]),
        "batch_size": st.integers(1, 7),
        "crashes": st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3)), max_size=3),
        "duplicates": st.sets(st.integers(1, 12), max_size=4),
        "bisect": st.booleans(),
        "kill_after": st.one_of(st.none(), st.integers(1, 6)),
        "throttle": st.dictionaries(
            st.sampled_from(
                [
                    "per_owner#ann",
                    "paths#TOTAL",
                    "gems_by_kind#opal",
                    "active_owners#ACTIVE",
                    "META",  # the parents, written by the target rule
                ]
            ),
            st.integers(1, 2),
            max_size=2,
        ),
        # index among the scenario's user-item stream records -> how to corrupt it
        "corrupt": st.dictionaries(st.integers(0, 9), st.sampled_from(sorted(READERS)), max_size=3),
    }
)


def mark_ttl(record: dict[str, Any]) -> dict[str, Any]:
    """Turn deletes of items flagged ``expired`` into TTL deletes (DynamoDB Local has none)."""
    old = record["dynamodb"].get("OldImage") or {}
    if record["eventName"] == "REMOVE" and "expired" in old:
        record = {**record, "userIdentity": {"type": "Service", "principalId": TTL_PRINCIPAL}}
    return record


class Corrupter:
    """Marks TTL deletes, and corrupts the chosen user-item records at every delivery.

    User records are numbered in stream order the first time they are seen (the workload is
    written before the runner starts, so that order is the stream's). ``originals`` keeps each
    corrupted record's sequence number, kind and uncorrupted images, to compute what must be
    missing from the aggregates."""

    def __init__(self, plan: dict[int, str]) -> None:
        self.plan = plan
        self.index: dict[str, int] = {}
        self.originals: dict[str, tuple[str, dict[str, Any]]] = {}
        self.bad_items: set[tuple[str, str]] = set()

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        record = mark_ttl(record)
        dynamodb = record["dynamodb"]
        seq = dynamodb["SequenceNumber"]
        if not dynamodb["Keys"]["pk"]["S"].startswith("P") or "userIdentity" in record:
            return record  # framework items, and TTL deletes, stay as they are
        number = self.index.setdefault(seq, len(self.index))
        kind = self.plan.get(number)
        new = _item(dynamodb.get("NewImage"))
        if new is not None and bad_item("points", new) and kind != "envelope":
            # a bad item's new image: a letter for each rule reading points that matches it
            self.bad_items.update(
                (seq, r) for r in READERS["nan_points"] if WIDE_RULES.get(r).match.matches(new)
            )
        if kind is None:
            return record
        self.originals[seq] = (kind, record)
        image = "OldImage" if record["eventName"] == "REMOVE" else "NewImage"
        if kind == "envelope":
            return {k: v for k, v in record.items() if k != "eventName"}
        attribute, value = ("points", {"N": "NaN"}) if kind == "nan_points" else ("owner", {"Q": 1})
        return {
            **record,
            "dynamodb": {**dynamodb, image: {**dynamodb[image], attribute: value}},
        }

    def dead_lettered(self) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
        """``(rule, old item, new item)`` of every change that was skipped: the whole record
        for an envelope the handler cannot read; for a bad value, only the corrupted image's
        part (a bad image contributes nothing; the record's other image still applies)."""
        out = []
        for kind, record in self.originals.values():
            old, new = (_item(record["dynamodb"].get(k)) for k in ("OldImage", "NewImage"))
            if kind != "envelope":
                old, new = (old, None) if record["eventName"] == "REMOVE" else (None, new)
            out += [(rule, old, new) for rule in READERS[kind]]
        return out

    def expected_letters(self) -> set[tuple[str, str]]:
        """``(sequence number, rule)`` of the dead letters there must be: an unreadable
        envelope (rule ``*``), and a bad new image (a bad old image is not reported again)."""
        return {
            (seq, "*" if kind == "envelope" else rule)
            for seq, (kind, record) in self.originals.items()
            for rule in READERS[kind]
            if kind == "envelope" or record["eventName"] != "REMOVE"
        } | self.bad_items


def bad_item(rule: str, item: dict[str, Any]) -> bool:
    """Whether ``rule`` cannot read ``item``: it reads points, and they are a string."""
    return rule in READERS["nan_points"] and isinstance(item.get("points"), str)


def _item(image: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if image is None else {k: _DESER.deserialize(v) for k, v in image.items()}


def apply_ops(ddb, name: str, operations, parents: Parents) -> list[dict[str, Any]]:
    """Write the parents, then the operations (deleting parents on the way as planned); returns
    the last images of TTL-deleted items."""
    current: dict[int, dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    parents.create(ddb, name)
    for index, op in enumerate(operations):
        parents.delete_due(ddb, name, index)
        if op[0] == "put":
            _, i, owner, points, kind, ts, parent = op
            item = {"pk": f"P{i}", "sk": f"PATH#{i}", "owner": owner, "points": points}
            if kind:
                item["kind"] = kind
            if ts is not None:
                item["ts"] = ts
            if parent is not None:
                item["parent"] = parent
            put(ddb, name, item)
            current[i] = item
        elif op[1] in current:
            i = op[1]
            if op[0] == "ttl_delete":
                flagged = {**current[i], "expired": True}
                put(ddb, name, flagged)
                kept.append(flagged)
            delete(ddb, name, f"P{i}", f"PATH#{i}")
            del current[i]
    parents.delete_due(ddb, name, len(operations), last=True)
    return kept


def run_scenario(
    ddb, streams, case: dict[str, Any], report: dict[str, int], rules=WIDE_RULES
) -> None:
    """One scenario with ``rules`` (the wide rules, on the single-partition or the spread
    layout); the ground truth is the wide rules over the final items either way."""
    name = f"prop-{os.getpid()}-{next(_names)}"
    arn = create_table(ddb, name)
    try:
        parents = Parents.of(case)
        kept = apply_ops(ddb, name, case["ops"], parents)
        crashes = dict(case["crashes"])
        corrupter = Corrupter(dict(case["corrupt"]))
        options = {
            "mode": case["mode"],
            "batch_size": case["batch_size"],
            "window_seconds": 1,
            "throttle": dict(case["throttle"]),
            "throttle_retries": 1,
            "bisect_on_error": case["bisect"],
            "duplicate": lambda n: n in case["duplicates"],
            "crash": lambda n: crashes.get(n),
            "transform": corrupter,
            "rules": rules,
        }
        first = pipeline(ddb, streams, name, arn, kill_after_batches=case["kill_after"], **options)
        try:
            stats = first.runner.run()
        except SimulatedCrash:
            # the runner process was killed: a new one resumes from the stored positions
            options["crash"] = lambda n: None
            stats = pipeline(ddb, streams, name, arn, **options).runner.run()
        report["scenarios"] += 1
        report["records"] += stats.records
        report["faults"] += stats.function_errors + stats.retries + stats.duplicates
        report["malformed"] += len(corrupter.originals)
        items = final_items(ddb, name)
        truth = target_truth(
            expected_from_items(
                items,
                WIDE_RULES,
                kept=kept,
                without=corrupter.dead_lettered(),
                counts_nothing=bad_item,
            ),
            items,
            parents,
        )
        actual = stored(ddb, name, rules)
        letters = {(d.sequence_number, d.rule) for d in list_dead_letters(ddb, name)}
        # a replay afterwards applies nothing of a bad item's letter: nothing counts twice
        replayed = replay_dead_letters(ddb, name, rules, min_age_seconds=0)
        after_replay = stored(ddb, name, rules)
        # on the spread layout, every aggregate where the design puts it (computed apart)
        places = misplaced(ddb, name) if rules is SPREAD_RULES else []
        report["spread_items"] += int(not places and rules is SPREAD_RULES)
        report["bad_items"] += len(corrupter.bad_items)
        expected = truth.expected
        report["tallies"] += truth.tallies
        report["ledger"] += sum(len(expected[r]) for r in TARGETS)
        if (
            (actual, after_replay) != (expected, expected)
            or letters != corrupter.expected_letters()
            or (truth.found, truth.problems) != (truth.parents, [])
            or places
        ):
            report["drift"] += 1
        assert actual == expected
        assert places == []
        assert truth.found == truth.parents
        assert truth.problems == []
        assert letters == corrupter.expected_letters()
        assert (after_replay, replayed.replayed) == (expected, 0)
    finally:
        ddb.delete_table(TableName=name)


def new_report() -> dict[str, int]:
    """The counts a property run reports, at zero."""
    keys = ("scenarios", "drift", "records", "faults", "malformed", "bad_items", "tallies")
    return dict.fromkeys((*keys, "ledger", "spread_items"), 0)


@pytest.mark.parametrize("part", range(PARTS))
def test_aggregates_equal_rules_over_final_items(part, request):
    examples = min(PART_SIZE, EXAMPLES - part * PART_SIZE)
    # a soak's parts of 100 scenarios each on a server of its own; make test's parts of 10 on
    # the module's (several tests, so that pytest-xdist starts the file early)
    server = request.getfixturevalue("fresh_dynamodb_local" if SOAK else "dynamodb_local")
    ddb = server.client("dynamodb")
    streams = server.client("dynamodbstreams")
    report = new_report()

    run_property(
        scenario,
        examples,
        lambda case: run_scenario(ddb, streams, case, report),
        report,
        lambda r: (
            f"property part {part + 1}/{PARTS}: {r['scenarios']} scenarios, "
            f"{r['records']} stream records, {r['faults']} injected faults and retries, "
            f"{r['malformed']} malformed records, {r['bad_items']} bad item images, "
            f"{r['tallies']} parents' sums, {r['ledger']} ledger entries, "
            f"drift in {r['drift']} scenarios"
        ),
        f"part-{part:05d}.json",
    )


def test_the_spread_layout_stays_exact(dynamodb_local):
    """The same scenarios on the spread layout (``aggregate_partitions: 8``): every aggregate
    exact, read back through the spread reads, and placed where the design says."""
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    report = new_report()
    run_property(
        scenario,
        SPREAD_EXAMPLES,
        lambda case: run_scenario(ddb, streams, case, report, SPREAD_RULES),
        report,
        lambda r: (
            f"property, spread layout: {r['scenarios']} scenarios, {r['records']} stream "
            f"records, {r['faults']} injected faults and retries, {r['malformed']} malformed "
            f"records, {r['spread_items']} checked placements, drift in {r['drift']} scenarios"
        ),
        "spread.json",
    )
    assert report["spread_items"] == report["scenarios"]
