"""Shared pieces of the exactly-once tests: rules, workloads, a faulty pipeline, ground truth."""

from __future__ import annotations

import json
import os
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from boto3.dynamodb.types import TypeDeserializer
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.rules import Rule, RuleSet, rule
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.runner import PositionStore, StreamRunner
from aggregator.dynamodb.modes import WriterOptions
from aggregator.dynamodb.query import AggregateStore
from aggregator.runtime.processor import create_processor
from tests.factories import ddb_json

SOAK = bool(os.environ.get("AGGREGATOR_SOAK_DIR"))
"""Whether ``make soak`` runs this process (it sets ``AGGREGATOR_SOAK_DIR``). The integration
scenarios then run at their soak sizes on hypothesis's random seeds. ``make test`` runs them at
quick sizes from a fixed seed per test (:func:`scenario_seed`), so that its assertions that the
scenarios reached a path meet the same scenarios on every run; exploring is the soak's job."""


def scenario_seed(label: str) -> Callable[[Any], Any]:
    """Hypothesis's ``seed`` decorator with a seed of ``label`` outside a soak; no change in one.
    Each test or part passes its own label, so parts of one test run different scenarios."""
    return (lambda test: test) if SOAK else seed(zlib.crc32(label.encode()))


RULES = RuleSet.of(
    rule("paths", match={"sk": {"prefix": "PATH#"}}, key="TOTAL"),
    rule("per_owner", match={"sk": {"prefix": "PATH#"}}, key="{owner}", leaderboard=True),
    rule(
        "points", match={"points": {"exists": True}}, key="{owner}", delta={"attribute": "points"}
    ),
    rule(
        "gems_by_kind",
        match={"kind": {"exists": True}},
        key="{kind}",
        ttl_deletes="retract",
    ),
)

# The parents of the target rules (see WIDE_RULES): items ``pk: T<n>, sk: META`` that the
# scenario writes and the framework never creates; a path item names its parent in ``parent``.
PARENTS = ("T0", "T1", "T2")
TARGET_ATTRIBUTE = "childPoints"  # the application may give a parent one
PARENT_ATTRIBUTES = frozenset({"pk", "sk", "title"})  # what the application writes on a parent

# The same rules plus a windowed rule, two rules derived from per_owner (a histogram of
# owners by number of paths, and the number of owners with at least one path), the other kinds,
# two target rules (aggregator.core.rules.targets: the points of a path item that names a
# parent are added to childPoints on the parent's own item, and 1 to its childCount; a path
# whose points are bad counts for the second only, a path deleted by TTL for the second only,
# which keeps TTL deletes) and a rule that reads what the first writes, from the parents' stream
# records.
WIDE_RULES = RuleSet.of(
    *RULES.rules,
    rule(
        "points_by_hour",
        match={"ts": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour", "minute"]},
    ),
    rule("owners_by_paths", source="per_owner", key="{value}"),
    rule("active_owners", source="per_owner", key="ACTIVE"),
    # the other kinds (aggregator.core.kinds), over the same points
    rule(
        "mean_points",
        match={"points": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        kind="mean",
    ),
    rule(
        "max_points",
        match={"points": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        kind="max",
    ),
    rule(
        "points_spread",
        match={"points": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        kind={"name": "distribution", "relative_accuracy": "0.05"},
    ),
    rule(
        "parent_points",
        match={"parent": {"exists": True}},
        delta={"attribute": "points"},
        ttl_deletes="retract",
        target={"partition_key": "{parent}", "sort_key": "META", "attribute": TARGET_ATTRIBUTE},
    ),
    rule(
        "parent_children",
        match={"parent": {"exists": True}},
        target={"partition_key": "{parent}", "sort_key": "META", "attribute": "childCount"},
    ),
    rule(
        "parents_by_points",
        match={"sk": "META", TARGET_ATTRIBUTE: {"exists": True}},
        key="{pk}",
        delta={"attribute": TARGET_ATTRIBUTE},
        leaderboard=True,
    ),
)
TARGETS = {"parent_points": TARGET_ATTRIBUTE, "parent_children": "childCount"}
"""The target rules and their attributes."""

# Parents for a scenario (Parents.of): each parent is never created, or created before any other
# write with the childPoints the application gives it (none, 0 or 7); a created parent may be
# deleted (and never re-created) just before the operation at some index (at the end when past
# the last one).
parents_strategy = st.fixed_dictionaries(
    {pk: st.sampled_from(["never", None, None, 0, 7]) for pk in PARENTS}
)
parent_deletes_strategy = st.dictionaries(st.sampled_from(PARENTS), st.integers(0, 30), max_size=1)
parent_of_child = st.sampled_from([*PARENTS, None])

SPREAD = 8
"""The spread the property tests run the spread layout with (``aggregate_partitions``)."""


def spread(rules: RuleSet, partitions: int = SPREAD) -> RuleSet:
    """``rules`` on a layout whose ``aggregate_partitions`` is ``partitions``, every rule that
    does not say spreading its aggregates over that many partition key values: derived rules,
    their sources and target rules too (they say so here, since the table's number leaves
    them at 1)."""
    layout = TableLayout(**{**rules.layout.model_dump(), "aggregate_partitions": partitions})
    said = [
        r if r.partitions is not None else r.model_copy(update={"partitions": partitions})
        for r in rules.rules
    ]
    return RuleSet.of(*said, layout=layout)


def misplaced(ddb, table: str, partitions: int = SPREAD) -> list[str]:
    """The aggregate items of a table on the spread layout that are not where the design puts
    them, computed here from the sort key alone (not with the framework's own functions):
    under ``"AGGREGATES#<n>"``, ``n`` the CRC-32 of the *home* (the rule name and the key's
    fields: one, or two for a target rule's ledger, ``"<parent>#META"``) modulo
    ``partitions``. Also every item under the unspread ``AGGREGATES`` (none may be). Partials
    (``"AGGREGATES#<rule>#<key>"``) are not aggregates."""
    problems = []
    for item in table_items(ddb, table):
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        if pk == "AGGREGATES":
            problems.append(f"{sk} under AGGREGATES")
            continue
        head, _, n = pk.rpartition("#")
        if head != "AGGREGATES" or not n.isdigit():
            continue
        fields = sk.split("#")
        home = "#".join(fields[: 3 if fields[0] in TARGETS else 2])
        want = f"AGGREGATES#{zlib.crc32(home.encode()) % partitions}"
        if pk != want:
            problems.append(f"{sk} under {pk}, not {want}")
    return problems


_DESER = TypeDeserializer()


def placed(base: Rule, **placement: int | str) -> Rule:
    """``base`` with ``write_shards`` / ``leaderboard_partitions`` set (validated again; a
    target rule's key is its target's, not given again)."""
    fields = {k: v for k, v in dict(base).items() if k != "key" or base.target is None}
    return Rule.model_validate({**fields, **placement})


def run_property(
    strategy: Any,
    examples: int,
    run: Callable[[dict[str, Any]], None],
    report: dict[str, int],
    summary: Callable[[dict[str, int]], str],
    soak_file: str,
) -> None:
    """Run ``examples`` hypothesis scenarios of ``strategy`` through ``run`` (which counts into
    ``report``, including ``scenarios`` and ``drift``), print ``summary(report)``, write the
    report to ``$AGGREGATOR_SOAK_DIR/<soak_file>`` when set, and require every scenario run and
    none drifted. Seeded by ``soak_file`` outside a soak (:func:`scenario_seed`)."""

    @scenario_seed(soak_file)
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=strategy)
    def scenarios(case):
        run(case)

    scenarios()
    print("\n" + summary(report))
    soak_dir = os.environ.get("AGGREGATOR_SOAK_DIR")
    if soak_dir:
        Path(soak_dir).mkdir(parents=True, exist_ok=True)
        (Path(soak_dir) / soak_file).write_text(json.dumps(report))
    assert report["scenarios"] >= examples
    assert report["drift"] == 0


def utc_text(epoch_seconds: int) -> str:
    """Fixed-width UTC text of an instant, computed here with the standard library."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def article_table(ddb, name: str, *, stream: bool = True) -> str | None:
    """The reference-count article's table, made with plain boto3: keys ``PK``/``SK``, no
    index; with a ``NEW_AND_OLD_IMAGES`` stream (its ARN is returned), or without one, as an
    application's table before the framework (``None``)."""
    spec = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"} if stream else None
    response = ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        **({"StreamSpecification": spec} if spec else {}),
    )
    arn = response["TableDescription"].get("LatestStreamArn")
    return None if arn is None else str(arn)


def without_genesis(ddb, table: str, layout=DEFAULT_LAYOUT) -> None:
    """Forget that ``create_table`` made ``table`` with its stream (the manifest's ``genesis``):
    the table then stands for one the framework did not create, whose items may predate its
    stream, so its rules stay ``pending`` until a backfill (the lifecycle those tests follow)."""
    from aggregator.dynamodb.manifest import MANIFEST_SORT_KEY

    key = layout.item_key(layout.control_pk, MANIFEST_SORT_KEY)
    ddb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE genesis")


def put(ddb, table: str, item: dict[str, Any]) -> None:
    ddb.put_item(TableName=table, Item=ddb_json(item))


def delete(ddb, table: str, pk: str, sk: str) -> None:
    ddb.delete_item(TableName=table, Key=ddb_json({"pk": pk, "sk": sk}))


def standard_workload(ddb, table: str, n: int = 24) -> None:
    """Inserts, value changes, key (owner) changes and deletes over a few owners."""
    owners = ["ann", "bob", "cyd", "dee"]

    def path(i: int, owner: str, points: int, kind: str) -> None:
        item = {"pk": f"P{i % 6}", "sk": f"PATH#{i}", "owner": owner, "points": points}
        put(ddb, table, {**item, "kind": kind})

    for i in range(n):
        path(i, owners[i % 4], i % 5, ["ruby", "opal"][i % 2])
    for i in range(0, n, 3):  # value change
        path(i, owners[i % 4], 10 + i, ["ruby", "opal"][i % 2])
    for i in range(1, n, 4):  # key change: the path moves to another owner
        path(i, owners[(i + 1) % 4], i % 5, "jade")
    for i in range(2, n, 5):
        delete(ddb, table, f"P{i % 6}", f"PATH#{i}")


def table_items(ddb, table: str) -> list[dict[str, Any]]:
    """Every item of the table, reserved partitions included, as DynamoDB JSON (a strongly
    consistent scan)."""
    items: list[dict[str, Any]] = []
    start = None
    while True:
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = ddb.scan(**kwargs)
        items += page["Items"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def final_items(ddb, table: str) -> list[dict[str, Any]]:
    """The table's items outside the reserved partitions, deserialized."""
    items, start = [], None
    while True:
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = ddb.scan(**kwargs)
        for raw in page["Items"]:
            if not DEFAULT_LAYOUT.is_reserved(raw):  # partial aggregates included
                items.append({k: _DESER.deserialize(v) for k, v in raw.items()})
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def contribution(r, item: dict[str, Any] | None) -> dict[str, Decimal]:
    """What base rule ``r`` counts for one item (deserialized), keyed as :func:`stored` keys
    its aggregates; windowed rules' buckets are computed here by integer arithmetic.

    Kinds other than ``sum``: a mean counts its amount under the key and 1 under
    ``"<key>#count"``; a kind with one item per value counts 1 under ``"<key>#<value>"`` (for
    a distribution the value its bin reports), so the whole multiset is compared."""
    out: dict[str, Decimal] = defaultdict(Decimal)
    if item is None or not r.match.matches(item):
        return out
    key = r.key.render(item)[1]
    amount = r.delta.evaluate(item)
    if r.kind.name == "mean":
        out[key] += amount
        out[f"{key}#count"] += 1
        return out
    if r.kind.per_value:
        if r.kind.name == "distribution":
            amount = r.kind.bins.value_of(r.kind.bins.bin_of(amount))
        out[f"{key}#{amount.normalize()}"] += 1
        return out
    if r.window is None:
        out[key] += amount
        return out
    sizes = {"minute": 60, "hour": 3600, "day": 86400}
    for g in r.window.granularities:
        size = sizes[g.label]
        start = int(item[r.window.time]) // size * size
        out[f"{key}@{g.label}@{utc_text(start)}"] += amount
    return out


def expected_from_items(
    items: list[dict[str, Any]],
    rules: RuleSet = RULES,
    kept: list[dict[str, Any]] = (),
    without: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = (),
    counts_nothing: Callable[[str, dict[str, Any]], bool] = lambda rule, item: False,
) -> dict[str, dict[str, Decimal]]:
    """Every rule evaluated over ``items`` (plus ``kept``: TTL-deleted items whose contribution
    stays for rules with ``ttl_deletes: keep``); zero totals dropped.

    ``without`` lists ``(rule, old item, new item)`` changes that were dead-lettered, so never
    applied: their delta (contribution of new minus old) is taken out of that base rule.
    ``counts_nothing(rule, item)`` says which items a base rule cannot read (a bad value): they
    count nothing, wherever they appear.
    Windowed rules (whose time attribute is in epoch seconds here) are keyed
    ``"<key>@<granularity>@<bucket start>"``; derived rules are evaluated over the expected
    aggregates of their source (value != 0)."""
    totals: dict[str, dict[str, Decimal]] = {r.name: defaultdict(Decimal) for r in rules}
    kept = [_decimals(item) for item in kept]
    for r in rules.base_rules:
        sources = list(items) + (list(kept) if r.ttl_deletes == "keep" else [])
        for item in sources:
            if counts_nothing(r.name, item):
                continue
            for key, amount in contribution(r, item).items():
                totals[r.name][key] += amount
    for name, old, new in without:
        r = rules.get(name)
        new, old = (None if i is None or counts_nothing(name, i) else i for i in (new, old))
        for key, amount in contribution(r, _decimals(new) if new else None).items():
            totals[name][key] -= amount
        for key, amount in contribution(r, _decimals(old) if old else None).items():
            totals[name][key] += amount
    done = {r.name for r in rules.base_rules}
    while len(done) < len(rules):
        for r in rules.derived_rules:
            if r.name in done or r.source not in done:
                continue
            for key, value in totals[r.source].items():
                if value == 0:
                    continue
                image = {"value": value, "key": key, "rule": r.source}
                if r.match.matches(image):
                    totals[r.name][r.key.render(image)[1]] += r.delta.evaluate(image)
            done.add(r.name)
    return {name: {k: v for k, v in t.items() if v != 0} for name, t in totals.items()}


def _decimals(item: dict[str, Any]) -> dict[str, Any]:
    return {
        k: Decimal(v) if isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in item.items()
    }


def stored(ddb, table: str, rules: RuleSet = RULES) -> dict[str, dict[str, Decimal]]:
    """Stored non-zero aggregates per rule (windowed ones keyed ``key@granularity@bucket``)."""
    store = AggregateStore(ddb, table, rules)
    out: dict[str, dict[str, Decimal]] = {}
    for r in rules:
        out[r.name] = {}
        if r.kind.name != "sum":
            out[r.name] = _stored_kind(store, r)
            continue
        for a in store.list(r.name):
            if a.value != 0:
                key = a.key if a.bucket is None else f"{a.key}@{a.granularity}@{a.bucket}"
                out[r.name][key] = a.value
    return out


@dataclass
class Parents:
    """A scenario's parents (the target rules' items): ``created`` maps each parent written up
    front, before any other write, to the ``childPoints`` the application gives it (``None``:
    none); ``deletes`` maps a created parent to the index of the operation before which it is
    deleted (at the end when past the last one). A deleted parent is never written again."""

    created: dict[str, int | None]
    deletes: dict[str, int]

    def __post_init__(self) -> None:
        self.deletes = {pk: at for pk, at in self.deletes.items() if pk in self.created}

    @classmethod
    def of(cls, case: dict[str, Any]) -> Parents:
        """A scenario's parents, from its ``parents`` (:data:`parents_strategy`) and
        ``parent_deletes`` (:data:`parent_deletes_strategy`)."""
        created = {pk: v for pk, v in case["parents"].items() if v != "never"}
        return cls(created, dict(case["parent_deletes"]))

    def create(self, ddb, table: str) -> None:
        for pk, initial in sorted(self.created.items()):
            item: dict[str, Any] = {"pk": pk, "sk": "META", "title": f"parent {pk}"}
            if initial is not None:
                item[TARGET_ATTRIBUTE] = initial
            put(ddb, table, item)

    def delete_due(self, ddb, table: str, index: int, *, last: bool = False) -> None:
        """Delete the parents due before operation ``index`` (``last``: and every later one)."""
        for pk, at in sorted(self.deletes.items()):
            if at == index or (last and at > index):
                delete(ddb, table, pk, "META")

    @property
    def live(self) -> dict[str, int | None]:
        """The parents in the table at the end, with what the application gave them."""
        return {pk: v for pk, v in self.created.items() if pk not in self.deletes}


class TargetTruth(NamedTuple):
    """What :func:`target_truth` says must be in the table."""

    expected: dict[str, dict[str, Decimal]]
    """The expected aggregates, each target rule's sums replaced by its expected ledger."""
    parents: dict[str, dict[str, Decimal]]
    """Per parent that must be in the table, the value of each target attribute."""
    found: dict[str, dict[str, Decimal]]
    """Per parent found in the table, the value of each target attribute (0 when absent)."""
    problems: list[str]
    """Parents with attributes other than the application's, the target attributes and the
    checkpoint map, or with a map of over 16 entries."""
    tallies: int
    """How many (parent in the table, target rule) sums are not 0 (for the report)."""


def target_truth(
    expected: dict[str, dict[str, Decimal]], items: list[dict[str, Any]], parents: Parents
) -> TargetTruth:
    """Where each target rule's expected sums (``expected[rule]``, from
    :func:`expected_from_items`: keyed ``"<parent>#META"``) must be kept:

    * on a parent in the table at the end (created up front, never deleted): its target
      attribute is what the application wrote plus the sum; the rule's ledger has nothing for it;
    * on the rule's ledger (what :func:`stored` reads for a target rule) for every other parent:
      one never created, or one deleted. The whole sum, because the scenarios write everything
      before the stream is processed, so every delta to a deleted parent finds no item.

    A parent deleted or never created that is found in the table (the framework created it, or
    brought it back) shows as a difference between ``parents`` and ``found``."""
    live = parents.live
    replaced = dict(expected)
    want: dict[str, dict[str, Decimal]] = {pk: {} for pk in live}
    tallies = 0
    for rule_name, attribute in TARGETS.items():
        sums = expected[rule_name]
        replaced[rule_name] = {k: v for k, v in sums.items() if k.split("#")[0] not in live}
        for pk, initial in live.items():
            written = initial if attribute == TARGET_ATTRIBUTE else None
            want[pk][attribute] = Decimal(written or 0) + sums.get(f"{pk}#META", 0)
            tallies += f"{pk}#META" in sums
    found: dict[str, dict[str, Decimal]] = {}
    problems = []
    checkpoints = DEFAULT_LAYOUT.target_checkpoints_attribute
    allowed = PARENT_ATTRIBUTES | set(TARGETS.values()) | {checkpoints}
    for item in items:
        if item["sk"] != "META":
            continue
        found[item["pk"]] = {a: Decimal(item.get(a, 0)) for a in TARGETS.values()}
        if not set(item) <= allowed:
            problems.append(f"{item['pk']}: attributes {sorted(set(item) - allowed)}")
        if len(item.get(checkpoints, {})) > 16:
            problems.append(f"{item['pk']}: {len(item[checkpoints])} checkpoint map entries")
    return TargetTruth(replaced, want, found, problems, tallies)


def _stored_kind(store: AggregateStore, r: Rule) -> dict[str, Decimal]:
    """A mean's sums and counts, or the multiset of a kind with one item per value, keyed as
    :func:`contribution` keys them, through the read API (``list``, ``histogram``)."""
    out: dict[str, Decimal] = {}
    for a in store.list(r.name):
        if r.kind.name == "mean":
            count = a.fields["count"]
            assert count is not None
            out.update({a.key: a.value, f"{a.key}#count": count})
            continue
        for row in store.histogram(r.name, [a.key]):
            assert isinstance(row.value, Decimal)
            out[f"{a.key}#{row.value.normalize()}"] = row.count
    return {k: v for k, v in out.items() if v != 0}


@dataclass
class Pipeline:
    client: FaultInjectingClient
    faults: RunnerFaults
    runner: StreamRunner


def pipeline(
    ddb,
    streams,
    table: str,
    arn: str,
    *,
    mode: str = "exactly-once",
    batch_size: int = 5,
    window_seconds: int | None = 60,
    throttle: dict[str, int] | None = None,
    throttle_retries: int = 3,
    rules: RuleSet = RULES,
    clock: Any = time.time,
    lifecycle: bool = False,
    **fault_options: Any,
) -> Pipeline:
    client = FaultInjectingClient(ddb, throttle=throttle, layout=rules.layout)
    options = WriterOptions(throttle_retries=throttle_retries, backoff_seconds=0.001)
    processor = create_processor(
        rules, client, table, mode=mode, lifecycle=lifecycle, clock=clock, writer_options=options
    )
    faults = RunnerFaults(client=client, **fault_options)
    runner = StreamRunner(
        processor,
        streams,
        arn,
        batch_size=batch_size,
        tumbling_window_seconds=window_seconds,
        positions=PositionStore(ddb, table, rules.layout),
        faults=faults,
    )
    return Pipeline(client, faults, runner)


def deploy(ddb, streams, table: str, arn: str, rules: RuleSet) -> None:
    """A handler starts with ``rules`` (registering them in the manifest) and processes the
    stream to its end; the positions are kept in the table, so each deployment continues where
    the last one stopped."""
    runner = pipeline(ddb, streams, table, arn, rules=rules, lifecycle=True).runner
    runner.poll_interval = 0.005
    runner.run()
