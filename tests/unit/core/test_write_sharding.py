"""Write sharding and leaderboard partitions: rule checks, where the engine sends changes, the
aggregate kept from its partials' records, and the index partition of a key."""

from __future__ import annotations

import zlib
from decimal import Decimal

import pytest

from aggregator.core.engine import Engine
from aggregator.core.exceptions import ConfigError, RuleError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout, leaderboard_partition
from aggregator.core.lifecycle import rule_fingerprint
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, load_rules, rule
from tests.factories import TTL_IDENTITY, stream_record

RULES = RuleSet.of(
    rule("total", match={"sk": {"prefix": "PATH#"}}, key="TOTAL", write_shards=4),
    rule(
        "per_owner",
        match={"sk": {"prefix": "PATH#"}},
        key="{owner}",
        leaderboard=True,
        leaderboard_partitions=3,
        write_shards=2,
    ),
    rule("plain", match={"sk": {"prefix": "PATH#"}}, key="{owner}", leaderboard=True),
    rule("owners", source="per_owner", key="ALL"),
)


def records(*raw):
    return [StreamRecord(r) for r in raw]


def test_source_records_change_partials_and_plain_rules_their_aggregate():
    item = {"pk": "P1", "sk": "PATH#1", "owner": "ann"}
    batch = Engine(RULES).process(records(stream_record("INSERT", None, item, seq=7)))
    assert set(batch.deltas) == {"~total#TOTAL", "~per_owner#ann", "plain#ann"}
    partial = batch.deltas["~per_owner#ann"]
    # partials are not in the leaderboard index; the writer picks one of write_shards
    assert (partial.ref.partial, partial.leaderboard, partial.write_shards) == (True, False, 2)
    assert batch.deltas["plain#ann"].leaderboard and not batch.deltas["plain#ann"].ref.partial


def partial_record(sort_key, old, new, seq, *, ttl=False, key="ann"):
    pk = f"AGGREGATES#{sort_key}"
    rule_name = sort_key.partition("#")[0]

    def image(value):
        if value is None:
            return None
        return {"pk": pk, "sk": "PARTIAL#001", "value": value, "rule": rule_name, "key": key}

    event = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
    record = stream_record(event, image(old), image(new), seq=seq)
    if ttl:
        record["userIdentity"] = TTL_IDENTITY
    return record


def test_partial_records_change_their_aggregate_by_the_partials_difference():
    engine = Engine(RULES)
    batch = engine.process(
        records(
            partial_record("per_owner#ann", None, 2, 1),
            partial_record("per_owner#ann", 2, 5, 2),
            partial_record("per_owner#ann", 5, 5, 3),  # a checkpoint moved: no change
            partial_record("total#TOTAL", 7, None, 4, key="TOTAL"),  # dropped: retracts
        )
    )
    assert batch.partial_inputs == 4
    assert {k: d.amount for k, d in batch.deltas.items()} == {
        "per_owner#ann": Decimal(5),
        "total#TOTAL": Decimal(-7),
    }
    total = batch.deltas["per_owner#ann"]
    assert total.leaderboard and total.index_partitions == 3 and not total.ref.partial
    assert total.first_sequence_number == "1".zfill(21)


def test_partials_of_unknown_rules_and_ttl_deletes_change_nothing():
    engine = Engine(RULES)
    batch = engine.process(
        records(
            partial_record("gone#x", None, 3, 1, key="x"),  # a rule this handler does not run
            partial_record("per_owner#ann", 3, None, 2, ttl=True),
        )
    )
    assert batch.deltas == {}
    assert (batch.self_writes, batch.partial_inputs) == (1, 1)


def test_partial_keys_are_reserved_and_name_their_aggregate():
    key = DEFAULT_LAYOUT.partial_key("per_owner#ann", 7)
    assert key == {"pk": {"S": "AGGREGATES#per_owner#ann"}, "sk": {"S": "PARTIAL#007"}}
    assert DEFAULT_LAYOUT.partial_total(key) == "per_owner#ann"
    assert DEFAULT_LAYOUT.is_reserved(key)
    user = {"pk": {"S": "AGGREGATES#x"}, "sk": {"S": "ORDER#1"}}
    assert DEFAULT_LAYOUT.partial_total(user) is None and not DEFAULT_LAYOUT.is_reserved(user)


def test_leaderboard_partition_is_a_stable_hash_of_the_sort_key():
    assert leaderboard_partition("r", "r#k", 1) == "r"
    assert leaderboard_partition("r", "r#k", 8) == f"r#{zlib.crc32(b'r#k') % 8}"
    spread = {leaderboard_partition("r", f"r#{i}", 4) for i in range(100)}
    assert spread == {"r#0", "r#1", "r#2", "r#3"}


def test_rule_checks_name_the_field(tmp_path):
    with pytest.raises(RuleError, match="leaderboard_partitions needs leaderboard"):
        rule("r", key="K", leaderboard_partitions=2)
    with pytest.raises(RuleError, match="write_shards cannot be combined with source"):
        rule("d", source="s", key="{value}", write_shards=2)
    with pytest.raises(RuleError, match="write_shards"):
        rule("r", key="K", write_shards=0)
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - {name: r, key: K, write_shards: 101}\n")
    with pytest.raises(RuleError, match=r"rule 'r', field 'write_shards'"):
        load_rules(path)


def test_write_sharding_needs_a_sort_key():
    pk_only = TableLayout(partition_key="id", sort_key=None)
    with pytest.raises(ConfigError, match="write_shards needs a table with a sort key"):
        Engine(RuleSet.of(rule("t", key="TOTAL", write_shards=2), layout=pk_only))


def test_fingerprints_change_only_when_the_placement_is_set():
    plain = rule("r", key="{a}", leaderboard=True)
    assert rule_fingerprint(plain) == rule_fingerprint(rule("r", key="{a}"))
    sharded = rule("r", key="{a}", leaderboard=True, write_shards=2)
    spread = rule("r", key="{a}", leaderboard=True, leaderboard_partitions=2)
    assert len({rule_fingerprint(x) for x in (plain, sharded, spread)}) == 3


def test_rule_files_take_yaml_numbers_and_refuse_partials_without_a_sort_key(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(
        "rules:\n  - {name: r, key: '{k}', leaderboard: true, leaderboard_partitions: 4,"
        " write_shards: 16}\n"
    )
    (r,) = load_rules(good).rules
    assert (r.write_shards, r.leaderboard_partitions) == (16, 4)
    for value in ("2.5", "true", "'many'"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"rules:\n  - {{name: r, key: K, write_shards: {value}}}\n")
        with pytest.raises(RuleError, match=r"bad\.yaml: rule 'r', field 'write_shards'"):
            load_rules(bad)
    pk_only = tmp_path / "pk_only.yaml"
    pk_only.write_text(
        "table: {partition_key: id, sort_key: null}\n"
        "rules:\n  - {name: r, key: K, write_shards: 2}\n"
    )
    with pytest.raises(RuleError, match="field 'write_shards': needs a table with a sort key"):
        load_rules(pk_only)
