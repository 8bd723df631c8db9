"""What changing each rule field on a live table needs (the README's table "Changing a field on
a live table"): a new definition (the handler refuses it until `aggregator rebuild`), nothing,
or a leaderboard index to rewrite; each row against the manifest's own checks."""

from __future__ import annotations

from typing import Any

import pytest

from aggregator.core.lifecycle import (
    RuleState,
    changed_definitions,
    index_stale,
    live_generation,
    rule_fingerprint,
)
from aggregator.core.rules import RuleSet, rule

BASE: dict[str, Any] = {"key": "{customer}", "match": {"type": "order"}}


def _deployed(**fields: Any) -> dict[str, RuleState]:
    """The manifest after deploying ``orders`` with ``fields`` (leaderboard flag recorded)."""
    r = rule("orders", **{**BASE, **fields})
    return {
        "orders": RuleState("orders", rule_fingerprint(r), "active", 0, leaderboard=r.leaderboard)
    }


@pytest.mark.parametrize(
    ("field", "before", "after"),
    [
        ("match", {"type": "order"}, {"type": "refund"}),
        ("key", "{customer}", "{customer}#{region}"),
        ("delta", 1, {"attribute": "amount"}),
        ("ttl_deletes", "keep", "retract"),
        ("write_shards", 1, 4),
        ("leaderboard_partitions", 1, 4),
        (
            "window",
            None,
            {"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]},
        ),
    ],
)
def test_fields_that_change_the_definition_need_a_rebuild(field, before, after):
    extra = {"leaderboard": True} if field == "leaderboard_partitions" else {}
    states = _deployed(**{field: before}, **extra) if before is not None else _deployed(**extra)
    changed = RuleSet.of(rule("orders", **{**BASE, field: after, **extra}))
    # the manifest refuses it (Manifest.register) and reconcile/backfill name rebuild
    assert changed_definitions(changed, states) == ["orders"]
    assert live_generation(changed.get("orders"), states) is None


def test_source_changes_the_definition():
    states = {
        "src": RuleState("src", rule_fingerprint(rule("src", key="{a}")), "active", 0),
        "other": RuleState("other", rule_fingerprint(rule("other", key="{a}")), "active", 0),
    }
    derived = rule("per_value", key="{value}", source="src")
    states["per_value"] = RuleState("per_value", rule_fingerprint(derived), "active", 0)
    moved = RuleSet.of(
        rule("src", key="{a}"),
        rule("other", key="{a}"),
        rule("per_value", key="{value}", source="other"),
    )
    assert changed_definitions(moved, states) == ["per_value"]


def test_description_changes_nothing():
    states = _deployed()
    described = rule("orders", **BASE, description="orders per customer")
    assert changed_definitions(RuleSet.of(described), states) == []
    assert not index_stale(described, states["orders"])


def test_a_new_name_is_a_new_rule():
    states = _deployed()
    renamed = RuleSet.of(rule("orders_v2", **BASE))
    assert changed_definitions(renamed, states) == []  # nothing known under the new name
    assert live_generation(renamed.get("orders_v2"), states) is None  # registered as new


@pytest.mark.parametrize(("before", "after"), [(False, True), (True, False)])
def test_the_leaderboard_flag_leaves_the_definition_and_marks_the_index(before, after):
    states = _deployed(leaderboard=before)
    flipped = rule("orders", **BASE, leaderboard=after)
    assert changed_definitions(RuleSet.of(flipped), states) == []
    assert live_generation(flipped, states) == states["orders"]
    assert index_stale(flipped, states["orders"])
    assert not index_stale(rule("orders", **BASE, leaderboard=before), states["orders"])


def test_an_unrecorded_leaderboard_flag_is_taken_to_match():
    """Manifests written before the flag was recorded: nothing to compare with."""
    r = rule("orders", **BASE, leaderboard=True)
    state = RuleState("orders", rule_fingerprint(r), "active", 0)
    assert not index_stale(r, state)
