"""The one builder of update expressions: placeholders, clause order, conditions."""

from __future__ import annotations

from decimal import Decimal

from aggregator.dynamodb.updates import Update, added_amounts, prune_update, resolved


def test_placeholders_are_assigned_in_order_and_names_reused():
    rendered = (
        Update()
        .add("value", Decimal("-2.5"))
        .set("ck#shard-1", {"S": "x"})
        .where_missing_or_below("ck#shard-1", {"S": "0005"})
        .render()
    )
    assert rendered == {
        "UpdateExpression": "ADD #n0 :v0 SET #n1 = :v1",
        "ExpressionAttributeNames": {"#n0": "value", "#n1": "ck#shard-1"},
        "ExpressionAttributeValues": {
            ":v0": {"N": "-2.5"},
            ":v1": {"S": "x"},
            ":v2": {"S": "0005"},
        },
        "ConditionExpression": "attribute_not_exists(#n1) OR #n1 < :v2",
    }


def test_several_conditions_are_anded_with_their_ors_parenthesized():
    rendered = (
        Update()
        .add("value", Decimal(1))
        .where_missing_or_below("a", {"S": "1"})
        .where_equals("b", {"S": "2"})
        .render()
    )
    assert rendered["ConditionExpression"] == (
        "(attribute_not_exists(#n1) OR #n1 < :v1) AND #n2 = :v2"
    )


def test_prune_removes_each_checkpoint_only_if_unchanged():
    rendered = prune_update({"ck#a": {"S": "1@5"}, "c#b": {"B": b"\x02"}}).render()
    assert resolved(rendered) == {
        "ADD": {},
        "SET": {},
        "REMOVE": ["ck#a", "c#b"],
        "CONDITION": "ck#a = {'S': '1@5'} AND c#b = {'B': b'\\x02'}",
    }


def test_added_amounts_reads_the_add_clause_only():
    rendered = Update().add("value", Decimal(0)).set("rule", {"S": "r"}).render()
    assert added_amounts(rendered) == {"value": Decimal(0)}
    assert added_amounts(Update().remove("x").render()) == {}
    assert added_amounts({}) == {}


def test_paths_into_maps_reuse_each_names_placeholder():
    rendered = (
        Update()
        .set(("rules", "orders", "status"), {"S": "active"})
        .set(("rules", "orders", "at"), {"N": "5"})
        .remove(("generations", "orders"))
        .where_exists(("rules", "orders"))
        .render()
    )
    assert rendered["UpdateExpression"] == (
        "SET #n0.#n1.#n2 = :v0, #n0.#n1.#n3 = :v1 REMOVE #n4.#n1"
    )
    assert rendered["ConditionExpression"] == "attribute_exists(#n0.#n1)"
    assert resolved(rendered) == {
        "ADD": {},
        "SET": {"rules.orders.status": {"S": "active"}, "rules.orders.at": {"N": "5"}},
        "REMOVE": ["generations.orders"],
        "CONDITION": "attribute_exists(rules.orders)",
    }


def test_set_if_missing_keeps_an_existing_value():
    rendered = Update().set_if_missing("after", {"M": {}}).set("x", {"S": "1"}).render()
    assert rendered["UpdateExpression"] == "SET #n0 = if_not_exists(#n0, :v0), #n1 = :v1"
    assert resolved(rendered) == {
        "ADD": {},
        "SET": {"x": {"S": "1"}},
        "SET_IF_MISSING": {"after": {"M": {}}},
        "REMOVE": [],
        "CONDITION": None,
    }


def test_any_of_alternatives_is_ored_and_grouped_with_the_others():
    rendered = (
        Update()
        .set("owner", {"S": "me"})
        .where_exists("rules")
        .where_any(
            Update().where_missing("until"),
            Update().where_below("until", {"N": "9"}),
            Update().where_equals("owner", {"S": "me"}).where_exists("x"),
        )
        .render()
    )
    assert rendered["ConditionExpression"] == (
        "attribute_exists(#n1) AND (attribute_not_exists(#n2) OR #n2 < :v1 OR "
        "(#n0 = :v2 AND attribute_exists(#n3)))"
    )
    alone = Update().where_any(Update().where_missing("a"), Update().where_exists("b")).render()
    assert alone["ConditionExpression"] == "attribute_not_exists(#n0) OR attribute_exists(#n1)"
