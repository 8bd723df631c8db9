"""What check-table warns about although the rules fit (aggregator.dynamodb.tablecheck)."""

from __future__ import annotations

from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.dynamodb.tablecheck import table_warnings


def test_a_plain_table_gets_no_warning():
    assert table_warnings({"TableName": "t"}, DEFAULT_LAYOUT) == []


def test_a_global_table_names_its_replicas_and_the_one_region_rule():
    description = {
        "GlobalTableVersion": "2019.11.21",
        "Replicas": [{"RegionName": "eu-west-1"}, {"RegionName": "us-east-1"}],
    }
    (line,) = table_warnings(description, DEFAULT_LAYOUT)
    assert line.startswith(
        "global table (version 2019.11.21) with replicas in eu-west-1, us-east-1: every "
        "replica's stream carries every write"
    )
    assert (
        "deploy the stack in every Region with the same HomeRegion parameter (CDK: home_region)"
        in line
    )
    assert line.endswith("see docs/deployment/global-tables.md")


def test_a_local_secondary_index_on_a_table_without_a_sort_key_names_each_keys_collection():
    layout = TableLayout(partition_key="id", sort_key=None)
    description = {"LocalSecondaryIndexes": [{"IndexName": "a"}, {"IndexName": "b"}]}
    (line,) = table_warnings(description, layout)
    assert line.startswith("local secondary index a, b: with one, every item collection")
    assert "(of each key)" in line
